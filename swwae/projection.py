"""Deconvnet projections (Zeiler & Fergus, 2014): what input pattern drives a unit.

Pure torch: no Lightning, no Hydra. Take the strongest activations of stage k's ``what``,
keep one of them and zero everything else, and send it down to pixel space the way the
forward pass came up, stage by stage:

    unpool with the switches recorded on the forward pass  ->  rectify (ReLU)
    ->  filter with the *transposed encoder* conv (conv_transpose2d, the encoder's weights)

Biases and batch norm are left out, as in the deconvnet. With the hard where the unpooling
puts every value back on the pixel that won its window, so a projection lives only on the
pixels the switches allow (grown by the conv kernels); with the soft where it is splatted
at the soft-argmax positions. Where-free pools (``upsample``, ``avg``, ``strided``,
``wavelet``) still project, through their own where-free way back up (``Unpool`` with
``where=None``), but nothing localises the result: that is the picture of what the where
buys.

    picks = strongest(net, images, stage=2, top=16)
    proj = project(net, images[picks.image], picks, stage=2)   # (16, C, H, W)
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from swwae.errors import ConfigError
from swwae.model import SWWAE, convs, eval_mode

# helpers


def check_stage(net: SWWAE, stage: int) -> None:
    n = len(net.encoders)
    if not isinstance(stage, int) or isinstance(stage, bool) or not 1 <= stage <= n:
        raise ConfigError(f"stage={stage} is out of range: this model has {n} stage{'s' * (n > 1)} (1..{n})")


@torch.no_grad()
def encode_to(net: SWWAE, x: Tensor, stage: int):
    """The forward pass up to stage ``stage``: (whats, wheres, pre-pool sizes), one per stage."""
    check_stage(net, stage)
    return net.encode(x, stages=stage)


@torch.no_grad()
def deconvolve(net: SWWAE, v: Tensor, wheres: list, sizes: list, stage: int) -> Tensor:
    """Send ``v`` (shaped like stage ``stage``'s what) down to pixel space: per stage,
    unpool (recorded switches), then for each of the stage's convs, last first: ReLU ->
    transposed encoder conv; no bias anywhere, so a zero ``v`` projects to zero."""
    check_stage(net, stage)
    for i in reversed(range(stage)):
        unpool = net.unpools[i]
        # less what zeros unpool to: the bias of a learned way up (strided's transposed conv), which
        # would paint every projection with the same pattern; 0 for switches and fixed upsamplers
        v = unpool(v, wheres[i], output_size=sizes[i]) - unpool(torch.zeros_like(v), wheres[i], output_size=sizes[i])
        for conv in reversed(convs(net.encoders[i])):
            v = F.conv_transpose2d(
                F.relu(v),
                conv.weight,
                stride=conv.stride,
                padding=conv.padding,
                dilation=conv.dilation,
                groups=conv.groups,
            )
    return v


# classes


@dataclass
class Picks:
    """The chosen activations of one stage: image index (into the searched images), channel,
    position in the what, and the activation value; strongest first."""

    image: Tensor
    channel: Tensor
    row: Tensor
    col: Tensor
    value: Tensor

    def __len__(self) -> int:
        return len(self.value)


@torch.no_grad()
def strongest(
    net: SWWAE, x: Tensor, stage: int, top: int = 16, distinct_channels: bool = True, batch_size: int = 256
) -> Picks:
    """The ``top`` strongest (image, channel) activations of stage ``stage``'s what over the
    images ``x``: each pair at its maximal position. With ``distinct_channels`` every pick
    is a different channel (each at its best image), so one busy channel does not fill
    the grid."""
    peaks, places = [], []
    with eval_mode(net):
        for chunk in x.split(batch_size):
            what = encode_to(net, chunk, stage)[0][-1]  # (n, C, h, w)
            peak, place = what.flatten(2).max(2)  # (n, C)
            peaks.append(peak)
            places.append(place)
    peak, place = torch.cat(peaks), torch.cat(places)  # (N, C)
    width, device = what.shape[-1], peak.device  # the picks on the network's device: indexed by each other
    if distinct_channels:
        value, image = peak.max(0)  # per channel: its best image
        channel = torch.arange(peak.shape[1], device=device)
    else:
        value = peak.flatten()
        image = torch.arange(peak.shape[0], device=device).repeat_interleave(peak.shape[1])
        channel = torch.arange(peak.shape[1], device=device).repeat(peak.shape[0])
    order = value.argsort(descending=True, stable=True)[:top]
    image, channel, value = image[order], channel[order], value[order]
    flat = place[image, channel]
    return Picks(image, channel, flat // width, flat % width, value)


@torch.no_grad()
def project(net: SWWAE, images: Tensor, picks: Picks, stage: int) -> Tensor:
    """One projection per pick: ``images[j]`` is the image of pick j (so pass
    ``x[picks.image]``); returns (len(picks), C, H, W), in input-pixel space."""
    with eval_mode(net):
        whats, wheres, sizes = encode_to(net, images, stage)
        v = torch.zeros_like(whats[-1])
        j = torch.arange(len(picks), device=v.device)
        v[j, picks.channel, picks.row, picks.col] = whats[-1][j, picks.channel, picks.row, picks.col]
        return deconvolve(net, v, wheres, sizes, stage)
