"""The feature study's table and figure: every checkpoint of a sweep probed with the frozen-
feature probes of swwae probe, beside its own architecture with random weights (the
job's seed) and the raw pixels; mean ± sample std over seeds per config.

    python train.py -m experiment=feature_study
    swwae feature-study multirun/<time> --out docs/feature_study

writes <out>.md (the table), <out>.png (the figure) and <out>.json (every row, per seed):
--out is a prefix, or a folder for features.md/.png/.json there; without it, features.* in
the current folder (never in the sweep folder, which may be read-only). A checkpoint is read
only from the sweep folder or --checkpoints (the folder train.py wrote them into:
./checkpoints unless paths.checkpoint_dir said otherwise); a job whose record names one
elsewhere, or none there, is left out in one line, before anything is opened. Every model is
probed on the same labelled subsets (--seed), its regularisation picked on the validation
split, the test split read once per model. Exit status 0, 1 when a job of the sweep failed or
was left out (the rest is reported), 2 for bad input or when no job is left.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import json
import warnings
from pathlib import Path

import swwae
from swwae.cli import add_checkpoint_folders, one_line_errors, script_parser
from swwae.commands.outputs import report_file, report_prefix, writing
from swwae.errors import ConfigError, Unreadable
from swwae.probe import random_like
from swwae.progress import progress
from swwae.stats import mean_std, mean_std_text
from swwae.training.probing import (
    check_probe_settings,
    check_same_split,
    encoder_key,
    load_data,
    parse_labels,
    probe_model,
    subsets_for,
)
from swwae.training.sweep.figures import save_figure
from swwae.training.sweep.jobs import Job, collect
from swwae.training.sweep.records import bad_job, none_left, not_ok, seed_of, trains_reconstruction

# helpers


def top_change(row: dict, px: int) -> float:
    top = list(row["invariance"].values())[-1]  # pixels, stage_1, ..., the top stage last
    return top[px] if px in top else top[str(px)]  # int keys, or str ones read back from the .json


def probe_job(job: Job, roots) -> tuple[Path, int]:
    """The job's checkpoint (``Job.checkpoint``: only from the sweep folder or ``roots``) and
    its seed; ``Unreadable`` says why the job cannot be probed."""
    path, seed = job.checkpoint(roots), seed_of(job)
    if path is None or not path.is_file():
        raise Unreadable(f"no checkpoint at {path}" if path is not None else "no checkpoint named, nor a run folder")
    return path, seed


def probe_sweep(sweep_dir: Path, labels, seed: int, k: int, shifts, roots=()) -> dict:
    summary = collect(sweep_dir)
    failed, bad = not_ok(summary.jobs)
    jobs = []  # (job, its checkpoint, its seed)
    for job in (j for j in summary.jobs if j.ok):
        try:
            jobs.append((job, *probe_job(job, roots)))
        except Unreadable as err:
            bad.append(bad_job(job, err))
    if not jobs:
        raise none_left("finished job with a checkpoint", [sweep_dir], bad)
    label = {id(j): " ".join(g.keys.values()) or g.label for g in summary.groups for j in g.jobs}
    nets = {str(path): swwae.load(path) for _, path, _ in jobs}
    check_same_split({path: net.config for path, net in nets.items()})
    first = next(iter(nets))
    data = load_data((nets[first].config or {}).get("data"), source=first)
    subsets = subsets_for(data, labels, seed)
    rows = [probe_model("pixels", data, subsets, k=k, shifts=shifts) | {"group": "pixels", "seed": None}]
    randoms = {}
    for job, path, job_seed in progress(
        jobs, "feature study: probing", name=lambda entry: str(entry[0].record.get("run_name"))
    ):
        net = nets[str(path)]
        group = label[id(job)]
        row = probe_model(str(job.record.get("run_name")), data, subsets, net, k, shifts=shifts)
        trains_recon = trains_reconstruction(net.config)  # else its decoder is untrained
        rows.append(
            row
            | {
                "group": group,
                "seed": job_seed,
                "test/recon_mse": job.metrics.get("test/recon_mse") if trains_recon else None,
                "test/acc": job.metrics.get("test/acc"),
                "encoder": encoder_key(net),
            }
        )
        key = (encoder_key(net), job_seed)
        if net.classifier is None and key not in randoms:  # the supervised arm's encoder is hard's
            randoms[key] = probe_model(
                f"random {key[0]} seed{job_seed}", data, subsets, random_like(net, seed=job_seed), k, shifts=shifts
            ) | {"group": f"random weights ({group})", "seed": job_seed}
    rows.extend(randoms.values())
    return {
        "sweep": str(sweep_dir),
        "data": data.name,
        "labels": list(subsets),
        "seed": seed,
        "k": k,
        "shifts": list(shifts),
        "failed": [str(j.folder.name) for j in failed],
        "left_out": bad,
        "rows": rows,
    }


def groups(result: dict) -> dict[str, list[dict]]:
    """Rows by group: pixels, then each trained config followed by its random-weights twin."""
    by_group: dict[str, list[dict]] = {}
    for row in result["rows"]:
        by_group.setdefault(row["group"], []).append(row)
    order = ["pixels"]
    for name in by_group:
        if name != "pixels" and not name.startswith("random"):
            order += [name] + ([f"random weights ({name})"] if f"random weights ({name})" in by_group else [])
    return {name: by_group[name] for name in order}


def markdown(result: dict, px: int = 2) -> str:
    labels = result["labels"]
    head = [
        "features",
        "seeds",
        *(f"linear {n}" for n in labels),
        *(f"k-NN {n}" for n in labels),
        f"top-what change, {px} px shift",
        "test recon MSE",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, rows in groups(result).items():
        seeds = len(rows) if rows[0]["seed"] is not None else "-"
        values = [
            *(mean_std_text([r["linear"][n] for r in rows], 1, scale=100) for n in labels),
            *(mean_std_text([r["knn"][n] for r in rows], 1, scale=100) for n in labels),
            mean_std_text([top_change(r, px) for r in rows], 3),
            mean_std_text([r.get("test/recon_mse") for r in rows], 4),
        ]
        lines.append(f"| {name} | {seeds} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def figure(result: dict, out: Path, px: int = 2) -> Path:
    import matplotlib
    import matplotlib.ticker

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    table = groups(result)
    trained = [n for n in table if n != "pixels" and not n.startswith("random")]
    few = result["labels"][0]
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.8))
    x = range(len(trained))
    for offset, (suffix, style) in enumerate([("", {}), ("random", {"hatch": "//", "alpha": 0.5})]):
        names = [n if not suffix else f"random weights ({n})" for n in trained]
        for ax, value in [(axes[0], lambda r: 100 * r["linear"][few]), (axes[2], lambda r: top_change(r, px))]:
            means = [mean_std([value(r) for r in table.get(n, [])])[0] for n in names]
            stds = [mean_std([value(r) for r in table.get(n, [])])[1] or 0 for n in names]
            ax.bar(
                [i + 0.4 * offset - 0.2 for i in x],
                means,
                0.4,
                yerr=stds,
                capsize=2,
                label="trained" if not suffix else "random weights",
                color=f"C{offset}",
                **style,
            )
    pixels = table["pixels"][0]
    axes[0].axhline(100 * pixels["linear"][few], color="k", ls="--", lw=1, label="raw pixels")
    axes[0].set(ylabel=f"linear probe accuracy %, {few} labels", title="frozen top what, linear probe")
    axes[0].set_ylim(bottom=max(0, min(p.get_height() for p in axes[0].patches) - 10))
    axes[2].axhline(top_change(pixels, px), color="k", ls="--", lw=1, label="raw pixels")
    axes[2].set(ylabel=f"||f(shift x) - f(x)|| / ||f(x)||, {px} px", title="top what's change under a shift")
    for ax in (axes[0], axes[2]):
        ax.set_xticks(list(x), trained, rotation=35, ha="right")
        ax.legend(fontsize=8)
    for i, name in enumerate(trained):
        rows = [r for r in table[name] if r.get("test/recon_mse")]
        if not rows:  # a model that does not train its decoder (the supervised reference)
            continue
        axes[1].scatter(
            [r["test/recon_mse"] for r in rows],
            [100 * r["linear"][few] for r in rows],
            color=f"C{i % 10}",
            marker="os^D"[i // 10 % 4],
            label=name,
        )
    axes[1].set(
        xscale="log",
        xlabel="test reconstruction MSE (log)",
        ylabel=f"linear probe accuracy %, {few} labels",
        title="reconstruction vs feature quality, per seed",
    )
    axes[1].xaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 5.0)))
    axes[1].xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    axes[1].xaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    axes[1].legend(fontsize=7)
    return save_figure(fig, out)


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("sweep_dir", type=Path)
    parser.add_argument(
        "--out", type=str, default=None, help="prefix of the .md/.png/.json, or a folder (default: ./features)"
    )
    add_checkpoint_folders(parser, "the study")
    parser.add_argument("--labels", nargs="+", default=["100", "1000", "all"])
    parser.add_argument("--seed", type=int, default=0, help="draws the labelled subsets")
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--shifts", type=int, nargs="+", default=[1, 2, 3])
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    labels = parse_labels(args.labels)
    check_probe_settings(args.k, args.seed, args.shifts)
    if 2 not in args.shifts:
        raise ConfigError("--shifts must include 2: the table reports the 2 px shift")
    out = report_prefix(args.out, "features", "--out")
    roots = args.checkpoints or [Path("checkpoints")]
    result = probe_sweep(args.sweep_dir, labels, args.seed, args.k, args.shifts, roots)
    text = markdown(result)
    with writing(report_file(out, ".md")) as path:
        path.write_text(text)
    with writing(report_file(out, ".json")) as path:
        path.write_text(json.dumps(result, indent=2))
    with writing(report_file(out, ".png")) as path:
        figure(result, path)
    print(text, end="")
    for line in [*(f"failed: {name}" for name in result["failed"]), *result["left_out"]]:
        print(line)
    print(f"-> {report_file(out, '.md')}, {report_file(out, '.png')}, {report_file(out, '.json')}")
    return 1 if result["failed"] or result["left_out"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
