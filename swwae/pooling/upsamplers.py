"""The where-free ways back up: nearest upsampling through a pool's own windows, a learned
transposed conv, an inverse wavelet transform. ``Unpool`` falls back on them when there is no
where (the baselines, or a where deliberately dropped)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.wavelets import FilterBank, coefficient_length


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
    """Inverse wavelet transform of (v, zero details), level by level, cropped to each size.

    With the details zero, one level of ptwt's ``waverec2`` is a transposed convolution of
    the low band alone with the outer product of the low-pass reconstruction filter, then
    its border crop: written out here, as one 1-channel convolution instead of ptwt's four
    (three of them on zeros), and in code torch.compile traces."""

    def __init__(self, filters: FilterBank, levels: int):
        super().__init__()
        self.filters, self.levels = filters, levels

    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
        length = self.filters.rec_len
        sizes = [tuple(size)]  # the size before each level of the forward transform
        for _ in range(self.levels - 1):
            sizes.append(tuple(coefficient_length(n, self.filters.dec_len) for n in sizes[-1]))
        rec_lo = torch.tensor(self.filters.rec_lo, dtype=v.dtype, device=v.device)
        kernel = (rec_lo[:, None] * rec_lo[None, :])[None, None]  # (1, 1, L, L)
        crop = (2 * length - 3) // 2  # what waverec2 cuts off each border
        low = v.flatten(0, 1).unsqueeze(1)  # (N * C, 1, h, w)
        for height, width in reversed(sizes):
            low = F.conv_transpose2d(low * 2, kernel, stride=2)[..., crop:crop + height, crop:crop + width]
        return low.squeeze(1).unflatten(0, v.shape[:2])
