"""Pooling under mixed precision: the soft argmax, its splat and the wavelet transform run
in float32 whatever autocast or the input's dtype says.

Why: in half precision the soft pool's weights, their sums and the positions would keep 8
bits (bfloat16) or 11 (float16): a position up to 1/128 of a pixel off, a soft max that
drifts from the max, and beta = 100 magnifies every rounding of the logits a hundredfold.
Autocast would also run the window moments, a matrix product, in bfloat16, and the wavelet
baseline's filters and sums (convolutions). So, as autocast does with its own float32 ops
(softmax, the losses), these run in float32 and, inside autocast, return float32 (the next convolution casts down
again). Outside autocast, a half-precision input ("true" half-precision training) gets its
dtype back. The hard where needs none of this: a max is exact in any dtype, and so are its
switches.
"""

from __future__ import annotations

import functools

import torch
from torch import Tensor

HALF_DTYPES = (torch.float16, torch.bfloat16)


# helpers


def _to(value, dtype: torch.dtype, only=HALF_DTYPES):
    """``value`` (a tensor, or a tuple or list of them and other things) with its floating
    tensors of a dtype in ``only`` cast to ``dtype``."""
    if isinstance(value, Tensor):
        return value.to(dtype) if value.dtype in only else value
    if isinstance(value, (tuple, list)):
        return type(value)(_to(v, dtype, only) for v in value)
    return value


def in_float32(fn):
    """Run ``fn(*args)`` in float32: its float16 and bfloat16 tensor arguments cast up, autocast
    off for their device; the float32 path, outside autocast, untouched (no cast, no context).

    Floating outputs are float32 inside autocast, and the input's half dtype outside it."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        tensors = [a for a in args if isinstance(a, Tensor)]
        device_type = tensors[0].device.type
        autocast = device_type != "meta" and torch.is_autocast_enabled(device_type)  # meta: shapes only
        # a list, not next() over a generator: torch 2.4's compiler cannot trace that
        halves = [t.dtype for t in tensors if t.dtype in HALF_DTYPES]
        half = halves[0] if halves else None
        if not autocast and half is None:
            return fn(*args, **kwargs)
        with torch.autocast(device_type, enabled=False):
            out = fn(*_to(args, torch.float32), **kwargs)
        return out if autocast or half is None else _to(out, half, only=(torch.float32,))

    return wrapper
