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
``summary`` (write_summary), ``callback`` (SweepSummary).
"""

from swwae.training.sweep.callback import SweepSummary
from swwae.training.sweep.figures import numeric_axis, plot, reconstruction_figure
from swwae.training.sweep.jobs import Group, Job, Summary, collect, read_job, write_failed_job
from swwae.training.sweep.summary import write_summary
from swwae.training.sweep.tables import header, markdown

__all__ = [
    "Group",
    "Job",
    "Summary",
    "SweepSummary",
    "collect",
    "header",
    "markdown",
    "numeric_axis",
    "plot",
    "read_job",
    "reconstruction_figure",
    "write_failed_job",
    "write_summary",
]
