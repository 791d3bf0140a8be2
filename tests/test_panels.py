"""Readable panels (swwae/images.py): magnified by whole numbers, labelled rows, the same
figures for the loggers, scripts/evaluate.py and scripts/project.py; a logged panel still
readable where TensorBoard shows it, shrunk into its card."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torchvision.utils import make_grid

from swwae.images import (
    CARD_COLUMNS,
    CARD_HEIGHT,
    CARD_WIDTH,
    MIN_IMAGE_WIDTH,
    PAD,
    Picture,
    card_figure,
    card_scale,
    evaluation_figure,
    labelled_figure,
    panel_rows,
    projection_figure,
    reconstruction_panels,
    to_uint8,
    upscale_factor,
)
from swwae.model import SWWAE


def net(widths=(4, 8), image_shape=(1, 28, 28)):
    torch.manual_seed(0)
    return SWWAE(widths=widths, image_shape=image_shape, num_classes=None).eval()


def images(n=8, shape=(1, 28, 28)):
    return torch.rand(n, *shape, generator=torch.Generator().manual_seed(1))


def grid_width(n, tile):
    return n * (tile + PAD) + PAD


def top_of(image, figure):
    """The row of ``figure`` (3, H, W) where ``image`` (h, w) sits at the left edge, or None."""
    h, w = image.shape
    column = figure[0, :, PAD : PAD + w]
    return next((y for y in range(len(column) - h + 1) if torch.equal(column[y : y + h], image)), None)


def letter_heights(figure) -> list[int]:
    """The heights of the bands of pixel rows holding a dark pixel, top to bottom: on a figure
    of white images, each band is a label's letters."""
    inked = (figure < 0.5).any(0).any(1).tolist()
    heights, run = [], 0
    for dark in [*inked, False]:
        if dark:
            run += 1
        elif run:
            heights, run = [*heights, run], 0
    return heights


@pytest.mark.parametrize("width, factor", [(28, 3), (32, 3), (96, 1), (14, 6), (84, 1), (200, 1)])
def test_images_are_magnified_by_a_whole_number_to_84_pixels(width, factor):
    assert upscale_factor(width) == factor and width * factor >= MIN_IMAGE_WIDTH


def test_panels_are_labelled_and_magnified_and_the_columns_line_up():
    model, x = net(), images()
    rows = panel_rows(model, x)
    assert [label for label, _ in rows["reconstructions"]] == ["input", "reconstruction", "where dropped"]
    assert [label for label, _ in rows["where/stage_2"]] == ["where mask stage 2"]
    assert [label for label, _ in rows["middle/stage_1"]] == ["stage 1 what", "stage 1 what decoded"]

    panels = reconstruction_panels(model, x)
    tile = 28 * 3
    for name, panel in panels.items():
        assert panel.shape[2] == grid_width(CARD_COLUMNS, tile), name  # the images fill the width, labels above
        assert panel.shape[1] > 2 * len(rows[name]) * (tile + PAD), name  # 8 images: every row on two lines
        assert 0 <= panel.min() and panel.max() <= 1
    # pixels stay pixels: each digit repeated 3x3 (nearest), the fifth at the start of the second line
    figure = panels["reconstructions"]
    first, fifth = (top_of(x[i, 0].repeat_interleave(3, 0).repeat_interleave(3, 1), figure) for i in (0, 4))
    assert first is not None and fifth is not None and first < fifth
    # each row's label is drawn above it: a band of letters over every line of images
    assert len(letter_heights(figure[:, :first])) == 1


def test_bare_panels_are_the_plain_grid():
    model, x = net(), images()
    bare = reconstruction_panels(model, x, scale=1, labels=False)["reconstructions"]
    rows = panel_rows(model, x)["reconstructions"]
    expected = make_grid(
        torch.cat([images for _, images in rows]).expand(-1, 3, -1, -1), nrow=8, padding=PAD, pad_value=1
    )
    assert torch.equal(bare, expected)


@pytest.mark.parametrize("shape, factor", [((3, 32, 32), 3), ((3, 96, 96), 1)])
def test_colour_images_of_other_sizes(shape, factor):
    model, x = net(image_shape=shape), images(4, shape)
    figure = reconstruction_panels(model, x)["reconstructions"]
    assert figure.shape[2] == grid_width(4, shape[1] * factor)
    assert top_of(x[0, 0].repeat_interleave(factor, 0).repeat_interleave(factor, 1), figure) is not None


@pytest.mark.parametrize("shape", [(1, 28, 28), (3, 32, 32), (3, 96, 96), (3, 160, 160)])
def test_a_logged_panel_is_readable_in_tensorboards_card(shape):
    """TensorBoard's default grid fits an image into a CARD_WIDTH x CARD_HEIGHT box (measured in
    Chromium): shrunk so, every label of every panel of the default 4 images is 9 pixels tall or
    more (measured on the drawn figure: with white images, every dark pixel is a letter), and a
    line holds CARD_COLUMNS images. With 8, every row is labelled on both of its lines."""
    for n in (4, 8):
        for name, rows in panel_rows(net(image_shape=shape), images(n, shape)).items():
            white = [(label, torch.ones_like(x)) for label, x in rows]
            figure = card_figure(white, size=shape[1:])
            heights = letter_heights(figure)
            assert len(heights) == n // CARD_COLUMNS * len(rows), (n, name)
            assert figure.shape[2] == grid_width(CARD_COLUMNS, upscale_factor(shape[2]) * shape[2]), name
            assert n > CARD_COLUMNS or min(heights) * card_scale(figure) >= 9, (name, heights, figure.shape)


def test_the_card_shrinks_a_figure_into_its_box_and_never_enlarges_it():
    assert card_scale(torch.zeros(3, CARD_HEIGHT, CARD_WIDTH)) == 1.0
    assert card_scale(torch.zeros(3, 10, 10)) == 1.0
    assert card_scale(torch.zeros(3, CARD_HEIGHT, 2 * CARD_WIDTH)) == 0.5  # too wide
    assert card_scale(torch.zeros(3, 4 * CARD_HEIGHT, CARD_WIDTH)) == 0.25  # too tall: the three-row panels


def test_the_evaluate_figure_has_a_title_and_a_row_per_where_mask():
    model, x = net(), images()
    plain = evaluation_figure(model, x)
    assert plain.shape[1] == 5 * (84 + PAD) + PAD  # input, reconstruction, where dropped, 2 masks
    titled = evaluation_figure(model, x, title="run: best.ckpt, test images")
    assert titled.shape[1] > plain.shape[1] and titled.shape[2] == plain.shape[2]


def test_the_projection_figure_pairs_images_and_projections():
    x, proj = images(10), torch.randn(10, 1, 28, 28)
    figure = projection_figure(x, proj, nrow=8)
    assert figure.shape[1] == 4 * (84 + PAD) + PAD  # image, projection; image, projection (2 left in the last line)
    zoomed = projection_figure(x, proj, nrow=8, scale=5)
    assert zoomed.shape[1] == 4 * (140 + PAD) + PAD


def test_a_long_title_widens_the_figure_instead_of_being_cut():
    x = images(2)
    figure = labelled_figure([("input", x)], title="a title much longer than two small images " * 3)
    assert figure.shape[2] > grid_width(2, 84) + 60


@pytest.mark.slow
def test_the_scripts_write_labelled_pngs_a_person_can_read(make_config, tmp_path):
    from PIL import Image

    from swwae.commands.evaluate import evaluate
    from swwae.commands.project import run as project
    from swwae.training.run import train

    train(make_config("model.widths=[4,8]"))
    best = tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "best.ckpt"
    png = Path(evaluate(best, out=tmp_path / "recon.png")["png"])
    width, height = Image.open(png).size
    assert width > grid_width(8, 84) and height > 5 * (84 + PAD) + PAD  # a title, then 5 rows of 84-pixel digits
    png = project(best, stage=2, top=8, images=50, out=tmp_path / "proj.png")
    width, height = Image.open(png).size
    assert width > grid_width(8, 84) and height > 2 * (84 + PAD) + PAD  # a title, then image and projection rows


def test_a_grey_panel_is_kept_as_one_channel_and_its_png_holds_the_same_pixels():
    import io

    import numpy as np
    from PIL import Image

    grey = reconstruction_panels(net(), images())["reconstructions"]
    picture = Picture(grey)
    assert picture.channels == 1 and picture.pixels.shape == tuple(grey.shape[1:])
    assert np.array_equal(picture.pixels, to_uint8(grey)[..., 0])  # nothing lost by dropping two copies
    decoded = Image.open(io.BytesIO(picture.png))
    assert decoded.mode == "L" and np.array_equal(np.asarray(decoded), picture.pixels)

    colour = reconstruction_panels(net(image_shape=(3, 32, 32)), images(shape=(3, 32, 32)))["reconstructions"]
    picture = Picture(colour)
    assert picture.channels == 3 and np.array_equal(np.asarray(Image.open(io.BytesIO(picture.png))), to_uint8(colour))
