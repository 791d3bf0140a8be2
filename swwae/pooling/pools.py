"""The pools: ``WhatWherePool`` (hard or soft where) and the where-free baselines, one
class a mode, and ``make_pool``, which picks one from a config."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from swwae.pooling.geometry import Geometry, _pair
from swwae.pooling.soft import _SoftPoolFunction
from swwae.pooling.unpooling import NearestUnpool, TransposedConvUnpool, WaveletUnpool
from swwae.pooling.wheres import HardWhere, SoftWhere

WHERE_MODES = ("hard", "soft")
WHERELESS_MODES = ("upsample", "avg", "strided", "wavelet")
MODES = WHERE_MODES + WHERELESS_MODES


class _Pool(nn.Module):
    """Common part: geometry, input checks, the size of the last input (for where=None)."""

    mode: str

    def __init__(self, kernel_size=2, stride=None, padding=0):
        super().__init__()
        self.geometry = Geometry(kernel_size, stride, padding)
        self.input_size: tuple[int, int] | None = None

    def forward(self, x: Tensor):
        self.geometry.check(x)
        self.input_size = tuple(x.shape[-2:])
        return self.pool(x)

    def make_upsampler(self) -> nn.Module:
        """The where-free way back up (used for baselines and for 'where dropped')."""
        return NearestUnpool(self.geometry)

    def extra_repr(self) -> str:
        return f"mode={self.mode!r}, {self.geometry}"


class WhatWherePool(_Pool):
    """Max pooling that also says where: ``mode="hard"`` (switches) or ``"soft"`` (soft argmax)."""

    def __init__(self, kernel_size=2, stride=None, padding=0, mode="hard", beta=100.0):
        super().__init__(kernel_size, stride, padding)
        if mode not in WHERE_MODES:
            raise ValueError(f"WhatWherePool mode must be one of {WHERE_MODES}, got {mode!r}")
        if not beta > 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        self.mode, self.beta = mode, float(beta)

    def pool(self, x: Tensor):
        return self._hard(x) if self.mode == "hard" else self._soft(x)

    def _hard(self, x: Tensor):
        g = self.geometry
        what, indices = F.max_pool2d(x, g.kernel, g.stride, g.padding, return_indices=True)
        return what, HardWhere(indices, x, g)

    def _soft(self, x: Tensor):
        what, in_window_row, in_window_col = _SoftPoolFunction.apply(x, self.geometry, self.beta)
        return what, SoftWhere(in_window_row, in_window_col, x.shape, self.geometry)


class MaxUpsamplePool(_Pool):
    """Baseline ``upsample``: max pooling whose where is thrown away; nearest upsampling back."""

    mode = "upsample"

    def pool(self, x: Tensor):
        g = self.geometry
        return F.max_pool2d(x, g.kernel, g.stride, g.padding), None


class AvgPool(_Pool):
    """Baseline ``avg``: average pooling (padded cells not counted); nearest upsampling back."""

    mode = "avg"

    def pool(self, x: Tensor):
        g = self.geometry
        return F.avg_pool2d(x, g.kernel, g.stride, g.padding, count_include_pad=False), None


class StridedConvPool(_Pool):
    """Baseline ``strided`` (the all-convolutional net): a learned stride-k conv down,
    a learned transposed conv up."""

    mode = "strided"

    def __init__(self, channels: int, kernel_size=2, stride=None, padding=0):
        super().__init__(kernel_size, stride, padding)
        self.channels = channels
        g = self.geometry
        self.down = nn.Conv2d(channels, channels, g.kernel, g.stride, g.padding)

    def pool(self, x: Tensor):
        return self.down(x), None

    def make_upsampler(self) -> nn.Module:
        return TransposedConvUnpool(self.channels, self.geometry)


class WaveletPool(_Pool):
    """Baseline ``wavelet``: the low-pass band of a 2-d discrete wavelet transform (ptwt).

    ``kernel_size`` must be a power of two 2**L: L levels of the transform, each halving the
    size. The band is divided by 2**L so that a constant image keeps its value (a mean, like
    average pooling; for Haar on even sizes it *is* average pooling).
    """

    mode = "wavelet"

    def __init__(self, kernel_size=2, wavelet="haar"):
        kernel = _pair(kernel_size)
        levels = math.log2(kernel[0])
        if kernel[0] != kernel[1] or kernel[0] < 2 or levels != int(levels):
            raise ValueError(f"wavelet pooling needs a square power-of-two kernel_size, got {kernel_size}")
        super().__init__(kernel_size)
        self.wavelet, self.levels = wavelet, int(levels)

    def pool(self, x: Tensor):
        import ptwt

        low = x
        for _ in range(self.levels):
            low = ptwt.wavedec2(low, self.wavelet, level=1, mode="reflect")[0] / 2
        return low, None

    def make_upsampler(self) -> nn.Module:
        return WaveletUnpool(self.wavelet, self.levels)


def make_pool(mode: str, channels: int | None = None, kernel_size=2, stride=None, padding=0,
              beta: float = 100.0, wavelet: str = "haar") -> _Pool:
    """One pool from a config: ``mode`` picks the class, the rest is its geometry."""
    if mode in WHERE_MODES:
        return WhatWherePool(kernel_size, stride, padding, mode=mode, beta=beta)
    if mode == "upsample":
        return MaxUpsamplePool(kernel_size, stride, padding)
    if mode == "avg":
        return AvgPool(kernel_size, stride, padding)
    if mode == "strided":
        if channels is None:
            raise ValueError("strided pooling needs the number of channels")
        return StridedConvPool(channels, kernel_size, stride, padding)
    if mode == "wavelet":
        if stride not in (None, kernel_size) or padding:
            raise ValueError("wavelet pooling has no stride or padding of its own: leave them unset")
        return WaveletPool(kernel_size, wavelet)
    raise ValueError(f"unknown pooling mode {mode!r}; choose one of {MODES}")
