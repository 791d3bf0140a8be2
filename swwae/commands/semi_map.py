"""The semi-supervised map: the SWWAE's test error against its labels-only twin
(classifier_only), as a paired difference per seed, over the number of labels and the size
of the unlabelled pool.

    python train.py -m experiment=semi_map
    swwae semi-map multirun/<time> [more sweep dirs] --out docs/semi_map

writes <out>.md (the table) and <out>.png (errors and paired gains): --out is a prefix, or a
folder for semi_map.md and semi_map.png there; without it, semi_map.md and semi_map.png in the
current folder (never in a sweep folder, which may be read-only). A job pairs with the
twin of the same seed, labels and pool; a pool the twin was not run at (its loss reads no
unlabelled image, so only its dropout draws and epoch length change) takes the twin of the
full pool at the same seed and labels, and the table says so; a cell run twice at one seed
(sweeps that overlap) is refused in one line. Each job's records are read as
data (its saved config as plain YAML, never resolved); a job whose records do not hold what
the map needs is left out, in one line saying why. Exit status 0, 1 when a job failed or was
left out (the rest is reported), 2 for bad input or when no job is left.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import warnings
from dataclasses import dataclass
from pathlib import Path

from swwae.cli import one_line_errors, script_parser
from swwae.commands.outputs import report_file, report_prefix, writing
from swwae.errors import ConfigError, Unreadable
from swwae.progress import progress
from swwae.stats import mean_std, mean_std_text
from swwae.training.probing import load_data
from swwae.training.sweep.figures import save_figure
from swwae.training.sweep.jobs import Job, collect
from swwae.training.sweep.records import (
    accuracy_of,
    bad_job,
    check_distinct,
    count,
    none_left,
    not_ok,
    saved_config,
    section,
    seed_of,
)

TWIN = "classifier_only"

# helpers


@dataclass(frozen=True)
class Cell:
    labels: int
    pool: int | None  # label-hidden training images kept; None: all of them


def job_run(job: Job) -> tuple[tuple, float, dict]:
    """(model, Cell, seed), the test error % and the data section of a finished job, every value
    checked (``Unreadable`` says which is not what the map needs)."""
    data = section(saved_config(job), "data")
    if data.get("num_labels") is None or "test/acc" not in job.metrics:
        raise ConfigError(f"{job.folder} is not a semi-supervised run with a test accuracy")
    labels, pool = count(data["num_labels"], "data.num_labels"), data.get("num_unlabelled")
    cell = Cell(labels, None if pool is None else count(pool, "data.num_unlabelled"))
    return (job.record.get("model"), cell, seed_of(job)), 100 * (1 - accuracy_of(job)), data


def check_once(key: tuple, job: Job, seen: dict) -> None:
    """``ConfigError`` when another job already ran ``key`` (model, cell, seed): a cell has one run
    a seed, and which of two the map should pair is not for it to guess (the later one replaced
    the earlier without a word). ``seen``: {key: job folder}."""
    if key in seen:
        model, cell, seed = key
        pool = "all" if cell.pool is None else cell.pool
        raise ConfigError(
            f"{job.folder} and {seen[key]} are both {model} at {cell.labels} labels, unlabelled pool {pool}, "
            f"with seed {seed}: a cell has one run a seed, and the map cannot tell which of the two to pair"
        )
    seen[key] = job.folder


def read_runs(sweep_dirs) -> tuple[dict, list[str], list[str], int]:
    """{(model, Cell, seed): test error %}, the failed jobs, the lines of the jobs left out, and
    the training split's size (read from the first job's data config)."""
    check_distinct(sweep_dirs)
    runs, failed, bad, first, seen = {}, [], [], None, {}
    for folder in progress(sweep_dirs, "semi map: reading", name=str):
        summary = collect(folder)
        failed_jobs, unreadable = not_ok(summary.jobs)
        failed += [f"{folder}/{j.folder.name}" for j in failed_jobs]
        bad += unreadable
        for job in (j for j in summary.jobs if j.ok):
            try:
                key, error, data = job_run(job)
            except Unreadable as err:
                bad.append(bad_job(job, err))
                continue
            check_once(key, job, seen)
            runs[key] = error
            first = first or (job, data)
    if not runs:
        raise none_left("finished semi-supervised job", sweep_dirs, bad)
    job, data = first
    source = str(job.folder / ".hydra" / "config.yaml")
    return runs, failed, bad, len(load_data(data, source=source).train_y)  # the training split, every image


def pairs(runs: dict, model: str) -> dict[Cell, dict]:
    """Per cell: the model's errors, the twin's, and the paired gains (twin - model), by seed."""
    table = {}
    for (name, cell, seed), error in sorted(
        runs.items(), key=lambda kv: (kv[0][1].labels, kv[0][1].pool or 1e9, kv[0][2])
    ):
        if name != model:
            continue
        twin_cell = cell if (TWIN, cell, seed) in runs else Cell(cell.labels, None)
        twin = runs.get((TWIN, twin_cell, seed))
        entry = table.setdefault(
            cell, {"model": [], "twin": [], "gain": [], "seeds": [], "unpaired": [], "twin_cell": twin_cell}
        )
        entry["model"].append(error)
        if twin is not None:
            entry["twin"].append(twin)
            entry["gain"].append(twin - error)
            entry["seeds"].append(seed)
        else:  # in the model's mean, not in the gain's: the table says so (the columns do not subtract)
            entry["unpaired"].append(seed)
    return table


def pool_text(cell: Cell, train_size: int | None) -> str:
    if cell.pool is not None:
        return f"{cell.pool:,}"
    return f"all ({train_size - cell.labels:,})" if train_size else "all"


def markdown(table: dict, model: str, train_size: int | None) -> str:
    lines = [
        f"| labels | unlabelled | {model} error % | {TWIN} error % | gain, paired (points) | per seed | twin |",
        "|---:|---:|---:|---:|---:|---|---|",
    ]
    for cell, e in table.items():
        per_seed = ", ".join(f"{g:+.1f}" for g in e["gain"]) or "-"
        twin = "same cell" if e["twin_cell"] == cell else f"full pool ({pool_text(e['twin_cell'], train_size)})"
        if e["unpaired"]:
            seeds = "seed" if len(e["unpaired"]) == 1 else "seeds"
            twin += f"; no twin at {seeds} {', '.join(map(str, e['unpaired']))} (in its mean, not the gain's)"
        lines.append(
            f"| {cell.labels} | {pool_text(cell, train_size)} | {mean_std_text(e['model'])} | "
            f"{mean_std_text(e['twin'])} | {mean_std_text(e['gain'], sign=True)} | {per_seed} | {twin} |"
        )
    return "\n".join(lines) + "\n"


def figure(table: dict, model: str, out: Path, train_size: int | None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    full = train_size or 4000
    axes_cells = {
        "labels (every unlabelled image)": [c for c in table if c.pool is None],
        "unlabelled images (100 labels)": sorted([c for c in table if c.labels == 100], key=lambda c: c.pool or full),
    }
    fig, axes = plt.subplots(2, 2, figsize=(11, 7), sharex="col")
    for col, (xlabel, cells) in enumerate(axes_cells.items()):
        xs = [c.labels if col == 0 else (c.pool or full - c.labels) for c in cells]
        for row, series in enumerate([[("model", model), ("twin", TWIN)], [("gain", "gain: twin - SWWAE")]]):
            ax = axes[row][col]
            for i, (key, name) in enumerate(series):
                stats = [mean_std(table[c][key]) for c in cells]  # (nan, None) for an empty cell
                ax.errorbar(
                    xs,
                    [m for m, _ in stats],
                    yerr=[s or 0 for _, s in stats],
                    marker="o",
                    capsize=3,
                    label=name,
                    color=f"C{i if row == 0 else 2}",
                )
                for x, c in zip(xs, cells):
                    ax.scatter(
                        [x] * len(table[c][key]), table[c][key], s=10, color=f"C{i if row == 0 else 2}", alpha=0.5
                    )
            if row == 1:
                ax.axhline(0, color="k", lw=0.8)
            ax.set_xscale("log")
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.minorticks_off()
            ax.set_ylabel("test error %" if row == 0 else "gain, points (paired by seed)")
            ax.legend(fontsize=8)
        axes[1][col].set_xlabel(xlabel)
    fig.suptitle("Where does the reconstruction help? SWWAE vs the same network on the labels alone")
    return save_figure(fig, out)


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("sweep_dirs", type=Path, nargs="+")
    parser.add_argument(
        "--out", type=str, default=None, help="prefix of the .md and .png, or a folder (default: ./semi_map)"
    )
    parser.add_argument("--model", default="swwae_hard", help="the model paired with its twin")
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    out = report_prefix(args.out, "semi_map", "--out")
    runs, failed, bad, train_size = read_runs(args.sweep_dirs)
    table = pairs(runs, args.model)
    if not table:
        raise none_left(f"{args.model} job", args.sweep_dirs, bad)
    text = markdown(table, args.model, train_size)
    with writing(report_file(out, ".md")) as path:
        path.write_text(text)
    with writing(report_file(out, ".png")) as path:
        figure(table, args.model, path, train_size)
    print(text, end="")
    for job in failed:
        print(f"failed: {job}")
    for line in bad:
        print(line)
    print(f"-> {report_file(out, '.md')}, {report_file(out, '.png')}")
    return 1 if failed or bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
