"""Sweep summaries: one table and one plot per sweep folder, comparing configs over seeds.

A sweep folder (``multirun/<time>/``, or ``hydra.sweep.dir``) holds one folder per job,
each with ``.hydra/overrides.yaml`` and the ``metrics.json`` that ``swwae.run`` writes
(or that ``train.py`` writes with ``"status": "failed"`` when the job raised). Jobs are
grouped by the overrides that vary across the sweep, seed excepted; each group gets the
mean and the sample std (n - 1) over its seeds.

    from swwae.sweep import write_summary
    summary = write_summary("multirun/2026-01-01_12-00-00")   # summary.md + summary.png

``SweepSummary`` is the Hydra callback that does this at the end of every multirun
(``configs/hydra/default.yaml``); ``scripts/compare_runs.py`` does it on demand.
"""

from __future__ import annotations

import json
import math
import statistics
import sys
import textwrap
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from hydra.experimental.callback import Callback

from swwae.errors import ConfigError, one_line

NAMES = {"recon_mse": ("recon MSE", ".4f"), "acc": ("acc", ".4f"), "error_pct": ("error %", ".2f")}
SEED_KEYS = ("seed", "+seed", "++seed")

# helpers


def write_failed_job(folder, info: dict, error: str) -> dict:
    """The ``metrics.json`` of a job that raised: who it was, and the one-line error."""
    record = dict(info) | {"status": "failed", "error": error, "metrics": {}}
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "metrics.json").write_text(json.dumps(record, indent=2))
    return record


def pretty_key(key: str) -> str:
    """``+experiment/pooling@_global_`` -> ``pooling``; ``model.beta`` stays."""
    key = key.lstrip("+~").split("@")[0]
    return key.rsplit("/", 1)[-1]


def pretty_value(value: str) -> str:
    """Long floats (Optuna's picks) to 4 significant digits; everything else as given."""
    number = as_number(value)
    return f"{number:.4g}" if number is not None and len(value) > 7 and not value.isdigit() else value


def as_number(value: str) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def mean_std(values: list[float]) -> tuple[float, float | None]:
    values = [v for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def cell(mean: float, std: float | None, fmt: str) -> str:
    if not math.isfinite(mean):
        return "–"
    return f"{mean:{fmt}}" if std is None else f"{mean:{fmt}} ± {std:{fmt}}"


# classes


@dataclass
class Job:
    folder: Path
    overrides: dict[str, str]  # this job's command-line and sweep overrides, key -> value
    record: dict  # its metrics.json, or a failure record made up when there is none

    @property
    def ok(self) -> bool:
        return self.record.get("status", "ok") == "ok" and bool(self.record.get("metrics"))

    @property
    def metrics(self) -> dict[str, float]:
        metrics = dict(self.record.get("metrics") or {})
        for split in ("val", "test"):
            if f"{split}/acc" in metrics:
                metrics[f"{split}/error_pct"] = 100.0 * (1.0 - metrics[f"{split}/acc"])
        return metrics

    @property
    def monitor(self) -> str | None:
        """The metric that picked the job's best checkpoint, e.g. ``val/acc (max)``."""
        monitor = self.record.get("monitor") or {}
        return f"{monitor['metric']} ({monitor['mode']})" if monitor.get("metric") else None

    @property
    def seed(self):
        return self.record.get("seed", next((self.overrides[k] for k in SEED_KEYS if k in self.overrides), None))

    def checkpoint(self, name: str = "best.ckpt") -> Path | None:
        """checkpoints/<run_name>/<name> of this job: from metrics.json when it says so, else
        from the job's saved config (``paths.checkpoint_dir``, relative to the launch folder)."""
        if self.record.get("checkpoint"):
            return Path(self.record["checkpoint"])
        from omegaconf import OmegaConf

        try:
            config = OmegaConf.load(self.folder / ".hydra" / "config.yaml")
            folder = Path(str(config.paths.checkpoint_dir))
            if not folder.is_absolute():
                folder = Path(OmegaConf.load(self.folder / ".hydra" / "hydra.yaml").hydra.runtime.cwd) / folder
        except Exception:  # no saved config, or one we cannot resolve outside Hydra
            return None
        return folder / self.record["run_name"] / name if self.record.get("run_name") else None


@dataclass
class Group:
    label: str  # the varying overrides, seed excepted: "model=swwae_soft model.beta=10"
    keys: dict[str, str]  # the same, pretty key -> value
    jobs: list[Job] = field(default_factory=list)

    @property
    def ok(self) -> list[Job]:
        return [j for j in self.jobs if j.ok]

    @property
    def failed(self) -> list[Job]:
        return [j for j in self.jobs if not j.ok]

    def stat(self, metric: str) -> tuple[float, float | None]:
        return mean_std([j.metrics.get(metric) for j in self.ok])


@dataclass
class Summary:
    folder: Path
    jobs: list[Job]
    groups: list[Group]
    common: dict[str, str]  # overrides every job shares
    columns: list[str]  # metrics shown, in order

    @property
    def failed(self) -> list[Job]:
        return [j for j in self.jobs if not j.ok]


def read_job(folder: Path) -> Job:
    overrides_file = folder / ".hydra" / "overrides.yaml"
    overrides = {}
    if overrides_file.is_file():
        for item in yaml.safe_load(overrides_file.read_text()) or []:
            key, _, value = str(item).partition("=")
            overrides[key] = value
    metrics_file = folder / "metrics.json"
    try:
        record = json.loads(metrics_file.read_text())
    except FileNotFoundError:
        record = {"status": "failed", "error": "no metrics.json: the job did not finish (killed, or still running?)"}
    except (OSError, ValueError) as err:
        record = {"status": "failed", "error": f"unreadable metrics.json: {err}"}
    if record.get("status", "ok") == "ok" and not record.get("metrics"):
        record = record | {"status": "failed", "error": record.get("error") or "metrics.json holds no metrics"}
    return Job(folder, overrides, record)


def job_order(folder: Path):
    number = folder.name.split("_", 1)[0]
    return (int(number), folder.name) if number.isdigit() else (math.inf, folder.name)


def collect(sweep_dir) -> Summary:
    """Every job folder under ``sweep_dir`` (one level down: it has ``.hydra/`` or a
    ``metrics.json``), grouped by the overrides that vary, seed excepted."""
    sweep_dir = Path(sweep_dir)
    if not sweep_dir.is_dir():
        raise ConfigError(f"sweep folder {sweep_dir} does not exist")
    folders = [p for p in sweep_dir.iterdir() if p.is_dir() and ((p / ".hydra").is_dir() or (p / "metrics.json").is_file())]
    jobs = [read_job(p) for p in sorted(folders, key=job_order)]
    keys = list(dict.fromkeys(k for j in jobs for k in j.overrides))
    varying = [k for k in keys if k not in SEED_KEYS and len({j.overrides.get(k) for j in jobs}) > 1]
    common = {k: jobs[0].overrides[k] for k in keys if k not in varying and k not in SEED_KEYS and jobs}
    groups: dict[tuple, Group] = {}
    for job in jobs:
        values = tuple((k, job.overrides.get(k, "")) for k in varying)
        if values not in groups:
            pretty = {pretty_key(k): pretty_value(v) for k, v in values}
            label = " ".join(f"{k}={v}" for k, v in pretty.items()) or job.record.get("model") or "all jobs"
            groups[values] = Group(label, pretty)
        groups[values].jobs.append(job)
    found = {m for j in jobs if j.ok for m in j.metrics}
    split = "test" if any(m.startswith("test/") for m in found) else "val"  # val: runs with test=false
    middles = sorted((m for m in found if m.startswith(f"{split}/middle_mse_")), key=lambda m: int(m.rsplit("_", 1)[1]))
    columns = [f"{split}/{m}" for m in ("recon_mse", "acc", "error_pct") if f"{split}/{m}" in found] + middles
    columns += ["train_time_s"] if "train_time_s" in found else []
    return Summary(sweep_dir, jobs, list(groups.values()), common, columns)


def header(metric: str) -> tuple[str, str]:
    """Column header and number format of a metric."""
    if metric == "train_time_s":
        return "train time (s)", ".0f"
    split, _, name = metric.partition("/")
    if name.startswith("middle_mse_"):
        return f"{split} middle MSE {name.rsplit('_', 1)[1]}", ".4f"
    title, fmt = NAMES.get(name, (name, ".4g"))
    return f"{split} {title}", fmt


def markdown(summary: Summary) -> str:
    """The table: one row per group, mean ± sample std over seeds, seeds run and failed."""
    lines = [f"# Sweep summary: {summary.folder.name}", ""]
    n_failed = len(summary.failed)
    lines.append(f"{len(summary.jobs)} jobs, {len(summary.groups)} configs, {n_failed} failed. "
                 "Mean ± sample std (n - 1) over seeds.")
    if summary.common:
        lines.append("Common overrides: `" + " ".join(f"{k}={v}" for k, v in summary.common.items()) + "`")
    monitors: dict[str, list[str]] = {}
    for group in summary.groups:
        for monitor in dict.fromkeys(j.monitor for j in group.ok if j.monitor):
            monitors.setdefault(monitor, []).append(group.label)
    if len(monitors) == 1:
        lines.append(f"Checkpoints picked by {next(iter(monitors))}.")
    elif monitors:
        lines.append("Checkpoints picked by " + "; ".join(f"{m} for `{'`, `'.join(labels)}`"
                                                         for m, labels in monitors.items()) + ".")
    lines.append("")
    heads = ["config", "seeds", "failed", *(header(m)[0] for m in summary.columns)]
    lines += ["| " + " | ".join(heads) + " |", "|" + "|".join(["---"] + ["---:"] * (len(heads) - 1)) + "|"]
    for group in summary.groups:
        row = [f"`{group.label}`", str(len(group.ok)), str(len(group.failed))]
        row += [cell(*group.stat(m), header(m)[1]) for m in summary.columns]
        lines.append("| " + " | ".join(row) + " |")
    names: dict[str, list[str]] = {}
    for job in summary.jobs:
        names.setdefault(job.record.get("run_name"), []).append(job.folder.name)
    shared = {name: folders for name, folders in names.items() if name and len(folders) > 1}
    if shared:  # their checkpoints and TensorBoard runs share a folder: extend run_name
        lines += ["", "Warning: jobs share a run_name (one checkpoint folder; extend `run_name` with the swept keys): "
                  + "; ".join(f"`{name}`: {', '.join(folders)}" for name, folders in shared.items())]
    if n_failed:
        lines += ["", "Failed jobs:", ""]
        lines += [f"- `{j.folder.name}`: {j.record.get('error', 'failed')}" for j in summary.failed]
    return "\n".join(lines) + "\n"


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


def plot(summary: Summary, out: Path) -> Path:
    """One panel per metric: mean ± std with every seed as a dot, over the numeric
    override if there is one (a line per remaining config), else one bar per config."""
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
                    ax.barh(y, mean, xerr=std or 0, color="C0", alpha=0.6, capsize=3)
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
                ax.errorbar(xs, [m for m, _ in stats], yerr=[s or 0 for _, s in stats], marker="o", capsize=3,
                            label=name, color=f"C{i}")
                for x, g in zip(xs, groups):
                    ax.plot([x] * len(g.ok), [j.metrics.get(metric) for j in g.ok], ".", color=f"C{i}", alpha=0.4)
            if max(xs) / max(min(xs), 1e-12) >= 10 and min(xs) > 0:
                ax.set_xscale("log")
            ax.set_xticks(sorted({as_number(g.keys[x_key]) for g in summary.groups}))
            ax.get_xaxis().set_major_formatter(matplotlib.ticker.ScalarFormatter())
            ax.set_xlabel(x_key)
            ax.set_title(title, fontsize=10)
            ax.legend(fontsize=7)
        ax.grid(alpha=0.3)
    failed = f", {len(summary.failed)} failed" if summary.failed else ""
    fig.suptitle(f"{summary.folder.name}: {len(summary.jobs)} jobs{failed}", fontsize=10)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


def write_summary(sweep_dir, plot_too: bool = True) -> Summary:
    """``summary.md`` (and ``summary.png``) in ``sweep_dir``; returns what they show."""
    summary = collect(sweep_dir)
    (summary.folder / "summary.md").write_text(markdown(summary))
    if plot_too and summary.columns:
        plot(summary, summary.folder / "summary.png")
    return summary


# reconstructions of a whole sweep


def reconstruction_figure(summary: Summary, out, num_images: int = 6, split: str = "test") -> Path:
    """One picture, one panel per config (its first finished seed, best checkpoint): rows
    input | reconstruction | reconstruction with the where dropped, on the same images.
    With a numeric override (pool size), configs are laid out as a grid over it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from hydra.utils import instantiate

    from swwae.checkpoints import load_model
    from swwae.images import reconstruction_panels

    cells, images = {}, {}
    for group in summary.groups:
        ckpt = next((c for c in (j.checkpoint() for j in group.ok) if c is not None and c.is_file()), None)
        if ckpt is None:
            continue
        module, config = load_model(ckpt)
        key = json.dumps(config["data"], sort_keys=True)
        if key not in images:
            datamodule = instantiate(config["data"])
            datamodule.setup("test")
            images[key] = getattr(datamodule, f"{split}_x")[:num_images]
        cells[group.label] = reconstruction_panels(module.net, images[key])["reconstructions"]
    if not cells:
        raise ConfigError(f"no finished job in {summary.folder} has a checkpoint to reconstruct with")
    x_key = numeric_axis(summary)
    if x_key is None:
        rows, cols = [[g.label] for g in summary.groups if g.label in cells], [""]
    else:
        names = list(dict.fromkeys(" ".join(f"{k}={v}" for k, v in g.keys.items() if k != x_key) for g in summary.groups))
        xs = sorted({g.keys[x_key] for g in summary.groups}, key=as_number)
        by = {(" ".join(f"{k}={v}" for k, v in g.keys.items() if k != x_key), g.keys[x_key]): g.label for g in summary.groups}
        rows, cols = [[by.get((name, x)) for x in xs] for name in names], [f"{x_key}={x}" for x in xs]
    some = next(iter(cells.values()))
    aspect = some.shape[1] / some.shape[2]
    width = 3.2 * len(rows[0])
    fig, axes = plt.subplots(len(rows), len(rows[0]), figsize=(width, len(rows) * 3.2 * aspect + 0.6), squeeze=False)
    for r, row in enumerate(rows):
        for c, label in enumerate(row):
            ax = axes[r][c]
            ax.axis("off")
            if label in cells:
                ax.imshow(cells[label].permute(1, 2, 0).numpy(), interpolation="nearest")
                ax.set_title(label, fontsize=7)
            elif label:
                ax.text(0.5, 0.5, f"{label}\n(no checkpoint)", ha="center", va="center", fontsize=7)
    fig.suptitle("rows: input | reconstruction | reconstruction with the where dropped", fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return Path(out)


# the Hydra callback


class SweepSummary(Callback):
    """At the end of every multirun: ``summary.md`` and ``summary.png`` in the sweep folder.

    If any job failed, and ``fail_on_error`` (the default), it then prints one ``error:``
    line and exits with status 1, so that scripts and CI see that the sweep was not clean
    (Hydra turns exceptions raised in callbacks into warnings, hence the exit). Register it
    first under ``hydra.callbacks``: multirun-end callbacks run in reverse order.
    """

    def __init__(self, fail_on_error: bool = True):
        self.fail_on_error = fail_on_error

    def on_multirun_end(self, config, **kwargs) -> None:
        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            summary = write_summary(sweep_dir)
        except Exception as err:  # a summary problem must not hide the jobs' own results
            print(f"error: could not write the sweep summary in {sweep_dir}: {one_line(err)}", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"sweep summary: {sweep_dir / 'summary.md'} ({len(summary.jobs)} jobs, {len(summary.failed)} failed)")
        if summary.failed and self.fail_on_error:
            names = ", ".join(j.folder.name for j in summary.failed)
            print(f"error: {len(summary.failed)} of {len(summary.jobs)} sweep jobs failed ({names}): "
                  f"see {sweep_dir / 'summary.md'}", file=sys.stderr)
            raise SystemExit(1)
