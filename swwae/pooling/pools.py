"""The pools: ``WhatWherePool`` (hard or soft where) and the where-free baselines, one
class a family, and ``POOLS``, the one registry of mode names that ``make_pool``, ``MODES``,
the model's config checks and the configs' option comments read."""

from __future__ import annotations

import math

import torch.nn.functional as F
from torch import Tensor, nn

from swwae.pooling.base import Pool
from swwae.pooling.geometry import pair
from swwae.pooling.soft import SoftPoolFunction
from swwae.pooling.upsamplers import TransposedConvUnpool, WaveletUnpool
from swwae.pooling.wavelets import FilterBank
from swwae.pooling.wheres import HardWhere, SoftWhere


class WhatWherePool(Pool):
    """Max pooling that also says where: ``mode="hard"`` (switches) or ``"soft"`` (soft argmax)."""

    modes = ("hard", "soft")
    keeps_where = True

    def __init__(self, kernel_size: int | tuple[int, int] = 2, stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0, mode: str = "hard", beta: float = 100.0):
        super().__init__(kernel_size, stride, padding)
        if mode not in self.modes:
            raise ValueError(f"WhatWherePool mode must be one of {self.modes}, got {mode!r}")
        if not beta > 0:
            raise ValueError(f"beta must be > 0, got {beta}")
        self.mode, self.beta = mode, float(beta)

    @classmethod
    def from_config(cls, mode, *, channels, kernel_size, stride, padding, beta, wavelet):
        return cls(kernel_size, stride, padding, mode=mode, beta=beta)

    def pool(self, x: Tensor) -> tuple[Tensor, HardWhere | SoftWhere]:
        return self._hard(x) if self.mode == "hard" else self._soft(x)

    def _hard(self, x: Tensor):
        g = self.geometry
        what, indices = F.max_pool2d(x, g.kernel, g.stride, g.padding, return_indices=True)
        return what, HardWhere(indices, x, g)

    def _soft(self, x: Tensor):
        what, in_window_row, in_window_col = SoftPoolFunction.apply(x, self.geometry, self.beta)
        return what, SoftWhere(in_window_row, in_window_col, x.shape, self.geometry)


class MaxUpsamplePool(Pool):
    """Baseline ``upsample``: max pooling whose where is thrown away; nearest upsampling back."""

    mode = "upsample"
    modes = (mode,)

    def pool(self, x: Tensor):
        g = self.geometry
        return F.max_pool2d(x, g.kernel, g.stride, g.padding), None


class AvgPool(Pool):
    """Baseline ``avg``: average pooling (padded cells not counted); nearest upsampling back."""

    mode = "avg"
    modes = (mode,)

    def pool(self, x: Tensor):
        g = self.geometry
        return F.avg_pool2d(x, g.kernel, g.stride, g.padding, count_include_pad=False), None


class StridedConvPool(Pool):
    """Baseline ``strided`` (the all-convolutional net): a learned stride-k conv down,
    a learned transposed conv up."""

    mode = "strided"
    modes = (mode,)

    def __init__(self, channels: int, kernel_size: int | tuple[int, int] = 2,
                 stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0):
        super().__init__(kernel_size, stride, padding)
        self.channels = channels
        g = self.geometry
        self.down = nn.Conv2d(channels, channels, g.kernel, g.stride, g.padding)

    @classmethod
    def from_config(cls, mode, *, channels, kernel_size, stride, padding, beta, wavelet):
        if channels is None:
            raise ValueError("strided pooling needs the number of channels")
        return cls(channels, kernel_size, stride, padding)

    def pool(self, x: Tensor):
        return self.down(x), None

    def make_upsampler(self) -> nn.Module:
        return TransposedConvUnpool(self.channels, self.geometry)


class WaveletPool(Pool):
    """Baseline ``wavelet``: the low-pass band of a 2-d discrete wavelet transform (ptwt).

    ``kernel_size`` must be a power of two 2**L: L levels of the transform, each halving the
    size. The band is divided by 2**L so that a constant image keeps its value (a mean, like
    average pooling; for Haar on even sizes it *is* average pooling).
    """

    mode = "wavelet"
    modes = (mode,)

    def __init__(self, kernel_size: int | tuple[int, int] = 2, wavelet: str = "haar"):
        kernel = pair(kernel_size)
        levels = math.log2(kernel[0])
        if kernel[0] != kernel[1] or kernel[0] < 2 or levels != int(levels):
            raise ValueError(f"wavelet pooling needs a square power-of-two kernel_size, got {kernel_size}")
        super().__init__(kernel_size)
        self.wavelet, self.levels = wavelet, int(levels)
        self.filters = FilterBank.of(wavelet)

    @classmethod
    def from_config(cls, mode, *, channels, kernel_size, stride, padding, beta, wavelet):
        if stride not in (None, kernel_size) or padding:
            raise ValueError("wavelet pooling has no stride or padding of its own: leave them unset")
        return cls(kernel_size, wavelet)

    def pool(self, x: Tensor):
        import ptwt

        # (N * C, H, W): ptwt folds 4-d inputs to 3-d through numpy, which would fix the
        # batch size of an exported (ONNX) graph
        low = x.flatten(0, 1)
        for _ in range(self.levels):
            low = ptwt.wavedec2(low, self.filters, level=1, mode="reflect")[0] / 2
        return low.unflatten(0, x.shape[:2]), None

    def make_upsampler(self) -> nn.Module:
        return WaveletUnpool(self.filters, self.levels)


# the registry: mode name -> the class that pools that way
POOLS: dict[str, type[Pool]] = {mode: cls for cls in (WhatWherePool, MaxUpsamplePool, AvgPool, StridedConvPool,
                                                      WaveletPool) for mode in cls.modes}
MODES = tuple(POOLS)
WHERE_MODES = tuple(mode for mode, cls in POOLS.items() if cls.keeps_where)
WHERELESS_MODES = tuple(mode for mode in MODES if mode not in WHERE_MODES)


def make_pool(mode: str, channels: int | None = None, kernel_size: int | tuple[int, int] = 2,
              stride: int | tuple[int, int] | None = None, padding: int | tuple[int, int] = 0,
              beta: float = 100.0, wavelet: str = "haar") -> Pool:
    """One pool from a config: ``mode`` picks the class (``POOLS``), the rest is its geometry
    and settings, each mode taking the ones it has."""
    if mode not in POOLS:
        raise ValueError(f"unknown pooling mode {mode!r}; choose one of {MODES}")
    return POOLS[mode].from_config(mode, channels=channels, kernel_size=kernel_size, stride=stride, padding=padding,
                                   beta=beta, wavelet=wavelet)
