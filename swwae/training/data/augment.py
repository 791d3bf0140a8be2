"""Augmentation of whole batches on their own device: random crop with padding, flips.

torchvision's ``transforms.v2`` draws one set of parameters per call, so a batch tensor
would be cropped and flipped as one image; here every image gets its own shift and flip,
with a single gather for the whole batch (no per-sample loop, no PIL).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def random_crop_flip(x: Tensor, padding: int, flip: bool, generator: torch.Generator) -> Tensor:
    """Each image of ``x`` (N, C, H, W), zero-padded by ``padding`` on every side, cropped
    back to H x W at a random offset, and mirrored left-right with probability 1/2 if
    ``flip``; the draws come from ``generator`` (on ``x``'s device)."""
    n, c, height, width = x.shape
    padded = F.pad(x, (padding, padding, padding, padding))
    offsets = torch.randint(0, 2 * padding + 1, (2, n, 1), generator=generator, device=x.device)
    rows = torch.arange(height, device=x.device) + offsets[0]  # (N, H)
    cols = torch.arange(width, device=x.device) + offsets[1]  # (N, W)
    if flip:
        mirrored = torch.rand(n, 1, generator=generator, device=x.device) < 0.5
        cols = torch.where(mirrored, cols.flip(1), cols)
    index = (rows[:, :, None] * (width + 2 * padding) + cols[:, None, :]).view(n, 1, height * width)
    return padded.flatten(2).gather(2, index.expand(n, c, -1)).view(n, c, height, width)
