"""Pictures of what the SWWAE does, as image grids (torchvision's make_grid).

Shared by the TensorBoard callback and ``scripts/evaluate.py``, so both show the same.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torchvision.utils import make_grid

from swwae.model import SWWAE, eval_mode


def _channel_mean(t: Tensor) -> Tensor:
    return t.float().mean(1, keepdim=True)


def _scaled_by(t: Tensor, reference: Tensor) -> Tensor:
    """Divide each image by the max of its reference image, so pairs share one scale."""
    peak = reference.flatten(1).amax(1).clamp_min(1e-8).view(-1, 1, 1, 1)
    return (t / peak).clamp(0, 1)


@torch.no_grad()
def reconstruction_panels(net: SWWAE, x: Tensor) -> dict[str, Tensor]:
    """name -> (3, H, W) grid image in [0, 1]:

    * ``reconstructions``: rows input | reconstruction | reconstruction with the where dropped
    * ``where/stage_<i>``: the where mask of stage i (mean over channels, scaled per image)
    * ``middle/stage_<i>``: rows encoder input of stage i | its decoder reconstruction
    """
    with eval_mode(net):
        out = net(x)
        dropped = net.reconstruct_without_where(x)
    n = len(x)
    panels = {"reconstructions": make_grid(torch.cat([x, out.recon, dropped]).clamp(0, 1), nrow=n, pad_value=1)}
    for i, where in enumerate(out.wheres, start=1):
        if where is not None:
            mask = _channel_mean(where.mask)
            panels[f"where/stage_{i}"] = make_grid(_scaled_by(mask, mask), nrow=n, pad_value=1)
    for i, (decoded, target) in enumerate(out.middle_pairs, start=1):
        target, decoded = _channel_mean(target), _channel_mean(decoded)
        pair = torch.cat([_scaled_by(target, target), _scaled_by(decoded, target)])
        panels[f"middle/stage_{i}"] = make_grid(pair, nrow=n, pad_value=1)
    return panels
