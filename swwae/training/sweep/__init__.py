"""Sweep summaries: one table and one plot per sweep folder, comparing configs over seeds.

A sweep folder (``multirun/<time>/``, or ``hydra.sweep.dir``) holds one folder per job,
each with ``.hydra/overrides.yaml`` and the ``metrics.json`` that ``swwae.training.run`` writes
(or that ``train.py`` writes with ``"status": "failed"`` when the job raised). Jobs are
grouped by the overrides that vary across the sweep, seed excepted; each group gets the
mean and the sample std (n - 1) over its seeds.

    from swwae.training.sweep import write_summary
    summary = write_summary("multirun/2026-01-01_12-00-00")   # summary.md + summary.png

``SweepSummary`` is the Hydra callback that does this at the end of every multirun
(``configs/hydra/default.yaml``); ``swwae compare`` does it on demand, into a folder of its
user's (``write_summary_files``).

Modules: ``jobs`` (reading job folders: Job, Group, Summary, collect; failure records),
``records`` (a job's saved config and values as the study reports read them: data, checked),
``tables`` (summary.md), ``figures`` (summary.png, reconstructions of a sweep; write_summary, both files).
The names below are imported when first used (PEP 562): Hydra imports this package for its
callback before every run, and the summary's modules need torch.

``SweepSummary``, defined here, is the Hydra callback that summarises every multirun when it
ends: the one piece that needs Hydra's callback API, named in ``configs/hydra/default.yaml`` as
``swwae.training.sweep.SweepSummary``. Hydra builds it before every run, a single run too, so it
loads the summary's modules (and torch) only when a multirun ends: bad input still answers
before torch loads.
"""

import importlib
import sys
from pathlib import Path

from hydra.experimental.callback import Callback

from swwae.errors import one_line, plural

HOMES = {
    "numeric_axis": "figures",
    "plot": "figures",
    "reconstruction_figure": "figures",
    **dict.fromkeys(("Group", "Job", "Summary", "collect", "read_job", "sweeps_inside", "write_failed_job"), "jobs"),
    "write_summary": "figures",
    "write_summary_files": "figures",
    "header": "tables",
    "markdown": "tables",
}
__all__ = sorted([*HOMES, "SweepSummary", "summarise"])


def __getattr__(name: str):
    if name in HOMES:
        return getattr(importlib.import_module(f"{__name__}.{HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *HOMES})


def summarise(sweep_dir: Path, fail_on_error: bool = True) -> None:
    """``summary.md`` and ``summary.png`` in ``sweep_dir``, and one line saying where; if a job
    failed (and ``fail_on_error``), one ``error:`` line and exit status 1."""
    from swwae.training.sweep.figures import write_summary

    try:
        summary = write_summary(sweep_dir)
    except Exception as err:  # a summary problem must not hide the jobs' own results
        print(f"error: could not write the sweep summary in {sweep_dir}: {one_line(err)}", file=sys.stderr)
        raise SystemExit(1) from None
    jobs = plural(len(summary.jobs), "job")
    print(f"sweep summary: {sweep_dir / 'summary.md'} ({jobs}, {len(summary.failed)} failed)")
    if summary.failed and fail_on_error:
        names = ", ".join(j.folder.name for j in summary.failed)
        print(
            f"error: {len(summary.failed)} of {plural(len(summary.jobs), 'sweep job')} failed ({names}): "
            f"see {sweep_dir / 'summary.md'}",
            file=sys.stderr,
        )
        raise SystemExit(1)


class SweepSummary(Callback):
    """At the end of every multirun: ``summary.md`` and ``summary.png`` in the sweep folder
    (``summarise``).

    If any job failed, and ``fail_on_error`` (the default), it then prints one ``error:``
    line and exits with status 1, so that scripts and CI see that the sweep was not clean
    (Hydra turns exceptions raised in callbacks into warnings, hence the exit). Register it
    first under ``hydra.callbacks``: multirun-end callbacks run in reverse order.
    """

    def __init__(self, fail_on_error: bool = True):
        self.fail_on_error = fail_on_error

    def on_multirun_end(self, config, **kwargs) -> None:
        summarise(Path(str(config.hydra.sweep.dir)), self.fail_on_error)
