"""The SWWAE loss, pure torch: what the training job, the hand-written benchmark loop and any
user's own loop optimise.

    loss = lambda_nll * NLL(labelled samples) + lambda_rec * MSE(x_hat, x)
           + lambda_m * sum_i MSE(decoded_i, encoder input_i)

The terms and their weights are the table of ``swwae.loss_terms``. Unlabelled samples carry
the label -1: they train the reconstruction terms only. MSEs are means per pixel, on the
[0, 1] scale of the images.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from swwae.loss_terms import TERMS, loss_weights
from swwae.model import SWWAEOutput
from swwae.pooling.layout import memory_format_of

UNLABELLED = -1  # the label of a sample whose label the model must not see


def flat_pair(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """``a`` and ``b`` (same shape) as rows whose elements pair up, views where their layout
    allows. Both channels-last: flattened in that order, else in the plain one (a copy of
    whichever is not laid out so). Why: ``F.mse_loss`` hands its gradient back in the plain
    layout whatever its input's, so a channels-last network's backward would meet mixed layouts
    from every MSE term on (each op then a slower path, each convolution a copy of its gradient:
    a default CPU step took 1.08-1.12x as long); and torchmetrics' mean squared error flattens
    with ``view``, which a channels-last map of more than one channel refuses."""
    if memory_format_of(a) == memory_format_of(b) == torch.channels_last:
        return a.permute(0, 2, 3, 1).reshape(-1), b.permute(0, 2, 3, 1).reshape(-1)
    return a.reshape(-1), b.reshape(-1)


def mse(a: Tensor, b: Tensor) -> Tensor:
    """The mean squared error of two maps, its gradient in their layout (``flat_pair``)."""
    return F.mse_loss(*flat_pair(a, b))


# the terms (swwae.loss_terms names each): unweighted, logged under their names


def recon_mse(out: SWWAEOutput, x: Tensor, y: Tensor, middle_targets=None) -> dict[str, Tensor]:
    return {"recon_mse": mse(out.recon, x)}


def middle_mse(out: SWWAEOutput, x: Tensor, y: Tensor, middle_targets=None) -> dict[str, Tensor]:
    """Every stage's middle reconstruction against the encoder's what (or ``middle_targets``)."""
    pairs = out.middle_pairs if middle_targets is None else zip(out.decoded[1:], middle_targets)
    return {f"middle_mse_{i}": mse(decoded, target) for i, (decoded, target) in enumerate(pairs, start=1)}


def nll(out: SWWAEOutput, x: Tensor, y: Tensor, middle_targets=None) -> dict[str, Tensor]:
    """The mean NLL over labelled samples: UNLABELLED (-1) ones are left out of the sum, and a
    batch without labels gives a zero NLL still connected to the head. No ``if labelled.any()``
    and no boolean indexing: each would wait for the GPU (a host sync) at every step."""
    if out.logits is None:
        return {}
    labelled = (y != UNLABELLED).sum().clamp_(min=1)
    return {"nll": F.cross_entropy(out.logits, y, ignore_index=UNLABELLED, reduction="sum") / labelled}


def swwae_loss(
    out: SWWAEOutput, x: Tensor, y: Tensor, *, middle_targets: Sequence[Tensor] | None = None, **weights: float
) -> dict[str, Tensor]:
    """Every loss term of the table, unweighted (``recon_mse``, ``middle_mse_<i>``, ``nll`` when
    the network has a head, and any registered term's), plus the weighted total under ``loss``.
    ``weights``: ``lambda_rec=...`` and the other terms' weights by name (defaults for those not
    given). The middle reconstructions aim at ``middle_targets`` if given (e.g. the clean
    image's features), else at the encoder's own whats."""
    unknown = sorted(set(weights) - set(TERMS))
    if unknown:
        raise TypeError(f"swwae_loss got {unknown[0]!r}, which is no loss term's weight ({', '.join(TERMS)})")
    terms, loss, weighed = {}, 0, loss_weights(weights)
    for weight, term in TERMS.items():
        values = term.function()(out, x, y, middle_targets)
        terms |= values
        if values:
            loss = loss + weighed[weight] * sum(values.values())
    terms["loss"] = loss
    return terms
