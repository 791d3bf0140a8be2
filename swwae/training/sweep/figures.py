"""The sweep figures: ``summary.png`` (metrics over configs and seeds) and, on demand, one
picture of every config's reconstructions (``scripts/compare_runs.py --recon``).

Apart from the table because they need matplotlib (imported when drawing) and, for the
reconstructions, the checkpoints and the data of the jobs.
"""

from __future__ import annotations

import json
import logging
import math
import textwrap
from pathlib import Path

from swwae.errors import ConfigError, Unreadable, plural
from swwae.progress import progress
from swwae.training.sweep.jobs import Group, Summary, as_number, collect
from swwae.training.sweep.records import bad_job
from swwae.training.sweep.tables import header, markdown

log = logging.getLogger(__name__)

ROW_NAMES = ("input", "reconstruction", "where dropped")  # swwae.images.panel_rows' "reconstructions"


def save_figure(fig, out) -> Path:
    """Lay the figure out, write it as every study figure is written (110 dpi), free it."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


def numeric_axis(summary: Summary) -> str | None:
    """A varying override with numeric values (pool size, number of labels, beta) that
    makes a better x axis than one bar per config."""
    for key in summary.groups[0].keys if summary.groups else []:
        values = {g.keys.get(key) for g in summary.groups}
        series = {tuple((k, v) for k, v in g.keys.items() if k != key) for g in summary.groups}
        full_grid = len(values) * len(series) == len(summary.groups)  # not so for a random search
        if len(values) > 1 and full_grid and all(as_number(v) is not None for v in values):
            return key
    return None


def plot(summary: Summary, out: Path, references: dict[str, dict[float, float]] | None = None) -> Path:
    """One panel per metric: mean ± std with every seed as a dot, over the numeric
    override if there is one (a line per remaining config), else one bar per config.

    ``references`` ({label: {x: error %}}, e.g. a paper's figures) are drawn dashed on the
    error panels over the numeric axis, so published numbers sit beside ours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [m for m in summary.columns if m.endswith(("/recon_mse", "/error_pct")) or m == "train_time_s"]
    metrics = metrics or summary.columns[:1]
    x_key = numeric_axis(summary)
    n = max(1, len(metrics))
    if x_key is None:
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 0.45 * len(summary.groups) + 1.6), squeeze=False)
    else:
        fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        title = header(metric)[0]
        if x_key is None:
            ys = range(len(summary.groups))
            for y, group in zip(ys, summary.groups):
                mean, std = group.stat(metric)
                if math.isfinite(mean):
                    ax.barh(y, mean, xerr=std, color="C0", alpha=0.6, capsize=3)  # std None (one seed): no error bar
                    ax.plot([j.metrics.get(metric) for j in group.ok], [y] * len(group.ok), "k.", ms=4)
                else:
                    ax.text(0, y, " all failed", va="center", color="C3")
            ax.set_yticks(list(ys), [textwrap.fill(g.label, 36) for g in summary.groups], fontsize=7)
            ax.invert_yaxis()
            ax.set_xlabel(title)
        else:
            series: dict[str, list[Group]] = {}
            for group in summary.groups:
                rest = " ".join(f"{k}={v}" for k, v in group.keys.items() if k != x_key) or "all"
                series.setdefault(rest, []).append(group)
            for i, (name, groups) in enumerate(series.items()):
                groups = sorted(groups, key=lambda g: as_number(g.keys[x_key]))
                xs = [as_number(g.keys[x_key]) for g in groups]
                stats = [g.stat(metric) for g in groups]
                ax.plot(xs, [m for m, _ in stats], marker="o", label=name, color=f"C{i}")
                spread = [(x, m, s) for x, (m, s) in zip(xs, stats) if s is not None]
                if spread:  # error bars only where there are seeds to spread (one seed: std None, its dot alone)
                    sx, sm, ss = zip(*spread)
                    ax.errorbar(sx, sm, yerr=ss, fmt="none", capsize=3, color=f"C{i}")
                for x, g in zip(xs, groups):
                    ax.plot([x] * len(g.ok), [j.metrics.get(metric) for j in g.ok], ".", color=f"C{i}", alpha=0.4)
            if metric.endswith("/error_pct"):
                for label, points in (references or {}).items():
                    xs_ref = sorted(points)
                    ax.plot(xs_ref, [points[x] for x in xs_ref], "k--", marker="s", ms=4, alpha=0.7, label=label)
            if max(xs) / max(min(xs), 1e-12) >= 10 and min(xs) > 0:
                ax.set_xscale("log")
            ax.set_xticks(sorted({as_number(g.keys[x_key]) for g in summary.groups}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel(x_key)
            ax.set_title(title, fontsize=10)
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    failed = f", {len(summary.failed)} failed" if summary.failed else ""
    fig.suptitle(f"{summary.folder.name}: {plural(len(summary.jobs), 'job')}{failed}", fontsize=10)
    return save_figure(fig, out)


# reconstructions of a whole sweep


def first_checkpoint(group: Group, roots) -> Path | None:
    """The checkpoint of the group's first finished seed that has one it may read; each one
    refused (``Job.checkpoint``) is one warning line, and the next seed is tried."""
    for job in group.ok:
        try:
            path = job.checkpoint(roots)
        except Unreadable as err:
            log.warning("%s", bad_job(job, err))
            continue
        if path is not None and path.is_file():
            return path
    return None


def reconstruction_figure(summary: Summary, out, num_images: int = 6, split: str = "test", roots=()) -> Path:
    """One picture, one panel per config (its first finished seed, best checkpoint, taken only
    from the sweep folder or ``roots``: ``Job.checkpoint``): rows input | reconstruction |
    reconstruction with the where dropped, on the same images (drawn by ``draw_reconstructions``).
    With a numeric override (pool size), configs are laid out as a grid over it."""
    import matplotlib

    matplotlib.use("Agg")

    from swwae.images import reconstruction_panels
    from swwae.training.checkpoints import load_model
    from swwae.training.registry import data_of_run

    cells, images = {}, {}
    for group in progress(summary.groups, "reconstructions", name=lambda g: g.label):
        ckpt = first_checkpoint(group, roots)
        if ckpt is None:
            continue
        module, config = load_model(ckpt)
        key = json.dumps(config["data"], sort_keys=True)
        if key not in images:
            datamodule = data_of_run(config.get("data"), str(ckpt), fetch_hint=f"swwae evaluate {ckpt} --download")
            datamodule.setup("test")
            images[key] = datamodule.images(split, num_images)
        cells[group.label] = reconstruction_panels(module.net, images[key], scale=1, labels=False)["reconstructions"]
    if not cells:
        places = " or ".join([str(summary.folder), *map(str, roots)])
        raise ConfigError(
            f"no finished job in {summary.folder} has a checkpoint to reconstruct with in {places}: "
            "--checkpoints DIR adds the folder its runs saved them in (their paths.checkpoint_dir)"
        )
    x_key = numeric_axis(summary)
    if x_key is None:
        rows = [[g.label] for g in summary.groups if g.label in cells]
    else:
        names = list(
            dict.fromkeys(" ".join(f"{k}={v}" for k, v in g.keys.items() if k != x_key) for g in summary.groups)
        )
        xs = sorted({g.keys[x_key] for g in summary.groups}, key=as_number)
        by = {
            (" ".join(f"{k}={v}" for k, v in g.keys.items() if k != x_key), g.keys[x_key]): g.label
            for g in summary.groups
        }
        rows = [[by.get((name, x)) for x in xs] for name in names]
    return draw_reconstructions(cells, rows, out)


def draw_reconstructions(cells: dict, rows: list[list[str | None]], out, row_names=ROW_NAMES) -> Path:
    """The figure of ``reconstruction_figure``: ``cells`` (config label -> its (3, H, W) grid of
    ``row_names`` rows, one pixel per pixel) laid out as ``rows`` (labels, None for no config);
    each panel titled by its config, each row of images named on the left of the figure."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from swwae.images import PAD

    some = next(iter(cells.values()))
    height, width = some.shape[1:]
    tile = (height - PAD) / len(row_names) - PAD  # labelled_figure's rows: PAD, a tile, PAD, a tile...
    centres = [PAD + r * (tile + PAD) + tile / 2 for r in range(len(row_names))]
    cols = len(rows[0])
    panel_w = 3.2
    fig, axes = plt.subplots(
        len(rows),
        cols,
        squeeze=False,
        figsize=(panel_w * cols + 1.3, len(rows) * (panel_w * height / width + 0.45) + 0.5),
    )
    for r, row in enumerate(rows):
        for c, label in enumerate(row):
            ax = axes[r][c]
            ax.set_xticks([])
            ax.set_yticks([])
            for spine in ax.spines.values():
                spine.set_visible(False)
            if label in cells:
                ax.imshow(cells[label].permute(1, 2, 0).numpy(), interpolation="nearest")
                ax.set_title(textwrap.fill(label, 44), fontsize=8)
                if c == 0:
                    ax.set_yticks(centres, row_names, fontsize=8)
                    ax.tick_params(axis="y", length=0)
            elif label:
                ax.text(
                    0.5,
                    0.5,
                    f"{textwrap.fill(label, 44)}\n(no checkpoint)",
                    ha="center",
                    va="center",
                    fontsize=8,
                    transform=ax.transAxes,
                )
    fig.suptitle(
        textwrap.fill(
            "the same test images through each config's best checkpoint (first seed)", int(14 * (panel_w * cols + 1.3))
        ),
        fontsize=9,
    )
    return save_figure(fig, out)


def write_summary(sweep_dir, plot_too: bool = True, references=None) -> Summary:
    """``summary.md`` and ``summary.png`` in the sweep folder (the Hydra callback, at the end of
    every multirun: the folder Hydra made for the sweep); returns what they show."""
    summary = collect(sweep_dir)
    write_summary_files(summary, summary.folder / "summary.md", summary.folder / "summary.png", plot_too, references)
    return summary


def write_summary_files(summary: Summary, md: Path, png: Path, plot_too: bool = True, references=None) -> None:
    """The table ``md`` (and the plot ``png``, with ``references`` as in ``plot``): one function
    for the Hydra callback and ``swwae compare`` (on demand, where its user says), so both write
    the same files."""
    md.write_text(markdown(summary))
    if plot_too and summary.columns:
        plot(summary, png, references)
