"""What a pool records of where its windows' maxima were, and how it sends values back:
``HardWhere`` (max pooling's switches) and ``SoftWhere`` (soft argmax positions); ``splat``,
the generic bilinear splat at any positions."""

from __future__ import annotations

from functools import cached_property

import torch
from torch import Tensor

from swwae.pooling.geometry import Geometry
from swwae.pooling.soft import window_splat
from swwae.pooling.windows import window_origins


def check_values(v: Tensor, what: torch.Size) -> None:
    """ValueError (one line) unless ``v`` is shaped like the pooling's what, as unpooling needs."""
    if v.shape != what:
        raise ValueError(f"unpooling takes values shaped like the pool's what, {tuple(what)}, got {tuple(v.shape)}")


class HardWhere:
    """Switches of a max pooling: ``indices`` (flat H*W index of each window's winner).

    ``mask`` is computed lazily, on first read, from the switches, so training pays nothing
    for it unless someone looks.
    """

    def __init__(self, indices: Tensor, input: Tensor, geometry: Geometry):
        self.indices, self.input, self.geometry = indices, input.detach(), geometry

    @property
    def shape(self) -> torch.Size:
        return self.input.shape

    def unpool(self, v: Tensor) -> Tensor:
        """Adjoint of max pooling at the recorded input: v[w] goes to the winner of w (in the
        promoted dtype of v and the input: under autocast, v may come from a float32 op)."""
        check_values(v, self.indices.shape)
        g, x = self.geometry, self.input
        if v.dtype != x.dtype:
            dtype = torch.promote_types(v.dtype, x.dtype)
            v, x = v.to(dtype), x.to(dtype)
        return torch.ops.aten.max_pool2d_with_indices_backward(
            v, x, g.kernel, g.stride, g.padding, (1, 1), False, self.indices
        )

    @cached_property
    def mask(self) -> Tensor:
        """d sum(max_pool2d(x)) / dx: a 0/1 bed of nails; a pixel winning K windows gets K.

        The gradient-of-sum trick through max pooling's own backward (``unpool``): d sum / d what
        is ones, taken back through the switches recorded when pooling. Pooling the recorded input
        again would see whatever was written there since (it shares the pool's input memory: an
        in-place op after the pool), and give a mask disagreeing with the unpooling. Outside
        inference mode: a tensor that autograd may use later."""
        with torch.inference_mode(False):
            return self.unpool(torch.ones(self.indices.shape, dtype=self.input.dtype, device=self.indices.device))


class SoftWhere:
    """Continuous positions of the soft argmax of each window, shaped like ``what``.

    Each position lies inside its own window, on valid (unpadded) cells. It is kept
    relative to the window's first cell (``in_window_row``, ``in_window_col``, in
    [0, k - 1]), which is what unpooling works with; ``row`` and ``col``, in input-pixel
    coordinates, are derived on first read (differentiable too).
    """

    def __init__(self, in_window_row: Tensor, in_window_col: Tensor, shape: torch.Size, geometry: Geometry):
        self.in_window_row, self.in_window_col = in_window_row, in_window_col
        self.shape, self.geometry = shape, geometry

    @cached_property
    def row(self) -> Tensor:
        return self.in_window_row + window_origins(self.geometry, self.shape[-2:], self.in_window_row)[0][0]

    @cached_property
    def col(self) -> Tensor:
        return self.in_window_col + window_origins(self.geometry, self.shape[-2:], self.in_window_col)[1][0]

    def unpool(self, v: Tensor) -> Tensor:
        """Bilinear splat of each v at its position (== ``splat(v, row, col, shape)``)."""
        check_values(v, self.in_window_row.shape)  # a broadcast would splat a wrong v without a word
        return window_splat(v, self.in_window_row, self.in_window_col, self.geometry, self.shape)

    @cached_property
    def mask(self) -> Tensor:
        """Soft bed of nails: ``unpool(ones)``, a constant."""
        with torch.no_grad():
            return window_splat(
                torch.ones_like(self.in_window_row), self.in_window_row, self.in_window_col, self.geometry, self.shape
            )


def splat(v: Tensor, row: Tensor, col: Tensor, shape) -> Tensor:
    """Add each value of ``v`` at (row, col) by bilinear weights onto the 4 nearest pixels.

    Differentiable in ``v`` and in the positions; overlapping deposits add up. Any
    positions inside the image work (a generic scatter-add); ``SoftWhere.unpool`` does the
    same for positions inside their pooling windows, faster.
    """
    n, c, height, width = shape
    row0, col0 = row.detach().floor(), col.detach().floor()
    frac_r, frac_c = row - row0, col - col0
    indices, values = [], []
    for dr, wr in ((0, 1 - frac_r), (1, frac_r)):
        r = (row0 + dr).clamp(0, height - 1)
        for dc, wc in ((0, 1 - frac_c), (1, frac_c)):
            cc = (col0 + dc).clamp(0, width - 1)  # a clamped corner always has weight 0
            indices.append((r * width + cc).long().flatten(2))
            values.append((v * wr * wc).flatten(2))
    out = v.new_zeros(n, c, height * width)
    return out.scatter_add(2, torch.cat(indices, 2), torch.cat(values, 2)).view(shape)
