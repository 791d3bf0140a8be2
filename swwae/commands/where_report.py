"""Is the where worth it? The report of a study whose arms share their seeds
(``experiment=semi_where``: swwae_hard, upsample, classifier_only at 100 labels, 10 seeds).

    python train.py -m experiment=semi_where
    swwae where-report multirun/<time> [more sweep dirs] --out docs/semi_where

Per arm: the test error (and, for arms that reconstruct, the test reconstruction MSE) as a
mean with its 95% t interval over seeds. Per pair of arms: the difference by seed, its 95%
t interval and Wilcoxon's signed-rank test over seeds, and McNemar's exact test on the test
images of all seeds pooled (each run's ``test_outcomes.csv``: the runs of one seed are
tested on the same images, so they pair image by image). Writes <out>.md (the tables) and
<out>.png (the paired differences, one dot a seed): --out is a prefix, or a folder for where.md
and where.png there; without it, where.md and where.png in the current folder (never in a sweep
folder, which may be read-only). Nothing is trained or evaluated again: the numbers are the
ones each run wrote when it read its test split, once. Each job's records are read as data
(its saved config as plain YAML, never resolved); a job whose records do not hold what the
report needs is left out, in one line saying why.

The arms are the runs' models unless ``--by`` names another setting of theirs: ``--by
trainer.precision`` pairs a sweep's ``trainer.precision=32-true,bf16-mixed`` runs seed by seed
(the key as in the saved config; a sweep that varies more than that setting is reported one
value of the rest at a time: a second run of an arm and seed is refused in one line).

Exit status 0, 1 when a job failed or was left out (the rest is reported), 2 for bad input or
when no job is left.
"""

from __future__ import annotations

import csv
import io
import itertools
from dataclasses import dataclass
from pathlib import Path

from swwae.cli import one_line_errors, script_parser
from swwae.commands.outputs import report_file, report_prefix, writing
from swwae.errors import ConfigError, Unreadable, plural
from swwae.files import read_text
from swwae.stats import Interval, McNemar, PairedDifference, mcnemar, paired_difference, t_interval, verdict
from swwae.training.run import MAX_OUTCOMES_BYTES
from swwae.training.sweep.jobs import Job, collect
from swwae.training.sweep.records import (
    accuracy_of,
    bad_job,
    check_distinct,
    left_out,
    none_left,
    not_ok,
    saved_config,
    seed_of,
    setting,
    trains_reconstruction,
)

ARMS_BY_DEFAULT = "model"  # --by: the arms are the runs' model choices

# classes


@dataclass
class Run:
    arm: str
    seed: int
    error_pct: float
    recon_mse: float | None
    reconstructs: bool  # lambda_rec > 0: the reconstruction is trained, so its MSE means something
    outcomes: list[tuple[int, int]]  # (label, prediction) per test image, in the split's order


@dataclass
class Comparison:
    a: str
    b: str
    error: PairedDifference  # error % of a - error % of b, by seed
    images: McNemar | None  # pooled over the shared seeds
    recon: PairedDifference | None  # recon MSE of a - of b, where both reconstruct


# reading


def bounded_text(path: Path, limit: int) -> str:
    """A file a run wrote, read as ``swwae.files`` reads every file: a regular file, bounded."""
    if not path.exists():
        raise ConfigError(f"{path} is not there (was the run tested? test=true writes it)")
    return read_text(path, path.name, limit)


def read_outcomes(path: Path) -> list[tuple[int, int]]:
    """(label, prediction) per test image, as the run wrote them (``index,label,prediction,recon_mse``)."""
    rows = []
    try:
        reader = csv.DictReader(io.StringIO(bounded_text(path, MAX_OUTCOMES_BYTES)))
        for i, row in enumerate(reader):
            if int(row["index"]) != i:
                raise ValueError(f"row {i + 1} has index {row['index']}")
            rows.append((int(row["label"]), int(row["prediction"])))
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{path} is unreadable: {err}") from None
    return rows


def arm_of(job: Job, by: str, config: dict | None) -> str:
    """The job's arm: its model choice (``by`` = ``model``), else its value of the setting ``by``
    in its saved config (``Unreadable`` where that is missing)."""
    if by == ARMS_BY_DEFAULT:
        return str(job.record.get("model"))
    value = setting(config or {}, by)
    if value is None:
        raise Unreadable(f"its saved config has no setting {by} (--by {by})")
    return str(value).lower() if isinstance(value, bool) else str(value)


def job_run(job: Job, seen: dict, by: str = ARMS_BY_DEFAULT) -> Run:
    """A finished job's run, every value checked (``Unreadable``: what its records lack), its arm
    by ``arm_of``; ``seen`` ({(arm, seed): job folder}) refuses a second run of an arm and seed."""
    metrics = job.metrics
    if "test/acc" not in metrics:
        raise ConfigError(f"{job.folder} has no test/acc: not a tested run with a classifier")
    config = saved_config(job, required=by != ARMS_BY_DEFAULT)
    arm, seed, accuracy = arm_of(job, by, config), seed_of(job), accuracy_of(job)
    reconstructs = trains_reconstruction(config)
    if (arm, seed) in seen:
        raise ConfigError(
            f"{job.folder} and {seen[arm, seed]} are both {by}={arm} with seed {seed}: an arm has one run a seed "
            "(--by names the setting the arms differ in)"
        )
    seen[arm, seed] = job.folder
    outcomes = read_outcomes(job.folder / "test_outcomes.csv")
    right = sum(y == p for y, p in outcomes) / len(outcomes) if outcomes else float("nan")
    if abs(right - accuracy) > 1e-6:
        raise ConfigError(f"{job.folder}: test_outcomes.csv gives accuracy {right:.4f}, metrics.json {accuracy:.4f}")
    return Run(arm, seed, metrics["test/error_pct"], metrics.get("test/recon_mse"), reconstructs, outcomes)


def read_runs(sweep_dirs: list[Path], by: str = ARMS_BY_DEFAULT) -> tuple[list[Run], list[str]]:
    """Every finished job's run (its arm by ``arm_of``), and one line for each job that failed or
    was left out."""
    check_distinct(sweep_dirs)
    runs, failed, bad, seen = [], [], [], {}
    for sweep_dir in sweep_dirs:
        summary = collect(sweep_dir)
        failed_jobs, unreadable = not_ok(summary.jobs)
        failed += [f"failed: {j.folder}: {j.record.get('error', 'failed')}" for j in failed_jobs]
        bad += unreadable
        for job in (j for j in summary.jobs if j.ok):
            try:
                runs.append(job_run(job, seen, by))
            except Unreadable as err:
                bad.append(bad_job(job, err))
    if not runs:
        raise none_left("finished job", sweep_dirs, bad)
    return runs, failed + bad


# statistics


def arms_of(runs: list[Run], wanted: list[str] | None) -> list[str]:
    found = list(dict.fromkeys(r.arm for r in runs))
    if not wanted:
        return found
    missing = [a for a in wanted if a not in found]
    if missing:
        raise ConfigError(f"no finished run of {', '.join(missing)}; the sweep has {', '.join(found)}")
    return wanted


def by_seed(runs: list[Run], arm: str) -> dict[int, Run]:
    return {r.seed: r for r in runs if r.arm == arm}


def pooled_mcnemar(a: dict[int, Run], b: dict[int, Run]) -> McNemar:
    """McNemar on every test image of every shared seed; the two runs of a seed must have been
    tested on the same images (the same labels in the same order)."""
    right_a, right_b = [], []
    for seed in sorted(set(a) & set(b)):
        if [y for y, _ in a[seed].outcomes] != [y for y, _ in b[seed].outcomes]:
            raise ConfigError(f"seed {seed}: {a[seed].arm} and {b[seed].arm} were tested on different images")
        right_a += [y == p for y, p in a[seed].outcomes]
        right_b += [y == p for y, p in b[seed].outcomes]
    return mcnemar(right_a, right_b)


def compare(runs: list[Run], a: str, b: str) -> Comparison:
    ra, rb = by_seed(runs, a), by_seed(runs, b)
    error = paired_difference({s: r.error_pct for s, r in ra.items()}, {s: r.error_pct for s, r in rb.items()})
    both_reconstruct = all(r.reconstructs and r.recon_mse is not None for r in [*ra.values(), *rb.values()])
    recon = None
    if both_reconstruct:
        recon = paired_difference({s: r.recon_mse for s, r in ra.items()}, {s: r.recon_mse for s, r in rb.items()})
    return Comparison(a, b, error, pooled_mcnemar(ra, rb), recon)


# output


def markdown(
    runs: list[Run], arms: list[str], comparisons: list[Comparison], failed: list[str], by: str = ARMS_BY_DEFAULT
) -> str:
    seeds = sorted({r.seed for r in runs})
    lines = [
        f"{plural(len(runs), 'run')}, seeds {seeds[0]}-{seeds[-1]} ({len(seeds)}); "
        "95% t intervals over seeds in brackets.",
        "",
        f"| {'arm' if by == ARMS_BY_DEFAULT else by} | seeds | test error % | per seed | test recon MSE |",
        "|---|---:|---:|---|---:|",
    ]
    for arm in arms:
        mine = sorted(by_seed(runs, arm).values(), key=lambda r: r.seed)
        error = t_interval([r.error_pct for r in mine])
        measured = all(r.reconstructs and r.recon_mse is not None for r in mine)
        recon = t_interval([r.recon_mse for r in mine]) if measured else None
        lines.append(
            f"| {arm} | {len(mine)} | {error.text()} | {', '.join(f'{r.error_pct:.1f}' for r in mine)} | "
            f"{recon.text(4) if recon else '- (not trained)'} |"
        )
    lines += [
        "",
        "Test error, paired by seed (A - B in points: below 0, A errs less); McNemar on the test images of all "
        "shared seeds pooled (A right where B is wrong / the reverse):",
        "",
        "| A - B | seeds | difference, points | A better / tie / B better | Wilcoxon p | McNemar | McNemar p "
        "| finding |",
        "|---|---:|---:|---|---:|---:|---:|---|",
    ]
    for c in comparisons:
        a_worse, tie, a_better = c.error.favours
        m = c.images
        lines.append(
            f"| {c.a} - {c.b} | {c.error.interval.n} | {c.error.interval.text(sign=True)} | "
            f"{a_better} / {tie} / {a_worse} | {c.error.wilcoxon_p:.3g} | {m.only_a} / {m.only_b} | {m.p:.3g} | "
            f"{verdict(c.error)} |"
        )
    recon = [c for c in comparisons if c.recon is not None]
    if recon:
        lines += [
            "",
            "Test reconstruction MSE, paired by seed (A - B: below 0, A reconstructs better):",
            "",
            "| A - B | seeds | difference | relative to B | Wilcoxon p | finding |",
            "|---|---:|---:|---:|---:|---|",
        ]
        for c in recon:
            b_mean = t_interval([r.recon_mse for r in by_seed(runs, c.b).values()]).mean
            lines.append(
                f"| {c.a} - {c.b} | {c.recon.interval.n} | {c.recon.interval.text(5, sign=True)} | "
                f"{c.recon.interval.mean / b_mean:+.0%} | {c.recon.wilcoxon_p:.3g} | {verdict(c.recon)} |"
            )
    lines += ["", *failed] if failed else []
    return "\n".join(lines) + "\n"


def figure(comparisons: list[Comparison], out: Path) -> Path:
    """One panel per paired comparison: a dot per seed, the mean and its 95% interval, 0 marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from swwae.training.sweep.figures import save_figure

    panels = [(c, "error", c.error, "test error, A - B (points)") for c in comparisons]
    panels += [(c, "recon", c.recon, "test recon MSE, A - B") for c in comparisons if c.recon is not None]
    fig, axes = plt.subplots(1, len(panels), figsize=(3.2 * len(panels), 4), squeeze=False)
    for ax, (c, _, diff, ylabel) in zip(axes[0], panels):
        xs = [0.0 + 0.06 * ((i % 5) - 2) for i in range(len(diff.differences))]
        ax.scatter(xs, diff.differences, s=22, alpha=0.7, color="C0", zorder=3, label="one seed")
        interval: Interval = diff.interval
        if interval.n > 1:
            ax.errorbar(
                [0.35],
                [interval.mean],
                yerr=[[interval.mean - interval.low], [interval.high - interval.mean]],
                fmt="D",
                color="C3",
                capsize=5,
                label="mean, 95% interval",
            )
        ax.axhline(0, color="k", lw=0.8)
        ax.set_xlim(-0.4, 0.7)
        ax.set_xticks([])
        ax.set_title(f"{c.a}\n- {c.b}", fontsize=9)
        ax.set_ylabel(ylabel, fontsize=9)
    axes[0][0].legend(fontsize=7, loc="best")
    fig.suptitle("Paired by seed: below 0, A is better", fontsize=10)
    return save_figure(fig, out)


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("sweep_dirs", type=Path, nargs="+")
    parser.add_argument(
        "--out", type=str, default=None, help="prefix of the .md and .png, or a folder (default: ./where)"
    )
    parser.add_argument(
        "--by",
        default=ARMS_BY_DEFAULT,
        metavar="KEY",
        help="the setting whose values are the arms: model (the model choice), or a key of the saved "
        "config such as trainer.precision (default: model)",
    )
    parser.add_argument("--arms", nargs="+", default=None, help="the arms (values of --by) in order (default: all)")
    args = parser.parse_args(argv)
    if args.by == "seed":
        raise ConfigError(
            "--by seed: the seeds pair the arms, they cannot be the arms; name the setting the arms differ in"
        )
    out = report_prefix(args.out, "where", "--out")
    runs, failed = read_runs(args.sweep_dirs, args.by)
    arms = arms_of(runs, args.arms)
    if len(arms) < 2:
        raise ConfigError(f"one arm ({arms[0]}): nothing to compare{left_out(failed)}")
    comparisons = [compare(runs, a, b) for a, b in itertools.combinations(arms, 2)]
    text = markdown([r for r in runs if r.arm in arms], arms, comparisons, failed, args.by)
    with writing(report_file(out, ".md")) as path:
        path.write_text(text)
    with writing(report_file(out, ".png")) as path:
        figure(comparisons, path)
    print(text, end="")
    print(f"-> {report_file(out, '.md')}, {report_file(out, '.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
