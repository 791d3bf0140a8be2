"""What-where pooling and the unpooling bound to it. Pure torch: no Lightning, no Hydra.

A pool returns ``what`` (the pooled map, fed to the next stage) and ``where`` (which input
positions won). ``Unpool(pool)`` sends values back through the same windows:

    pool = WhatWherePool(kernel_size=2, mode="hard")
    what, where = pool(x)          # where.mask is shaped like x
    x_hat = Unpool(pool)(what, where)

* ``hard``: ``what`` is ``F.max_pool2d``; the mask is d sum(what) / dx (the gradient-of-sum
  trick), and unpooling is the exact adjoint of max pooling at the recorded input (the
  deconvnet's "switches"): values of overlapping windows add up, unlike ``nn.MaxUnpool2d``,
  which overwrites, and which raises under ``torch.use_deterministic_algorithms(True)``.
* ``soft``: the SWWAE paper's soft max / soft argmax with temperature ``beta``; unpooling
  splats each value bilinearly at its continuous position.
* where-free baselines, ``where is None``: ``upsample`` (max pool, nearest up), ``avg``,
  ``strided`` (conv down, transposed conv up) and ``wavelet`` (low-pass band down, inverse
  transform with zero details up).
"""

from __future__ import annotations

import math
from functools import cached_property

import torch
import torch.nn.functional as F
from torch import Tensor, nn

WHERE_MODES = ("hard", "soft")
WHERELESS_MODES = ("upsample", "avg", "strided", "wavelet")
MODES = WHERE_MODES + WHERELESS_MODES

# helpers


def _pair(value) -> tuple[int, int]:
    pair = (value, value) if isinstance(value, int) else tuple(int(v) for v in value)
    if len(pair) != 2:
        raise ValueError(f"expected an int or a pair of ints, got {value!r}")
    return pair


def pooled_size(size: int, kernel: int, stride: int, padding: int) -> int:
    """Output length of a pooling window sliding over ``size`` cells (floor mode)."""
    return (size + 2 * padding - kernel) // stride + 1


class Geometry:
    """Kernel, stride and padding of a 2-d pooling, checked once."""

    def __init__(self, kernel_size, stride=None, padding=0):
        self.kernel = _pair(kernel_size)
        self.stride = _pair(self.kernel if stride is None else stride)
        self.padding = _pair(padding)
        if min(self.kernel) < 1 or min(self.stride) < 1:
            raise ValueError(f"kernel_size and stride must be >= 1, got {self}")
        if any(p < 0 or p > k // 2 for p, k in zip(self.padding, self.kernel)):
            raise ValueError(f"padding must be between 0 and kernel_size // 2, got {self}")

    def output_size(self, size: tuple[int, int]) -> tuple[int, int]:
        return tuple(pooled_size(n, k, s, p) for n, k, s, p in zip(size, self.kernel, self.stride, self.padding))

    def check(self, x: Tensor) -> None:
        if x.dim() != 4:
            raise ValueError(f"pooling expects a (N, C, H, W) tensor, got shape {tuple(x.shape)}")
        height, width = x.shape[-2:]
        if any(n + 2 * p < k for n, k, p in zip((height, width), self.kernel, self.padding)):
            raise ValueError(
                f"pooling kernel {self.kernel} (padding {self.padding}) is larger than the "
                f"{height}x{width} feature map it pools; use a smaller kernel or fewer stages"
            )

    def __repr__(self) -> str:
        return f"kernel_size={self.kernel}, stride={self.stride}, padding={self.padding}"


# wheres


class HardWhere:
    """Switches of a max pooling: ``indices`` (flat H*W index of each window's winner).

    ``mask`` is computed lazily, on first read, with the gradient-of-sum trick, so training
    pays nothing for it unless someone looks.
    """

    def __init__(self, indices: Tensor, input: Tensor, geometry: Geometry):
        self.indices, self.input, self.geometry = indices, input.detach(), geometry

    @property
    def shape(self) -> torch.Size:
        return self.input.shape

    def unpool(self, v: Tensor) -> Tensor:
        """Adjoint of max pooling at the recorded input: v[w] goes to the winner of w."""
        g = self.geometry
        return torch.ops.aten.max_pool2d_with_indices_backward(
            v, self.input, g.kernel, g.stride, g.padding, (1, 1), False, self.indices
        )

    @cached_property
    def mask(self) -> Tensor:
        """d sum(max_pool2d(x)) / dx: a 0/1 bed of nails; a pixel winning K windows gets K."""
        g = self.geometry
        with torch.inference_mode(False), torch.enable_grad():
            x = self.input.clone().requires_grad_(True)  # clone: inference tensors refuse grad
            what = F.max_pool2d(x, g.kernel, g.stride, g.padding)
            (mask,) = torch.autograd.grad(what.sum(), x)
        return mask


class SoftWhere:
    """Continuous positions (input-pixel coordinates) of the soft argmax of each window."""

    def __init__(self, row: Tensor, col: Tensor, shape: torch.Size):
        self.row, self.col, self.shape = row, col, shape

    def unpool(self, v: Tensor) -> Tensor:
        return splat(v, self.row, self.col, self.shape)

    @cached_property
    def mask(self) -> Tensor:
        """Soft bed of nails: ``unpool(ones)``, a constant."""
        with torch.no_grad():
            return splat(torch.ones_like(self.row), self.row.detach(), self.col.detach(), self.shape)


def splat(v: Tensor, row: Tensor, col: Tensor, shape) -> Tensor:
    """Add each value of ``v`` at (row, col) by bilinear weights onto the 4 nearest pixels.

    Differentiable in ``v`` and in the positions; overlapping deposits add up.
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


# pools


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
        g = self.geometry
        (kh, kw), (sh, sw), (ph, pw) = g.kernel, g.stride, g.padding
        padded = F.pad(x, (pw, pw, ph, ph)) if ph or pw else x
        windows = padded.unfold(2, kh, sh).unfold(3, kw, sw)  # (N, C, Ho, Wo, kh, kw), a view
        # Stabilise with each window's max: softmax is shift-invariant, so detaching it
        # changes no gradient, and every exponent is <= 0 (no overflow at any beta).
        top = F.max_pool2d(x.detach(), g.kernel, g.stride, g.padding)
        logits = self.beta * (windows - top[..., None, None])
        if ph or pw:  # padded cells never win
            valid = F.pad(x.new_ones(1, 1, *x.shape[-2:]), (pw, pw, ph, ph)).unfold(2, kh, sh).unfold(3, kw, sw)
            logits = logits.masked_fill(valid == 0, -math.inf)
        weights = torch.softmax(logits.flatten(-2), dim=-1).view_as(logits)
        what = (weights * windows).sum((-2, -1))
        ho, wo = what.shape[-2:]
        row_base = (torch.arange(ho, device=x.device, dtype=x.dtype) * sh - ph)[:, None]
        col_base = torch.arange(wo, device=x.device, dtype=x.dtype) * sw - pw
        row = row_base + (weights.sum(-1) * torch.arange(kh, device=x.device, dtype=x.dtype)).sum(-1)
        col = col_base + (weights.sum(-2) * torch.arange(kw, device=x.device, dtype=x.dtype)).sum(-1)
        return what, SoftWhere(row, col, x.shape)


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


# unpooling


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
