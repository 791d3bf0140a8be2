"""The sweep table: ``summary.md``, one row per config, mean ± sample std over seeds.

Kept apart from the figures so that a summary can be read and written without matplotlib;
``header`` (a metric's title and number format) is shared with the plots.
"""

from __future__ import annotations

import math

from swwae.errors import Unreadable, plural
from swwae.training.sweep.jobs import Job, Summary, readable
from swwae.training.sweep.records import saved_config, trains_reconstruction

NAMES = {"recon_mse": ("recon MSE", ".4f"), "acc": ("acc", ".4f"), "error_pct": ("error %", ".2f")}


def cell(mean: float, std: float | None, fmt: str) -> str:
    if not math.isfinite(mean):
        return "–"
    return f"{mean:{fmt}}" if std is None else f"{mean:{fmt}} ± {std:{fmt}}"


def header(metric: str) -> tuple[str, str]:
    """Column header and number format of a metric."""
    if metric == "train_time_s":
        return "train time (s)", ".1f"  # a quick check trains for under a second
    split, _, name = metric.partition("/")
    if name.startswith("middle_mse_"):
        return f"{split} middle MSE {name.rsplit('_', 1)[1]}", ".4f"
    title, fmt = NAMES.get(name, (name, ".4g"))
    return f"{split} {title}", fmt


def by_value(summary: Summary, value) -> dict[str, list[str]]:
    """value(job) -> the labels of the configs whose finished jobs have it, in order."""
    found: dict[str, list[str]] = {}
    for group in summary.groups:
        for v in dict.fromkeys(value(job) for job in group.ok):
            if v:
                found.setdefault(v, []).append(group.label)
    return found


def untrained_decoder(job: Job) -> bool:
    """Whether the job's saved config trains no decoder (``model.lambda_rec`` = 0: a classifier
    alone); unknown (no saved config, or one that does not read) is False: its MSE stands as measured."""
    try:
        return not trains_reconstruction(saved_config(job, required=False))
    except Unreadable:
        return False


def notes_on_runs(summary: Summary) -> list[str]:
    """What a reader must know before comparing rows: configs trained for different numbers of
    epochs, jobs that reported a run an earlier command had trained (nothing trained here), and
    configs whose reconstruction errors are those of a decoder never trained."""
    lines = []
    if any("mse" in column for column in summary.columns):
        untrained = by_value(summary, lambda job: "untrained" if untrained_decoder(job) else None)
        if untrained:
            lines += [
                "",
                "Not trained: the decoder of `" + "`, `".join(untrained["untrained"]) + "` (`model.lambda_rec=0`): "
                "its MSE columns measure a decoder left as it was initialised.",
            ]
    epochs = by_value(summary, lambda job: job.record.get("epochs"))
    if len(epochs) > 1:
        lines += [
            "",
            "Warning: the configs trained for different numbers of epochs: "
            + "; ".join(f"{n} for `{'`, `'.join(labels)}`" for n, labels in sorted(epochs.items())),
        ]
    again = [job for job in summary.jobs if job.ok and job.record.get("reported_again")]
    if again:
        lines += [
            "",
            "Reported again (a run an earlier command had finished; nothing was trained by this sweep): "
            + ", ".join(f"`{job.folder.name}`" for job in again),
        ]
    return lines


def markdown(summary: Summary) -> str:
    """The table: one row per group, mean ± sample std over seeds, seeds run and failed."""
    lines = [f"# Sweep summary: {summary.folder.name}", ""]
    n_failed = len(summary.failed)
    lines.append(
        f"{plural(len(summary.jobs), 'job')}, {plural(len(summary.groups), 'config')}, {n_failed} failed. "
        "Mean ± sample std (n - 1) over seeds."
    )
    if summary.common:
        lines.append("Common overrides: `" + " ".join(f"{k}={readable(v)}" for k, v in summary.common.items()) + "`")
    monitors = by_value(summary, lambda job: job.monitor)
    if len(monitors) == 1:
        lines.append(f"Checkpoints picked by {next(iter(monitors))}.")
    elif monitors:
        lines.append(
            "Checkpoints picked by "
            + "; ".join(f"{m} for `{'`, `'.join(labels)}`" for m, labels in monitors.items())
            + "."
        )
    networks = by_value(summary, lambda job: job.record.get("arch"))
    if len(networks) == 1:
        lines.append(f"Network: `{next(iter(networks))}`.")
    lines.append("")
    heads = [
        "config",
        *(["network"] if len(networks) > 1 else []),
        "seeds",
        "failed",
        *(header(m)[0] for m in summary.columns),
    ]
    lines += [
        "| " + " | ".join(heads) + " |",
        "|" + "|".join(["---"] * (len(heads) - len(summary.columns) - 2) + ["---:"] * (len(summary.columns) + 2)) + "|",
    ]
    for group in summary.groups:
        row = [f"`{group.label}`"]
        if len(networks) > 1:
            row.append(", ".join(f"`{a}`" for a in dict.fromkeys(j.record.get("arch") for j in group.ok) if a) or "–")
        row += [str(len(group.ok)), str(len(group.failed))]
        row += [cell(*group.stat(m), header(m)[1]) for m in summary.columns]
        lines.append("| " + " | ".join(row) + " |")
    names: dict[str, list[str]] = {}
    for job in summary.jobs:
        names.setdefault(job.record.get("run_name"), []).append(job.folder.name)
    shared = {name: folders for name, folders in names.items() if name and len(folders) > 1}
    if shared:  # their checkpoints and TensorBoard runs share a folder: extend run_name
        lines += [
            "",
            "Warning: jobs share a run_name (one checkpoint folder; extend `run_name` with the swept keys): "
            + "; ".join(f"`{name}`: {', '.join(folders)}" for name, folders in shared.items()),
        ]
    lines += notes_on_runs(summary)
    if n_failed:
        lines += ["", "Failed jobs:", ""]
        lines += [f"- `{j.folder.name}`: {j.record.get('error', 'failed')}" for j in summary.failed]
    return "\n".join(lines) + "\n"
