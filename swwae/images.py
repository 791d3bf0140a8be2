"""Pictures of what the SWWAE does: labelled figures a person can read.

The one place the panels are built, for every consumer: the logged panels of the
``ReconstructionImages`` callback (TensorBoard, MLflow, W&B), the PNG of
``scripts/evaluate.py``, the PNG of ``scripts/project.py`` and the sweep figures.

A figure is rows of images, each row named in a label strip on its left. A logged panel is
drawn for the card a logger shows it in (``card_figure``): TensorBoard's default grid (its Time
Series dashboard) fits an image into a box of ``CARD_WIDTH`` by ``CARD_HEIGHT`` pixels, so a
panel holds at most ``CARD_COLUMNS`` images a line, each row's label above it (a strip beside
the rows would take a third of the width), in a font that is ``CARD_FONT`` pixels once the
panel is shrunk into the box. (Eight digits a row beside a label strip, 803 pixels wide, showed
their labels 4-5 pixels tall there. Four digits with the labels above, 346 by 345 pixels, were
shrunk by the box's height to 0.62x: labels 8-9 pixels tall in Chromium. Their font now grows
until it is ``CARD_FONT`` pixels as shown.)

Every image is magnified by a whole number (nearest neighbour, so pixels stay pixels) until it
is at least ``MIN_IMAGE_WIDTH`` pixels wide: 3x for 28-pixel digits and 32-pixel CIFAR images,
1x for 96-pixel STL-10 images. Smaller images of the same figure (the where masks and middle
reconstructions of deeper stages) are brought to the same size, so the columns line up.
"""

from __future__ import annotations

import io
import math
from functools import cached_property, lru_cache

import torch
import torch.nn.functional as F
from torch import Tensor
from torchvision.utils import make_grid

from swwae.model import SWWAE, SWWAEOutput, eval_mode

MIN_IMAGE_WIDTH = 84  # pixels an image is magnified to at least, at the default zoom
PAD = 2  # white pixels between the images of a figure
# the image box of TensorBoard's card in its default grid (TensorBoard 2.21 in Chromium, a
# 1280x800 window; at 1920x1080 the cards are wider, as tall): an image is shrunk to fit, never enlarged
CARD_WIDTH, CARD_HEIGHT = 313, 215  # pixels
CARD_COLUMNS = 4  # images a line in a logged panel: four 84-pixel images fill such a card
CARD_FONT = 14  # pixels the labels' font is, seen in the card (the letters about 10 tall)

# helpers


def upscale_factor(width: int, min_width: int = MIN_IMAGE_WIDTH) -> int:
    """The smallest whole magnification that makes an image ``width`` pixels wide at least
    ``min_width`` wide: 3 for 28 or 32 pixels, 1 for 96."""
    return max(1, math.ceil(min_width / max(int(width), 1)))


def _channel_mean(t: Tensor) -> Tensor:
    return t.float().mean(1, keepdim=True)


def _scaled_by(t: Tensor, reference: Tensor) -> Tensor:
    """Divide each image by the max of its reference image, so pairs share one scale."""
    peak = reference.flatten(1).amax(1).clamp_min(1e-8).view(-1, 1, 1, 1)
    return (t / peak).clamp(0, 1)


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)  # a scalable font (Pillow >= 10.1 with FreeType)
    except (TypeError, OSError, ImportError):
        return ImageFont.load_default()


@lru_cache(maxsize=64)
def _text_strip(
    labels: tuple[str, ...],
    centres: tuple[int, ...],
    height: int,
    font_size: int,
    width: int | None = None,
    align: str = "right",
) -> Tensor:
    """(3, height, W) white strip with ``labels[i]`` written around ``centres[i]`` (y, in
    pixels); W fits the longest label unless ``width`` is given. Cached: a callback draws the
    same strip every epoch."""
    from PIL import Image, ImageDraw

    font = _font(font_size)
    measure = ImageDraw.Draw(Image.new("L", (1, 1)))
    widths = [measure.textlength(label, font=font) for label in labels]
    margin = max(4, font_size // 2)
    width = width or int(math.ceil(max(widths, default=0))) + 2 * margin
    strip = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(strip)
    for label, text_width, y in zip(labels, widths, centres):
        x = width - margin - text_width if align == "right" else margin
        draw.text((x, y), label, fill=25, font=font, anchor="lm")
    pixels = torch.frombuffer(bytearray(strip.tobytes()), dtype=torch.uint8).view(1, height, width)
    return (pixels.float() / 255).expand(3, height, width).contiguous()


def font_size_for(image_height: int) -> int:
    """Label size for rows of images ``image_height`` pixels tall (as shown)."""
    return int(min(18, max(12, image_height // 6)))


def _banner(lines: tuple[str, ...], font: int) -> Tensor:
    """Lines of text, left-aligned, one under the other: a title, or a row's label above it."""
    step = int(1.5 * font)
    centres = tuple(step // 2 + PAD + i * step for i in range(len(lines)))
    return _text_strip(lines, centres, len(lines) * step + PAD, font, align="left")


def _stacked(*figures: Tensor) -> Tensor:
    """Figures one under the other, the narrower ones made as wide with white on the right
    (each copied once into place)."""
    height, width = sum(figure.shape[1] for figure in figures), max(figure.shape[2] for figure in figures)
    out = figures[0].new_ones(figures[0].shape[0], height, width)
    top = 0
    for figure in figures:
        out[:, top : top + figure.shape[1], : figure.shape[2]] = figure
        top += figure.shape[1]
    return out


# figures


def labelled_figure(
    rows: list[tuple[str, Tensor]],
    scale: int | None = None,
    labels: bool = True,
    title: str | None = None,
    size: tuple[int, int] | None = None,
) -> Tensor:
    """(3, H, W) image in [0, 1]: each row ``(label, images)`` as one line of images
    (``images``: (n, C, h, w) in [0, 1], C of 1 or 3), its label on the left, and ``title``
    above. Every image is resized (nearest) to ``size`` (default: the first row's image
    size) times ``scale`` (default: ``upscale_factor`` of that width). Rows may hold fewer
    images than the longest: the rest of the line stays white. A title may have several
    lines."""
    size = tuple(size or rows[0][1].shape[-2:])
    scale = upscale_factor(size[1]) if scale is None else int(scale)
    tile = (size[0] * scale, size[1] * scale)
    n = max(len(images) for _, images in rows)
    tiles = []
    for _, images in rows:
        images = images.detach().float().cpu()
        if tuple(images.shape[-2:]) != tile:
            images = F.interpolate(images, size=tile, mode="nearest")
        if images.shape[1] == 1:
            images = images.expand(-1, 3, -1, -1)
        if len(images) < n:
            images = torch.cat([images, images.new_ones(n - len(images), *images.shape[1:])])
        tiles.append(images.clamp(0, 1))
    grid = make_grid(torch.cat(tiles), nrow=n, padding=PAD, pad_value=1)
    font = font_size_for(tile[0])
    if labels:
        centres = tuple(PAD + r * (tile[0] + PAD) + tile[0] // 2 for r in range(len(rows)))
        strip = _text_strip(tuple(label for label, _ in rows), centres, grid.shape[1], font)
        grid = torch.cat([strip, grid], dim=2)
    if title:  # one line per line of the title
        grid = _stacked(_banner(tuple(title.splitlines()), font), grid)
    return grid


def card_figure(
    rows: list[tuple[str, Tensor]], scale: int | None = None, size: tuple[int, int] | None = None
) -> Tensor:
    """(3, H, W) image in [0, 1]: ``rows`` as ``labelled_figure`` draws them, for a logger's
    card: at most ``CARD_COLUMNS`` images a line (more images take more lines, every row
    again), each row's label above its images, in a font that is still ``CARD_FONT`` pixels
    when the card shrinks the figure into its box (``card_scale``; at most a third of an image's
    height: a panel of many lines is shrunk a lot, and the card's zoom shows it whole)."""
    size = tuple(size or rows[0][1].shape[-2:])
    n = max(len(images) for _, images in rows)
    lines = [
        (label, images[start : start + CARD_COLUMNS])
        for start in range(0, n, CARD_COLUMNS)
        for label, images in rows
        if len(images) > start
    ]
    grids = [labelled_figure([line], scale=scale, labels=False, size=size) for line in lines]
    tile = grids[0].shape[1] - 2 * PAD

    def parts(font: int) -> list[Tensor]:  # each line's label (a cached strip) above its grid
        return [part for (label, _), grid in zip(lines, grids) for part in (_banner((label,), font), grid)]

    def scale_of(pieces: list[Tensor]) -> float:  # card_scale of the figure they stack into
        return _card_scale(sum(p.shape[1] for p in pieces), max(p.shape[2] for p in pieces))

    font = font_size_for(tile)
    pieces = parts(font)
    for _ in range(4):  # a larger font makes the panel taller, which the card shrinks more
        needed = min(math.ceil(CARD_FONT / scale_of(pieces)), tile // 3)  # labels stay smaller than images
        if needed <= font:
            break
        font = needed
        pieces = parts(font)
    return _stacked(*pieces)  # drawn once, at the font found


def _card_scale(height: int, width: int) -> float:
    return min(1.0, CARD_WIDTH / width, CARD_HEIGHT / height)


def card_scale(figure: Tensor) -> float:
    """How much TensorBoard's card shrinks ``figure`` (3, H, W) to show it: 1 if it fits."""
    return _card_scale(figure.shape[1], figure.shape[2])


@torch.no_grad()
def panel_rows(net: SWWAE, x: Tensor) -> dict[str, list[tuple[str, Tensor]]]:
    """name -> the named rows of images of that panel (all in [0, 1]):

    * ``reconstructions``: input | reconstruction | reconstruction with the where dropped
    * ``where/stage_<i>``: the where mask of stage i (mean over channels, scaled per image)
    * ``middle/stage_<i>``: the what of stage i (the input of encoder stage i + 1; mean over
      channels, scaled per image) | the decoder's reconstruction of it

    The rows come back in host memory, whatever the network's device: the figures are drawn
    there (a few hundred tiny ops, each a kernel launch and some a sync on a GPU), and the
    loggers and files take them from there anyway.
    """
    with eval_mode(net):  # one encoding, decoded with and without the wheres
        whats, wheres, sizes = net.encode(x)
        decoded = net.decode(whats[-1], wheres, sizes)
        out = SWWAEOutput(decoded[0], whats, wheres, decoded, logits=None)  # forward's, without the head
        dropped = net.decode(whats[-1], [None] * len(wheres), sizes)[0]
    panels = {
        "reconstructions": [
            ("input", x.clamp(0, 1)),
            ("reconstruction", out.recon.clamp(0, 1)),
            ("where dropped", dropped.clamp(0, 1)),
        ]
    }
    for i, where in enumerate(wheres, start=1):
        if where is not None:
            mask = _channel_mean(where.mask)
            panels[f"where/stage_{i}"] = [(f"where mask stage {i}", _scaled_by(mask, mask))]
    for i, (middle, target) in enumerate(out.middle_pairs, start=1):
        target, middle = _channel_mean(target), _channel_mean(middle)
        panels[f"middle/stage_{i}"] = [
            (f"stage {i} what", _scaled_by(target, target)),
            (f"stage {i} what decoded", _scaled_by(middle, target)),
        ]
    return {name: [(label, images.cpu()) for label, images in rows] for name, rows in panels.items()}


def reconstruction_panels(net: SWWAE, x: Tensor, scale: int | None = None, labels: bool = True) -> dict[str, Tensor]:
    """name -> (3, H, W) figure in [0, 1] of each panel of ``panel_rows``, every image at the
    input's size times ``scale`` (default: ``upscale_factor``): as the loggers show it
    (``card_figure``), or with ``labels=False`` the bare grid, one line of images per row
    (``scale=1``: one pixel per pixel)."""
    size = tuple(x.shape[-2:])
    if not labels:
        return {name: labelled_figure(rows, scale, False, size=size) for name, rows in panel_rows(net, x).items()}
    return card_panels(panel_rows(net, x), size, scale)


def card_panels(panels: dict[str, list[tuple[str, Tensor]]], size, scale: int | None = None) -> dict[str, Tensor]:
    """name -> (3, H, W) figure of each panel of ``panel_rows``' rows, as the loggers show it
    (``card_figure``), every image at ``size`` (the input's) times ``scale``: host work alone."""
    return {name: card_figure(rows, scale, size) for name, rows in panels.items()}


def evaluation_figure(net: SWWAE, x: Tensor, scale: int | None = None, title: str | None = None) -> Tensor:
    """The PNG of ``scripts/evaluate.py``: rows input | reconstruction | where dropped, then
    the where mask of each stage, every image at the input's size (masks of deeper stages
    magnified to it), labelled."""
    rows = panel_rows(net, x)
    figure = list(rows["reconstructions"])
    figure += [row for name, panel in rows.items() if name.startswith("where/") for row in panel]
    return labelled_figure(figure, scale=scale, title=title, size=tuple(x.shape[-2:]))


def projection_figure(
    images: Tensor,
    projections: Tensor,
    nrow: int | None = None,
    scale: int | None = None,
    title: str | None = None,
    labels: bool = True,
) -> Tensor:
    """The PNG of ``scripts/project.py``: per pick (columns, ``nrow`` a line), its image
    above its projection (signed: grey is zero, light positive, dark negative), rows
    labelled image | projection."""
    n = len(images)
    nrow = nrow or n
    rows = []
    for start in range(0, n, nrow):
        chunk = slice(start, start + nrow)
        rows += [("image", images[chunk].clamp(0, 1)), ("projection", signed_to_unit(projections[chunk]))]
    return labelled_figure(rows, scale=scale, labels=labels, title=title)


def projection_grid(images: Tensor, projections: Tensor, nrow: int | None = None) -> Tensor:
    """(3, H, W) picture: the images of the picks above their projections, pick by pick
    (columns), in rows of ``nrow`` picks; one pixel per pixel, no labels (the bare grid of
    ``projection_figure``)."""
    return projection_figure(images, projections, nrow=nrow, scale=1, labels=False)


def signed_to_unit(t: Tensor) -> Tensor:
    """Per image: divide by its largest |value| and map [-1, 1] to [0, 1] (grey is zero)."""
    peak = t.flatten(1).abs().amax(1).clamp_min(1e-12).view(-1, *[1] * (t.dim() - 1))
    return (t / peak + 1) / 2


def to_uint8(image: Tensor):
    """(C, H, W) float image in [0, 1] -> (H, W, C) uint8 numpy array ((H, W) for C = 1), as
    PIL and the loggers take it."""
    pixels = image.detach().cpu().mul(255).add_(0.5).clamp_(0, 255).to(torch.uint8).permute(1, 2, 0)
    return (pixels[..., 0] if pixels.shape[-1] == 1 else pixels).contiguous().numpy()


class Picture:
    """A (3, H, W) figure in [0, 1] converted once for every logger and file that shows it.

    A figure whose three channels are equal (every MNIST panel) is kept as one grey channel:
    a third of the bytes to convert and encode. ``png`` is encoded at zlib level 1, as the
    panels are logged every epoch: for an epoch's MNIST panels 5 ms and 30 KB, where the
    default level takes 11 ms for 24 KB, and a colour PNG at the default level 27 ms."""

    def __init__(self, image: Tensor):
        grey = image.shape[0] == 3 and torch.equal(image[0], image[1]) and torch.equal(image[1], image[2])
        self.pixels = to_uint8(image[:1] if grey else image)  # (H, W) grey or (H, W, C)

    @property
    def channels(self) -> int:
        return 1 if self.pixels.ndim == 2 else self.pixels.shape[-1]

    @cached_property
    def pil(self):
        """The PIL image, set to be written as PNG at level 1 by whoever saves it (MLflow and
        W&B save the images they are given; Pillow reads ``encoderinfo`` on every save)."""
        from PIL import Image

        image = Image.fromarray(self.pixels)
        image.encoderinfo = {"compress_level": 1}
        return image

    @cached_property
    def png(self) -> bytes:
        buffer = io.BytesIO()
        self.pil.save(buffer, format="PNG", compress_level=1)
        return buffer.getvalue()


def save_png(image: Tensor, path) -> None:
    """Write a (3, H, W) float image in [0, 1] as an 8-bit PNG (grey when it is grey; at
    Pillow's default level: a file is written once, so it may as well be small)."""
    from PIL import Image

    Image.fromarray(Picture(image).pixels).save(path)
