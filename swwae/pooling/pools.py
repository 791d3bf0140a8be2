"""The pools: ``WhatWherePool`` (hard or soft where) and the where-free baselines, one
class a family, and ``make_pool``, which builds the class that the mode table
(``swwae.pooling.modes``) names with the settings its constructor takes. ``POOLS`` (mode name ->
class), ``MODES``, ``WHERE_MODES`` and ``WHERELESS_MODES`` are views of that table: a mode
registered there shows in them."""

from __future__ import annotations

import inspect
import math
from collections.abc import Iterator, Mapping

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from swwae.pooling.base import Pool
from swwae.pooling.functional import pool_with_where, where_of
from swwae.pooling.geometry import pair
from swwae.pooling.layout import memory_format_of
from swwae.pooling.modes import POOL_MODES, where_modes
from swwae.pooling.precision import in_float32
from swwae.pooling.upsamplers import TransposedConvUnpool, WaveletUnpool
from swwae.pooling.wheres import HardWhere, SoftWhere


class WhatWherePool(Pool):
    """Max pooling that also says where, in a mode that keeps one: ``hard`` (switches) or
    ``soft`` (soft argmax, temperature ``beta``; None: the default the mode declares), as the
    mode's entry in the table says. It runs ``swwae.pooling.functional`` with its own windows."""

    def __init__(
        self,
        kernel_size: int | tuple[int, int] = 2,
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
        mode: str = "hard",
        beta: float | None = None,
    ):
        super().__init__(kernel_size, stride, padding)
        self.where_kind = where_of(mode)  # "hard" or "soft"
        self.mode, self.beta = mode, POOL_MODES[mode].checked({} if beta is None else {"beta": beta}).get("beta")

    def pool(self, x: Tensor) -> tuple[Tensor, HardWhere | SoftWhere]:
        return pool_with_where(x, self.geometry, self.where_kind, self.beta)

    def extra_repr(self) -> str:
        settings = "".join(f", {name}={getattr(self, name)!r}" for name in POOL_MODES[self.mode].settings)
        return f"mode={self.mode!r}{settings}, {self.geometry}"


class MaxUpsamplePool(Pool):
    """Baseline ``upsample``: max pooling whose where is thrown away; nearest upsampling back."""

    def pool(self, x: Tensor):
        g = self.geometry
        return F.max_pool2d(x, g.kernel, g.stride, g.padding), None


class AvgPool(Pool):
    """Baseline ``avg``: average pooling (padded cells not counted); nearest upsampling back."""

    def pool(self, x: Tensor):
        g = self.geometry
        return F.avg_pool2d(x, g.kernel, g.stride, g.padding, count_include_pad=False), None


class StridedConvPool(Pool):
    """Baseline ``strided`` (the all-convolutional net): a learned stride-k conv down,
    a learned transposed conv up."""

    def __init__(
        self,
        channels: int,
        kernel_size: int | tuple[int, int] = 2,
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
    ):
        super().__init__(kernel_size, stride, padding)
        self.channels = channels
        g = self.geometry
        self.down = nn.Conv2d(channels, channels, g.kernel, g.stride, g.padding)

    def pool(self, x: Tensor):
        return self.down(x), None

    def make_upsampler(self) -> nn.Module:
        return TransposedConvUnpool(self.channels, self.geometry)


def _reflect(x: Tensor, before: int, after: int, dim: int) -> Tensor:
    """``F.pad(mode="reflect")`` along ``dim`` from slices and flips: its backward adds
    gradients in a fixed order (F.pad's reflection backward on CUDA uses atomics, and
    ``torch.use_deterministic_algorithms`` refuses it)."""
    n = x.shape[dim]
    parts = [x.narrow(dim, 1, before).flip(dim)] if before else []
    parts += [x] + ([x.narrow(dim, n - 1 - after, after).flip(dim)] if after else [])
    return torch.cat(parts, dim) if len(parts) > 1 else x


def wavelet_low_band(x: Tensor, low_pass: Tensor) -> Tensor:
    """The low-pass band of one level of ``ptwt.wavedec2(x, wavelet, mode="reflect")``, (N, C,
    H', W'), from the wavelet's flipped decomposition low-pass filter: the same padding
    (pywt's output sizes), the same 2-d filter at stride 2 (bit for bit in float32, within an
    ulp in float64), without ptwt's three detail bands."""
    low_pass = low_pass.to(x.dtype)
    length = len(low_pass)
    for dim in (2, 3):  # pywt's padding: 2 L - 3 in all, half on each side, + 1 after for odd sizes
        half = (2 * length - 3) // 2
        x = _reflect(x, half, half + x.shape[dim] % 2, dim)
    n, c, height, width = x.shape
    low = F.conv2d(x.reshape(n * c, 1, height, width), torch.outer(low_pass, low_pass)[None, None], stride=2)
    return low.view(n, c, *low.shape[-2:])


class WaveletPool(Pool):
    """Baseline ``wavelet``: the low-pass band of a 2-d discrete wavelet transform (as ptwt
    computes it, ``wavelet_low_band``).

    ``kernel_size`` must be a power of two 2**L: L levels of the transform, each halving the
    size. The band is divided by 2**L so that a constant image keeps its value (a mean, like
    average pooling; for Haar on even sizes it *is* average pooling).
    """

    def __init__(
        self,
        kernel_size: int | tuple[int, int] = 2,
        wavelet: str = "haar",
        *,
        stride: int | tuple[int, int] | None = None,
        padding: int | tuple[int, int] = 0,
    ):
        if stride not in (None, kernel_size) or padding:
            raise ValueError("wavelet pooling has no stride or padding of its own: leave them unset")
        kernel = pair(kernel_size, "kernel_size")
        levels = math.log2(kernel[0])
        if kernel[0] != kernel[1] or kernel[0] < 2 or levels != int(levels):
            raise ValueError(f"wavelet pooling needs a square power-of-two kernel_size, got {kernel_size}")
        super().__init__(kernel_size)
        self.wavelet, self.levels = wavelet, int(levels)
        # flipped, as conv2d correlates; float64, cast to the input's dtype as ptwt does. A buffer,
        # moved with the model: no copy to the GPU (a host sync) at every call; not persistent:
        # no new key in state dicts
        import pywt  # here: only a wavelet pool needs PyWavelets

        low_pass = torch.tensor(pywt.Wavelet(wavelet).dec_lo[::-1], dtype=torch.float64)
        self.register_buffer("low_pass", low_pass, persistent=False)

    @in_float32  # half precision would round the filter and the sums
    def pool(self, x: Tensor):
        low = x
        for _ in range(self.levels):
            low = wavelet_low_band(low, self.low_pass) / 2
        return low.contiguous(memory_format=memory_format_of(x)), None  # in x's layout (swwae.pooling.layout)

    def make_upsampler(self) -> nn.Module:
        return WaveletUnpool(self.wavelet, self.levels)


class PoolClasses(Mapping):
    """Mode name -> the class that pools that way: a live view of the mode table
    (``swwae.pooling.modes.POOL_MODES``), each class imported when it is looked up."""

    def __getitem__(self, mode: str) -> type[Pool]:
        return POOL_MODES[mode].load()

    def __iter__(self) -> Iterator[str]:
        return iter(POOL_MODES.names())

    def __len__(self) -> int:
        return len(POOL_MODES)

    def __repr__(self) -> str:
        return f"PoolClasses({', '.join(POOL_MODES.names())})"


POOLS: Mapping[str, type[Pool]] = PoolClasses()
PLACES = ("mode", "channels", "kernel_size", "stride", "padding")  # what make_pool passes besides a mode's settings


def __getattr__(name: str):
    """``MODES``, ``WHERE_MODES``, ``WHERELESS_MODES``: the table's names now (PEP 562)."""
    if name == "MODES":
        return POOL_MODES.names()
    if name == "WHERE_MODES":
        return where_modes()
    if name == "WHERELESS_MODES":
        return tuple(mode for mode in POOL_MODES.names() if mode not in where_modes())
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def check_pool_class(mode: str, cls: object) -> type[Pool]:
    """``cls``, if it can pool: a ``Pool`` subclass with its own ``pool``. A mode's entry may
    name any class (a lab's own), and one without ``pool`` would build and then fail on the
    model's first batch with Pool's bare NotImplementedError; TypeError (one line) naming it."""
    if not (isinstance(cls, type) and issubclass(cls, Pool)):
        raise TypeError(f"{mode} pooling: {getattr(cls, '__name__', cls)!r} is no Pool subclass (swwae.pooling.Pool)")
    if cls.pool is Pool.pool:
        raise TypeError(
            f"{mode} pooling: {cls.__name__} defines no pool(x), which returns (what, where): "
            "a Pool subclass implements it"
        )
    return cls


def make_pool(
    mode: str,
    channels: int | None = None,
    kernel_size: int | tuple[int, int] = 2,
    stride: int | tuple[int, int] | None = None,
    padding: int | tuple[int, int] = 0,
    **settings,
) -> Pool:
    """One pool of ``mode``, the class its entry in the mode table names, built with the mode's
    settings (``entry.values(settings)``: those given, the declared defaults for the rest, each
    checked against its declaration) and those of ``mode``, ``channels``, ``kernel_size``,
    ``stride`` and ``padding`` that its constructor names. A setting of another mode is not this
    one's and is left out (a model passes every pooling setting to every mode).

    ValueError (one line) for an unknown mode, a bad setting, a number of channels the class
    needs and is not given, or a stride or padding that a class without them is given; TypeError
    for a setting that no mode of the table declares, or a class that cannot pool."""
    entry = POOL_MODES.entry(mode, "mode")
    declared = {name for other in POOL_MODES.values() for name in other.settings}
    if unknown := sorted(set(settings) - declared):
        raise TypeError(
            f"make_pool got {unknown[0]!r}, a setting of no pooling mode; the modes' settings: "
            + (", ".join(sorted(declared)) or "none")
        )
    cls = check_pool_class(mode, entry.load())
    parameters = inspect.signature(cls).parameters
    takes_any = any(p.kind == p.VAR_KEYWORD for p in parameters.values())
    chosen = entry.checked(settings)
    if not takes_any and (missing := [name for name in chosen if name not in parameters]):
        raise TypeError(f"{mode} pooling: {cls.__name__} takes no {missing[0]!r}, which the mode's entry declares")
    given = dict(mode=mode, channels=channels, kernel_size=kernel_size, stride=stride, padding=padding)
    for name in PLACES:
        value, parameter = given[name], parameters.get(name)
        if parameter is None and not takes_any:
            if name in ("stride", "padding") and value not in (None, 0):
                raise ValueError(f"{mode} pooling has no {name} of its own: leave it unset")
        elif value is not None:
            chosen[name] = value
        elif parameter is not None and parameter.default is parameter.empty:
            raise ValueError(f"{mode} pooling needs {'the number of channels' if name == 'channels' else name}")
    return cls(**chosen)
