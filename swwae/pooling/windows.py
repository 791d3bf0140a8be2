"""The window layout of soft pooling, and the ways into it and out of it.

A tensor in window layout is (N, C, kh, kw, Ho, Wo), contiguous: plane (i, j) holds cell
(i, j) of every pooling window. Per-window sums and maxima are then element-wise ops between
whole planes, vectorised along Ho * Wo, instead of reductions over tiny inner dimensions of a
strided view (~10x slower on CPU); broadcasting a per-window value over the cells also keeps
long contiguous inner loops. Tensors with one value per window are (N, C, Ho, Wo); per cell
row or column of a window, (N, C, k, Ho, Wo). In: one strided copy (``to_windows``); out:
one copy into place, or col2im where windows overlap (``from_windows``); on the CPU, gathers
where they are faster (see ``GATHER_INTO_WINDOWS_UP_TO``).
"""

from __future__ import annotations

import functools
import math

import torch
import torch.nn.functional as F
from torch import Tensor

from swwae.pooling.geometry import Geometry, pooled_size


def window_view(t: Tensor, g: Geometry) -> Tensor:
    """A strided view of the (already padded) ``t`` (N, C, H, W) in window layout."""
    (kh, kw), (sh, sw) = g.kernel, g.stride
    return t.unfold(2, kh, sh).unfold(3, kw, sw).permute(0, 1, 4, 5, 2, 3)


# On the CPU a gather moves contiguous maps into and out of the window layout where a strided copy
# is slow. The copy's inner loop runs along a window row of the layout, Wo cells read kw apart (7
# for 4x4 windows on a 28x28 map, 4 for 7x7, 6 for 3x3 stride 2 on 14x14); the gather's along a
# whole (H, W) plane, read from one plane of the image: at Wo <= 8, 0.15-0.85x the copy's time, at
# Wo >= 10 no faster (1.0-1.3x). Back to the image, where windows tile it, a gather beat the copy
# into place (and 2-wide windows' interleave) at every size tried: 0.27-0.88x (one 1.04x). Same
# values, bit for bit (2 CPU cores, 2026-12-06).
GATHER_INTO_WINDOWS_UP_TO = 8  # Wo


def _on_cpu_planes(t: Tensor) -> bool:
    """Whether the gathers apply: contiguous maps on the CPU, in eager mode (the compiler writes its
    own loops, and would trace the cached indices' making, with a warning, at every compile). Asked
    first: torch 2.4-2.6 trace a backward strictly, refusing ``is_contiguous`` there."""
    return not torch.compiler.is_compiling() and t.device.type == "cpu" and t.is_contiguous()


@functools.lru_cache(maxsize=64)
def _window_cells(height: int, width: int, kernel: tuple[int, int], stride: tuple[int, int]) -> Tensor:
    """The flat pixel of each cell of the window layout of windows (``kernel``, ``stride``) over
    a height x width plane (padding already added): int64 on the CPU, a few KB."""
    pixels = torch.arange(height * width).view(1, 1, height, width)
    return window_view(pixels, Geometry(kernel, stride)).reshape(-1)


@functools.lru_cache(maxsize=32)
def _pixel_cells(height: int, width: int, kernel: tuple[int, int]) -> Tensor:
    """For windows tiling a height x width image: the cell of the window layout that each pixel is."""
    cells = _window_cells(height, width, kernel, kernel)
    pixels = torch.empty_like(cells)
    pixels[cells] = torch.arange(cells.numel())
    return pixels


def _gather_planes(t: Tensor, order: Tensor, shape) -> Tensor:
    """``order`` (flat indices into one (n, c) plane of ``t``) gathered from every plane, shaped ``shape``."""
    planes = t.reshape(shape[0] * shape[1], math.prod(t.shape[2:]))  # not -1, which no planes (N = 0) leave open
    return planes.gather(1, order.expand(planes.shape[0], -1)).view(shape)


def to_windows(x: Tensor, g: Geometry, fill: float = 0.0) -> Tensor:
    """The windows of ``x`` (N, C, H, W) in window layout, padded cells set to ``fill``.

    One strided copy, ~3x faster than im2col (``F.unfold``), which gives the same layout, or one
    gather where windows are few a row (``GATHER_INTO_WINDOWS_UP_TO``). Always a new tensor, even
    where the view is contiguous already (1x1 windows): callers write into it."""
    ph, pw = g.padding
    if ph or pw:
        x = F.pad(x, (pw, pw, ph, ph), value=fill)
    windows = window_view(x, g)
    if windows.shape[-1] <= GATHER_INTO_WINDOWS_UP_TO and _on_cpu_planes(x):
        return _gather_planes(x, _window_cells(*x.shape[-2:], g.kernel, g.stride), windows.shape)
    return torch.empty_like(windows, memory_format=torch.contiguous_format).copy_(windows)


def tiles_in_pairs(g: Geometry, shape, dtype) -> bool:
    """Whether 2-wide windows tile the image exactly (the usual 2x2 pool), so that image
    row ho * kh + i is the cells (i, 0) and (i, 1) of window row ho, interleaved: one
    ``interleave`` writes it, contiguously."""
    return g.kernel[1] == 2 and g.tiles(shape[-2:]) and dtype in (torch.float32, torch.float64)


def interleave(a: Tensor, b: Tensor, out: Tensor | None = None) -> Tensor:
    """a[..., k] and b[..., k] side by side along the last dimension, as (real, imaginary)
    pairs written by torch.complex: ~2x faster than a copy into every other float. Under
    torch.compile, a plain stack: the compiler fuses the copy, and traces no complex views
    nor ``out=`` into a strided view."""
    if torch.compiler.is_compiling():
        pairs = torch.stack((a, b), -1)
        return pairs if out is None else out.copy_(pairs)
    if out is None:
        return torch.view_as_real(torch.complex(a, b))
    torch.complex(a, b, out=torch.view_as_complex(out))
    return out


def from_windows(t: Tensor, g: Geometry, shape) -> Tensor:
    """Adjoint of ``to_windows``: add every window cell onto its pixel of an (N, C, H, W)
    image, dropping padded cells.

    Windows apart (stride >= kernel, the usual case) give every cell a pixel of its own, so this
    is one copy into place (on the CPU where windows tile the image, one gather; 2-wide windows:
    ``interleave`` writes, ~2x faster still; 2x2 windows tiling the image fill it whole, rows at a
    time). Overlapping windows add their cells' planes onto the image one cell at a time, each
    plane onto a strided view of it: every pixel is summed in a fixed order, deterministic, and
    in ``F.fold``'s order (so the same bits as col2im), which is 1.5-2.5x slower on CPU."""
    n, c, height, width = shape
    (kh, kw), (sh, sw), (ph, pw) = g.kernel, g.stride, g.padding
    ho, wo = t.shape[-2:]
    if t.numel() == 0:
        return t.new_zeros(shape)
    if g.tiles((height, width)) and _on_cpu_planes(t):
        return _gather_planes(t, _pixel_cells(height, width, g.kernel), shape)
    if sh < kh or sw < kw:
        rows, cols = max(height + 2 * ph, (ho - 1) * sh + kh), max(width + 2 * pw, (wo - 1) * sw + kw)
        image = t.new_zeros(n, c, rows, cols)  # in padded coordinates
        for i in range(kh):
            for j in range(kw):
                image[:, :, i : i + (ho - 1) * sh + 1 : sh, j : j + (wo - 1) * sw + 1 : sw].add_(t[:, :, i, j])
        return image[:, :, ph : ph + height, pw : pw + width]
    pairs = (kw, sw) == (2, 2) and t.dtype in (torch.float32, torch.float64)
    rows, cols = max(height + 2 * ph, ho * sh), max(width + 2 * pw, wo * sw)
    cols += pairs and cols % 2  # even: complex views of the image need even strides
    covered = (kh, kw) == (sh, sw) and (rows, cols) == (ho * sh, wo * sw)
    image = t.new_empty(n, c, rows, cols) if covered else t.new_zeros(n, c, rows, cols)  # in padded coordinates
    tiles = image[:, :, : ho * sh, : wo * sw].unflatten(3, (wo, sw)).unflatten(2, (ho, sh))  # (N, C, Ho, sh, Wo, sw)
    if pairs:
        for i in range(kh):
            interleave(t[:, :, i, 0], t[:, :, i, 1], out=tiles[:, :, :, i])
    else:
        tiles[:, :, :, :kh, :, :kw].copy_(t.permute(0, 1, 4, 2, 5, 3))
    return image[:, :, ph : ph + height, pw : pw + width]


def per_window(t: Tensor) -> Tensor:
    """(N, C, Ho, Wo) -> broadcastable against the window layout."""
    return t[:, :, None, None]


def combine_cells(t: Tensor, dim: int) -> Tensor:
    """Sum over the cells of one window axis, ``dim``, slice by slice: k - 1 element-wise
    ops on whole planes beat torch's reduction over a short, non-innermost dimension."""
    cells = t.unbind(dim)
    if len(cells) == 1:
        return cells[0].clone()
    out = cells[0] + cells[1]
    for cell in cells[2:]:
        out.add_(cell)
    return out


def window_sum(t: Tensor) -> Tensor:
    """Sum over the cells of each window, (N, C, Ho, Wo): up to 4 cells, plane additions
    (1.6x faster than torch's reduction over a short, non-innermost dimension)."""
    cells = t.flatten(2, 3)
    if cells.shape[2] > 4:
        return cells.sum(2)
    return combine_cells(cells, 2)


def window_max(t: Tensor) -> Tensor:
    """The largest cell of each window, (N, C, Ho, Wo) (NaN where a window holds one).

    torch's reduction over the cells is fast along (Ho, Wo) planes whose length is a multiple of
    32 values or close to one (32, 64, 196), and 2-4x slower than one ``maximum`` a cell along
    planes that leave a long rest (16, 49, 81: the later stages of a network, big windows), as if
    it took 32 values at a time and the rest one by one (measured on 2 CPU cores, 2026-12-06). So
    where that rest is more than an eighth of a plane, one op a cell; under torch.compile, the
    reduction (the compiler fuses it)."""
    cells = t.flatten(2, 3)
    plane = cells.shape[3] * cells.shape[4]
    if 8 * (plane % 32) <= plane or cells.shape[2] == 1 or torch.compiler.is_compiling():
        return cells.amax(2)
    top = torch.maximum(cells[:, :, 0], cells[:, :, 1])
    for i in range(2, cells.shape[2]):
        torch.maximum(top, cells[:, :, i], out=top)
    return top


def window_origins(g: Geometry, size, like: Tensor):
    """Per axis: each window's first cell (maybe a padded one), and its first and last valid
    cells, in input-pixel coordinates, shaped (Ho, 1) for rows and (Wo,) for columns."""
    axes = []
    for axis, (k, s, p, n) in enumerate(zip(g.kernel, g.stride, g.padding, size)):
        m = pooled_size(n, k, s, p)
        first = torch.arange(m, device=like.device, dtype=like.dtype) * s - p
        shape = (m, 1) if axis == 0 else (m,)
        axes.append(tuple(t.view(shape) for t in (first, first.clamp(min=0), (first + k - 1).clamp(max=n - 1))))
    return axes


def valid_cells(g: Geometry, size, like: Tensor) -> Tensor | None:
    """1 on window cells inside the image, 0 on padded ones (window layout, N = C = 1);
    None without padding."""
    if not any(g.padding):
        return None
    return to_windows(like.new_ones(1, 1, *size), g)
