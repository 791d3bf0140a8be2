"""``SweepSummary``: the Hydra callback that summarises every multirun when it ends.

Its own module because it is the one piece that needs Hydra's callback API; named in
``configs/hydra/default.yaml`` as ``swwae.training.sweep.SweepSummary`` (re-exported by the package).
Hydra builds it before every run, a single run too, so it loads the summary's modules (and
torch) only when a multirun ends: bad input still answers before torch loads.
"""

from __future__ import annotations

import sys
from pathlib import Path

from hydra.experimental.callback import Callback

from swwae.errors import one_line


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
        from swwae.training.sweep.summary import write_summary

        sweep_dir = Path(str(config.hydra.sweep.dir))
        try:
            summary = write_summary(sweep_dir)
        except Exception as err:  # a summary problem must not hide the jobs' own results
            print(f"error: could not write the sweep summary in {sweep_dir}: {one_line(err)}", file=sys.stderr)
            raise SystemExit(1) from None
        print(f"sweep summary: {sweep_dir / 'summary.md'} ({len(summary.jobs)} jobs, {len(summary.failed)} failed)")
        if summary.failed and self.fail_on_error:
            names = ", ".join(j.folder.name for j in summary.failed)
            print(
                f"error: {len(summary.failed)} of {len(summary.jobs)} sweep jobs failed ({names}): "
                f"see {sweep_dir / 'summary.md'}",
                file=sys.stderr,
            )
            raise SystemExit(1)
