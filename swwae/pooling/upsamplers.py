"""The where-free ways back up: nearest upsampling through a pool's own windows, a learned
transposed conv, an inverse wavelet transform. ``Unpool`` falls back on them when there is no
where (the baselines, or a where deliberately dropped)."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.precision import in_float32


def window_owner_upsample(v: Tensor, size: tuple[int, int], geometry: Geometry) -> Tensor:
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

    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
        return window_owner_upsample(v, size, self.geometry)


class TransposedConvUnpool(nn.Module):
    def __init__(self, channels: int, geometry: Geometry):
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, channels, geometry.kernel, geometry.stride, geometry.padding)

    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
        return self.up(v, output_size=list(size))


class WaveletUnpool(nn.Module):
    """Inverse wavelet transform of (v, zero details), level by level, cropped to each size."""

    def __init__(self, wavelet: str, levels: int):
        super().__init__()
        self.wavelet, self.levels = wavelet, levels

    @in_float32  # ptwt refuses half precision
    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
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
