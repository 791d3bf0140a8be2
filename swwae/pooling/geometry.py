"""Pooling geometry: kernel, stride and padding of a 2-d pooling, and the pooled size."""

from __future__ import annotations

from collections.abc import Sequence
from numbers import Integral

from torch import Tensor


def pair(value: int | tuple[int, int], name: str = "size") -> tuple[int, int]:
    """``2 -> (2, 2)``; a pair stays a pair (rows, columns). Whole numbers of any integer type
    only (numpy's, a config's): ``int()`` would cut a 2.5 to 2 without a word. ``name``: the
    setting, for the ValueError line."""
    both = (value, value) if isinstance(value, Integral) else value
    if not (isinstance(both, Sequence) and len(both) == 2 and all(isinstance(v, Integral) for v in both)):
        raise ValueError(f"{name} must be an int or a pair of ints, got {value!r}")
    return tuple(int(v) for v in both)


def pooled_size(size: int, kernel: int, stride: int, padding: int, ceil: bool = False) -> int:
    """Output length of a pooling window sliding over ``size`` cells: floor mode, or with ``ceil``
    torch's ceil_mode (one more window where the last would cover past the padding, if it starts
    inside the input or its left padding)."""
    length = (size + 2 * padding - kernel + (stride - 1 if ceil else 0)) // stride + 1
    return length - 1 if ceil and (length - 1) * stride >= size + padding else length


class Geometry:
    """Kernel, stride and padding of a 2-d pooling, checked once."""

    def __init__(self, kernel_size, stride=None, padding=0):
        self.kernel = pair(kernel_size, "kernel_size")
        self.stride = pair(self.kernel if stride is None else stride, "stride")
        self.padding = pair(padding, "padding")
        if min(self.kernel) < 1 or min(self.stride) < 1:
            raise ValueError(f"kernel_size and stride must be >= 1, got {self}")
        if any(p < 0 or p > k // 2 for p, k in zip(self.padding, self.kernel)):
            raise ValueError(f"padding must be between 0 and kernel_size // 2, got {self}")

    def output_size(self, size: tuple[int, int], ceil: bool = False) -> tuple[int, int]:
        return tuple(pooled_size(n, k, s, p, ceil) for n, k, s, p in zip(size, self.kernel, self.stride, self.padding))

    def tiles(self, size: tuple[int, int]) -> bool:
        """Whether the windows tile an image of ``size`` (H, W) exactly: each pixel one window's cell."""
        return (
            self.stride == self.kernel and not any(self.padding) and all(n % k == 0 for n, k in zip(size, self.kernel))
        )

    def check(self, x: Tensor) -> None:
        if x.dim() != 4:
            raise ValueError(f"pooling expects a (N, C, H, W) tensor, got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            # the where is a gradient (hard) or a softmax (soft): neither exists for integers
            raise ValueError(f"pooling expects floating-point values, got {x.dtype}; convert with x.float()")
        height, width = x.shape[-2:]
        if any(n + 2 * p < k for n, k, p in zip((height, width), self.kernel, self.padding)):
            raise ValueError(
                f"pooling kernel {self.kernel} (padding {self.padding}) is larger than the "
                f"{height}x{width} feature map it pools; use a smaller kernel or fewer stages"
            )

    def __repr__(self) -> str:
        return f"kernel_size={self.kernel}, stride={self.stride}, padding={self.padding}"
