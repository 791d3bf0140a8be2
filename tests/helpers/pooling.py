"""The pooling geometry strategy and the soft pooling reference, shared by the pooling tests."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from hypothesis import strategies as st


def pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def unpack(geometry: dict):
    """(kernel, stride, padding) pairs of ``WhatWherePool(**geometry)``, with its defaults
    (kernel 2, stride = kernel, padding 0)."""
    kernel = pair(geometry.get("kernel_size", 2))
    stride = geometry.get("stride")
    return kernel, kernel if stride is None else pair(stride), pair(geometry.get("padding", 0))


@st.composite
def geometries(draw, max_size: int = 11, max_batch: int = 3):
    """A random pooling geometry and the shape of an input it fits, and a seed for the
    input's values: kernels 1-4, strides 1-4, padding up to kernel // 2, odd, even and
    rectangular sizes up to ``max_size``, batch and channels up to ``max_batch``."""
    kh, kw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    sh, sw = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    ph, pw = draw(st.integers(0, kh // 2)), draw(st.integers(0, kw // 2))
    height = draw(st.integers(max(1, kh - 2 * ph), max_size))
    width = draw(st.integers(max(1, kw - 2 * pw), max_size))
    n, c = draw(st.integers(1, max_batch)), draw(st.integers(1, max_batch))
    seed = draw(st.integers(0, 2**16))
    return dict(kernel_size=(kh, kw), stride=(sh, sw), padding=(ph, pw)), (n, c, height, width), seed


def windows(x: torch.Tensor, geometry: dict, fill: float) -> torch.Tensor:
    """(N, C, Ho, Wo, kh * kw): every pooling window of x, padded cells set to ``fill``."""
    (kh, kw), (sh, sw), (ph, pw) = unpack(geometry)
    padded = F.pad(x, (pw, pw, ph, ph), value=fill)
    return padded.unfold(2, kh, sh).unfold(3, kw, sw).flatten(-2)


def soft_reference(x: torch.Tensor, geometry: dict, beta: float):
    """The soft contract (docs/architecture.md 4.1) written plainly with autograd, in float64: the soft
    max ``what`` and the soft argmax (``row``, ``col``, in input pixels) of every window,
    each (N, C, Ho, Wo), straight from the definition. Padded and -inf cells weigh 0.
    Differentiable in x; swwae.pooling's fast path must agree with it."""
    z = windows(x.double(), geometry, -math.inf)
    (kh, kw), (sh, sw), (ph, pw) = unpack(geometry)
    a = torch.softmax(beta * z, dim=-1)
    rows = torch.arange(kh, dtype=torch.float64).repeat_interleave(kw)
    cols = torch.arange(kw, dtype=torch.float64).repeat(kh)
    ho, wo = z.shape[2:4]
    what = (a * torch.where(a > 0, z, 0.0)).sum(-1)
    row = (a * rows).sum(-1) + (torch.arange(ho, dtype=torch.float64) * sh - ph)[:, None]
    col = (a * cols).sum(-1) + (torch.arange(wo, dtype=torch.float64) * sw - pw)[None, :]
    return what, row, col
