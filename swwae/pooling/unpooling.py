"""Unpooling: ``Unpool``, bound to one pool, and the where-free ways back up it falls back
on (nearest upsampling through the pool's windows, a transposed conv, an inverse wavelet
transform)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.wheres import HardWhere, SoftWhere

if TYPE_CHECKING:  # annotations only: swwae.pooling.pools imports this module
    from swwae.pooling.pools import _Pool


def window_owner_upsample(v: Tensor, size, geometry: Geometry) -> Tensor:
    """Nearest upsampling through the pooling's own windows: pixel i copies window (i+p)//s.

    For stride == kernel this is ``F.interpolate(v, scale_factor=kernel)``; it also covers
    odd sizes, padding and overlapping windows, always returning exactly ``size``.
    """
    rows, cols = (
        ((torch.arange(n, device=v.device) + p) // s).clamp_(max=m - 1)
        for n, s, p, m in zip(size, geometry.stride, geometry.padding, v.shape[-2:])
    )
    return v[..., rows[:, None], cols[None, :]]


class NearestUnpool(nn.Module):
    def __init__(self, geometry: Geometry):
        super().__init__()
        self.geometry = geometry

    def forward(self, v: Tensor, size) -> Tensor:
        return window_owner_upsample(v, size, self.geometry)


class TransposedConvUnpool(nn.Module):
    def __init__(self, channels: int, geometry: Geometry):
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, channels, geometry.kernel, geometry.stride, geometry.padding)

    def forward(self, v: Tensor, size) -> Tensor:
        return self.up(v, output_size=list(size))


class WaveletUnpool(nn.Module):
    """Inverse wavelet transform of (v, zero details), level by level, cropped to each size."""

    def __init__(self, wavelet: str, levels: int):
        super().__init__()
        self.wavelet, self.levels = wavelet, levels

    def forward(self, v: Tensor, size) -> Tensor:
        import ptwt

        import pywt

        filter_len = pywt.Wavelet(self.wavelet).dec_len
        sizes = [tuple(size)]  # the size before each level of the forward transform
        for _ in range(self.levels - 1):
            sizes.append(tuple(pywt.dwt_coeff_len(n, filter_len, "reflect") for n in sizes[-1]))
        low = v
        for height, width in reversed(sizes):
            zeros = torch.zeros_like(low)
            low = ptwt.waverec2((low * 2, (zeros, zeros, zeros)), self.wavelet)[..., :height, :width]
        return low


class Unpool(nn.Module):
    """Unpooling bound to one pool: same windows, no global state.

    ``unpool(v, where)`` sends v back through the recorded where and returns a tensor shaped
    exactly like the pool's input. With ``where=None`` (a where-free baseline, or a where
    deliberately dropped) it upsamples without positions to ``output_size``, or to the size
    the pool last saw.
    """

    def __init__(self, pool: _Pool):
        super().__init__()
        self._pool = (pool,)  # bound, not registered: the pool's weights stay in the encoder
        self.upsampler = pool.make_upsampler()

    @property
    def pool(self) -> _Pool:
        return self._pool[0]

    def forward(self, v: Tensor, where: HardWhere | SoftWhere | None = None, output_size=None) -> Tensor:
        if where is not None:
            return where.unpool(v)
        size = output_size if output_size is not None else self.pool.input_size
        if size is None:
            raise ValueError("unpooling without a where needs output_size (the pool has not run yet)")
        return self.upsampler(v, tuple(size)[-2:])

    def extra_repr(self) -> str:
        return f"bound to {self.pool.extra_repr()}"
