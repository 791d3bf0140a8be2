"""Sweep summaries: one table and one plot per sweep folder, comparing configs over seeds.

A sweep folder (``multirun/<time>/``, or ``hydra.sweep.dir``) holds one folder per job,
each with ``.hydra/overrides.yaml`` and the ``metrics.json`` that ``swwae.training.run`` writes
(or that ``train.py`` writes with ``"status": "failed"`` when the job raised). Jobs are
grouped by the overrides that vary across the sweep, seed excepted; each group gets the
mean and the sample std (n - 1) over its seeds.

    from swwae.training.sweep import write_summary
    summary = write_summary("multirun/2026-01-01_12-00-00")   # summary.md + summary.png

``SweepSummary`` is the Hydra callback that does this at the end of every multirun
(``configs/hydra/default.yaml``); ``scripts/compare_runs.py`` does it on demand.

Modules: ``jobs`` (reading job folders: Job, Group, Summary, collect; failure records),
``tables`` (summary.md), ``figures`` (summary.png, reconstructions of a sweep),
``summary`` (write_summary), ``callback`` (SweepSummary). The names below are imported when
first used (PEP 562): Hydra imports this package for its callback before every run, and the
summary's modules need torch.
"""

import importlib

HOMES = {
    "SweepSummary": "callback",
    "numeric_axis": "figures",
    "plot": "figures",
    "reconstruction_figure": "figures",
    **dict.fromkeys(("Group", "Job", "Summary", "collect", "read_job", "write_failed_job"), "jobs"),
    "write_summary": "summary",
    "header": "tables",
    "markdown": "tables",
}
__all__ = sorted(HOMES)


def __getattr__(name: str):
    if name in HOMES:
        return getattr(importlib.import_module(f"{__name__}.{HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *HOMES})
