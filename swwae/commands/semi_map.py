"""The semi-supervised map: the SWWAE's test error against its labels-only twin
(classifier_only), as a paired difference per seed, over the number of labels and the size
of the unlabelled pool.

    python train.py -m experiment=semi_map
    python scripts/semi_map.py multirun/<time> [more sweep dirs] --out docs/semi_map

writes <out>.md (the table) and <out>.png (errors and paired gains). A job pairs with the
twin of the same seed, labels and pool; a pool the twin was not run at (its loss reads no
unlabelled image, so only its dropout draws and epoch length change) takes the twin of the
full pool at the same seed and labels, and the table says so. Exit status 0, 1 when a job
failed (the rest is reported), 2 for bad input.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import warnings
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from swwae.cli import one_line_errors, script_parser
from swwae.errors import ConfigError, Unreadable
from swwae.files import read_yaml
from swwae.progress import progress
from swwae.stats import mean_std, mean_std_text
from swwae.training.probing import load_data
from swwae.training.sweep.figures import save_figure
from swwae.training.sweep.jobs import collect

TWIN = "classifier_only"

# helpers


@dataclass(frozen=True)
class Cell:
    labels: int
    pool: int | None  # label-hidden training images kept; None: all of them


def saved_config(job_folder: Path):
    """A job's saved config, read with bounds (``swwae.files``) and as plain YAML first."""
    path = job_folder / ".hydra" / "config.yaml"
    value = read_yaml(path, "saved config")
    if not isinstance(value, dict):
        raise Unreadable(f"saved config {path} is unreadable: not a mapping")
    return OmegaConf.create(value)


def read_runs(sweep_dirs) -> tuple[dict, list[str], int]:
    """{(model, Cell, seed): test error %}, the failed jobs, and the training split's size
    (read from the first job's data config)."""
    runs, failed, first = {}, [], None
    for folder in progress(sweep_dirs, "semi map: reading", name=str):
        summary = collect(folder)
        failed += [f"{folder}/{j.folder.name}" for j in summary.failed]
        for job in (j for j in summary.jobs if j.ok):
            config = saved_config(job.folder)
            data = config.data
            if data.get("num_labels") is None or "test/acc" not in job.metrics:
                raise ConfigError(f"{job.folder} is not a semi-supervised run with a test accuracy")
            cell = Cell(int(data.num_labels), None if data.get("num_unlabelled") is None else int(data.num_unlabelled))
            runs[(job.record.get("model"), cell, int(job.seed))] = 100 * (1 - job.metrics["test/acc"])
            first = first or job.folder
    if not runs:
        raise ConfigError(f"no finished semi-supervised job in {', '.join(map(str, sweep_dirs))}")
    config = OmegaConf.to_container(saved_config(first).data, resolve=True)  # data.seed: ${seed}
    return (
        runs,
        failed,
        len(load_data(config, source=str(first / ".hydra" / "config.yaml")).train_y),
    )  # the training split, every image


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
        entry = table.setdefault(cell, {"model": [], "twin": [], "gain": [], "seeds": [], "twin_cell": twin_cell})
        entry["model"].append(error)
        if twin is not None:
            entry["twin"].append(twin)
            entry["gain"].append(twin - error)
            entry["seeds"].append(seed)
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
    parser.add_argument("--out", type=Path, default=None, help="prefix of the .md and .png (default: <first>/semi_map)")
    parser.add_argument("--model", default="swwae_hard", help="the model paired with its twin")
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    runs, failed, train_size = read_runs(args.sweep_dirs)
    table = pairs(runs, args.model)
    if not table:
        raise ConfigError(f"no {args.model} job in {', '.join(map(str, args.sweep_dirs))}")
    out = args.out or args.sweep_dirs[0] / "semi_map"
    out.parent.mkdir(parents=True, exist_ok=True)
    text = markdown(table, args.model, train_size)
    out.with_suffix(".md").write_text(text)
    figure(table, args.model, out.with_suffix(".png"), train_size)
    print(text, end="")
    for job in failed:
        print(f"failed: {job}")
    print(f"-> {out.with_suffix('.md')}, {out.with_suffix('.png')}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
