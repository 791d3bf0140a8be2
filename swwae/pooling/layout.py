"""Pooling in channels-last memory: the modes whose own ops work on whole (H, W) planes of each
channel (the soft where's window layout, the wavelet's per-channel filters) compute in (N, C, H, W)
memory and give their results and gradients back in their input's layout, as native max pooling
does.

Why: a network trained with ``channels_last=true`` hands them (N, H, W, C) maps, and the
convolutions and element-wise ops around a pool that answered in another layout take their slow
paths (on the CPU a soft step was 1.13-1.20x slower in channels_last than in the plain layout,
the wavelet's 1.10x). A layout is how the values sit in memory, never what they are.
"""

from __future__ import annotations

import torch
from torch import Tensor


def memory_format_of(t: Tensor) -> torch.memory_format:
    """``channels_last`` for a 4-d ``t`` laid out so and not also plainly contiguous (one
    channel, or 1x1 maps, are both), else ``contiguous_format``."""
    last = t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
    return torch.channels_last if last else torch.contiguous_format


def in_layout(t: Tensor, memory_format: torch.memory_format) -> Tensor:
    """``t`` laid out in ``memory_format``: ``t`` itself where it is already, else a copy.

    Why not ``t.contiguous(memory_format=...)``, which does the same in eager mode: returned from an
    autograd Function's forward, its no-op form makes torch 2.11's compiler hand the output another
    output's gradient (as an output made in place does, pytorch issue 180642): a soft network
    compiled there trained on wrong gradients. torch 2.14 gets both right. (A backward keeps
    ``contiguous``: its outputs were right, and torch 2.4 traces a backward strictly, without
    ``is_contiguous``.)"""
    return t if t.is_contiguous(memory_format=memory_format) else t.contiguous(memory_format=memory_format)
