"""``write_summary``: the files a sweep folder gets, ``summary.md`` and ``summary.png``.

One function shared by the Hydra callback (at the end of every multirun) and
``scripts/compare_runs.py`` (on demand), so both write the same files.
"""

from __future__ import annotations

from swwae.training.sweep.figures import plot
from swwae.training.sweep.jobs import Summary, collect
from swwae.training.sweep.tables import markdown


def write_summary(sweep_dir, plot_too: bool = True, references=None) -> Summary:
    """``summary.md`` (and ``summary.png``, with ``references`` as in ``plot``) in
    ``sweep_dir``; returns what they show."""
    summary = collect(sweep_dir)
    (summary.folder / "summary.md").write_text(markdown(summary))
    if plot_too and summary.columns:
        plot(summary, summary.folder / "summary.png", references)
    return summary
