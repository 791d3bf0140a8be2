"""The sweep figures say what they show: ``summary.png`` draws error bars only over several
seeds, and ``compare_runs --recon`` names every panel's config and every row of images, with
no text cut off at the figure's edge."""

from __future__ import annotations

import itertools
import textwrap

import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.container import ErrorbarContainer

from helpers.sweeps import fake_job
from swwae.training.sweep import collect, figures


@pytest.fixture
def drawn(monkeypatch):
    """The figures the sweep code saves, kept for the test to look at (drawn again)."""
    kept = []
    save = figures.save_figure

    def keep(fig, out):
        kept.append(fig)
        return save(fig, out)

    monkeypatch.setattr(figures, "save_figure", keep)
    return kept


def error_bars(fig) -> list:
    """Every set of error bars drawn, over bars (barh's xerr) or points (errorbar)."""
    return [c for ax in fig.axes for c in ax.containers if isinstance(c, ErrorbarContainer)]


def summary_of(tmp_path, models, seeds, extra=()):
    for num, (model, *rest, seed) in enumerate(itertools.product(models, *extra, seeds)):
        keys = [f"model={model}", *(f"model.pool_size={p}" for p in rest), f"seed={seed}"]
        fake_job(tmp_path, num, keys, {"test/recon_mse": 0.01 * (1 + seed + num), "train_time_s": 5.0 + seed})
    return collect(tmp_path)


def test_one_seed_draws_its_value_without_error_bars(tmp_path, drawn):
    figures.plot(summary_of(tmp_path, ["swwae_hard", "upsample"], [0]), tmp_path / "summary.png")
    assert error_bars(drawn[0]) == []
    assert (tmp_path / "summary.png").stat().st_size > 5000


def test_several_seeds_draw_their_spread(tmp_path, drawn):
    figures.plot(summary_of(tmp_path, ["swwae_hard", "upsample"], [0, 1]), tmp_path / "summary.png")
    assert len(error_bars(drawn[0])) == 2 * 2  # each config, on the MSE and the time panels


def test_over_a_numeric_axis_only_configs_with_seeds_get_error_bars(tmp_path, drawn):
    summary = summary_of(tmp_path / "one", ["swwae_hard", "upsample"], [0], extra=[["2", "4"]])
    assert figures.numeric_axis(summary) == "model.pool_size"
    figures.plot(summary, tmp_path / "one.png")
    assert error_bars(drawn[0]) == []
    assert [line.get_label() for line in drawn[0].axes[0].get_lines() if line.get_marker() == "o"] == [
        "model=swwae_hard",
        "model=upsample",
    ]  # the means are still drawn, one line per config
    figures.plot(summary_of(tmp_path / "two", ["swwae_hard"], [0, 1], extra=[["2", "4"]]), tmp_path / "two.png")
    bars = error_bars(drawn[1])
    assert len(bars) == 2 and len(bars[0].lines[2][0].get_segments()) == 2  # MSE and time: a bar at each pool size


def test_the_reconstruction_figure_names_each_config_and_each_row_inside_the_picture(tmp_path, drawn):
    labels = ["+experiment/hard_vs_soft@_global_=soft_beta10", "+experiment/hard_vs_soft@_global_=upsample"]
    grid = torch.rand(3, 2 + 3 * (28 + 2), 2 + 6 * (28 + 2))  # 3 rows of 6 digits, as labelled_figure pads them
    figures.draw_reconstructions(
        {label: grid for label in labels}, [[label] for label in labels], tmp_path / "reconstructions.png"
    )
    fig = drawn[0]
    canvas = FigureCanvasAgg(fig)  # the saved figure, drawn again to measure its texts
    canvas.draw()
    renderer = canvas.get_renderer()
    first, second = fig.axes
    assert [t.get_text() for t in first.get_yticklabels()] == list(figures.ROW_NAMES)
    assert [ax.get_title() for ax in fig.axes] == [textwrap.fill(label, 44) for label in labels]
    texts = [fig._suptitle, first.title, second.title, *first.get_yticklabels()]
    for text in texts:  # nothing clipped: every text inside the figure
        box = text.get_window_extent(renderer)
        assert fig.bbox.x0 <= box.x0 and box.x1 <= fig.bbox.x1 and fig.bbox.y0 <= box.y0 and box.y1 <= fig.bbox.y1, (
            text.get_text()
        )
    assert (tmp_path / "reconstructions.png").stat().st_size > 5000
