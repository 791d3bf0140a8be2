"""The where-free ways back up: nearest upsampling through a pool's own windows, a learned
transposed conv, an inverse wavelet transform. ``Unpool`` falls back on them when there is no
where (the baselines, or a where deliberately dropped)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swwae.pooling.geometry import Geometry
from swwae.pooling.layout import memory_format_of
from swwae.pooling.precision import in_float32


def window_owner_upsample(v: Tensor, size: tuple[int, int], geometry: Geometry) -> Tensor:
    """Nearest upsampling through the pooling's own windows: pixel i copies window (i+p)//s.

    For stride == kernel this is ``F.interpolate(v, scale_factor=kernel)``; it also covers
    odd sizes, padding and overlapping windows, always returning exactly ``size``. The result,
    and v's gradient, in v's layout (``swwae.pooling.layout``): indexing hands back a plain
    tensor, and a channels-last network's convolutions around it then met both layouts (a CPU
    step of the upsample and avg baselines took 1.26-1.54x as long).
    """
    rows, cols = (
        ((torch.arange(n, device=v.device) + p) // s).clamp_(max=m - 1)
        for n, s, p, m in zip(size, geometry.stride, geometry.padding, v.shape[-2:])
    )
    if memory_format_of(v) == torch.channels_last:  # indexed as (N, H, W, C): channels stay innermost
        return v.permute(0, 2, 3, 1)[:, rows[:, None], cols[None, :]].permute(0, 3, 1, 2)
    return v[..., rows[:, None], cols[None, :]]


def shown(size) -> str:
    """The last two entries of a size (a shape, or an (H, W)) in words: ``12x12``."""
    return "x".join(str(n) for n in tuple(size)[-2:])


def not_pooled_from(v: Tensor, size, pooled) -> ValueError:
    """The one line for values asked up to a ``size`` that pools to ``pooled``, not to theirs."""
    return ValueError(
        f"unpooling brings {shown(v.shape)} values up to {shown(size)}, which pools to {shown(pooled)}: "
        "output_size must be the size they were pooled from"
    )


class NearestUnpool(nn.Module):
    def __init__(self, geometry: Geometry):
        super().__init__()
        self.geometry = geometry

    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
        """``v`` up to ``size``, which its windows must pool to ``v``'s size (in floor or ceil mode: a
        registered mode may pad odd sizes): nearest upsampling reaches any size (pixels past the last
        window copy it), so a wrong ``output_size`` is one ValueError line here, not an image of that
        size without a word."""
        pooled = self.geometry.output_size(size)
        if tuple(v.shape[-2:]) not in (pooled, self.geometry.output_size(size, ceil=True)):
            raise not_pooled_from(v, size, pooled)
        return window_owner_upsample(v, size, self.geometry)


class TransposedConvUnpool(nn.Module):
    def __init__(self, channels: int, geometry: Geometry):
        super().__init__()
        self.up = nn.ConvTranspose2d(channels, channels, geometry.kernel, geometry.stride, geometry.padding)

    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
        return self.up(v, output_size=list(size))


def wavelet_low_synthesis(v: Tensor, low_pass: Tensor) -> Tensor:
    """One level of ``ptwt.waverec2((v, (0, 0, 0)), wavelet)``: the inverse transform of a
    low-pass band with zero details, from the wavelet's reconstruction low-pass filter: its 2-d
    low-low filter transposed at stride 2, less ptwt's padding (2 L - 3) // 2 on every side."""
    low_pass = low_pass.to(v.dtype)
    n, c, height, width = v.shape
    image = F.conv_transpose2d(
        v.reshape(n * c, 1, height, width), torch.outer(low_pass, low_pass)[None, None], stride=2
    )
    pad = (2 * len(low_pass) - 3) // 2
    image = image[..., pad : image.shape[-2] - pad, pad : image.shape[-1] - pad]
    return image.reshape(n, c, *image.shape[-2:])


def coefficient_length(size: int, filter_len: int) -> int:
    """Length of one level's coefficients of ``size`` samples (``pywt.dwt_coeff_len`` in every
    padding mode but periodization), in plain Python: torch.compile cannot trace pywt's C code."""
    return (size + filter_len - 1) // 2


class WaveletUnpool(nn.Module):
    """Inverse wavelet transform of (v, zero details), level by level, cropped to each size
    (as ``ptwt.waverec2`` computes it, ``wavelet_low_synthesis``)."""

    def __init__(self, wavelet: str, levels: int):
        super().__init__()
        self.wavelet, self.levels = wavelet, levels
        # a buffer, moved with the model: no copy to the GPU (a host sync) at every call; not
        # persistent: no new key in state dicts; float64, cast to the input's dtype as ptwt does
        import pywt  # here: only a wavelet pool needs PyWavelets

        rec_lo = torch.tensor(pywt.Wavelet(wavelet).rec_lo, dtype=torch.float64)
        self.register_buffer("low_pass", rec_lo, persistent=False)

    @in_float32  # half precision would round the filter and the sums
    def forward(self, v: Tensor, size: tuple[int, int]) -> Tensor:
        filter_len = len(self.low_pass)
        sizes = [tuple(size)]  # the size before each level of the forward transform, and after the last
        for _ in range(self.levels):
            sizes.append(tuple(coefficient_length(n, filter_len) for n in sizes[-1]))
        pooled = sizes.pop()
        if pooled != tuple(v.shape[-2:]):  # each level crops to its size: a smaller one, without a word
            raise not_pooled_from(v, size, pooled)
        low = v
        for height, width in reversed(sizes):
            low = wavelet_low_synthesis(low * 2, self.low_pass)[..., :height, :width]
        return low.contiguous(memory_format=memory_format_of(v))  # in v's layout (swwae.pooling.layout)
