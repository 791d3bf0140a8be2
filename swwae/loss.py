"""The SWWAE loss, pure torch: what the training job, the hand-written benchmark loop and any
user's own loop optimise.

    loss = lambda_nll * NLL(labelled samples) + lambda_rec * MSE(x_hat, x)
           + lambda_m * sum_i MSE(decoded_i, encoder input_i)

Unlabelled samples carry the label -1: they train the reconstruction terms only. MSEs are
means per pixel, on the [0, 1] scale of the images.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch.nn.functional as F
from torch import Tensor

from swwae.model import SWWAEOutput

UNLABELLED = -1  # the label of a sample whose label the model must not see


def swwae_loss(out: SWWAEOutput, x: Tensor, y: Tensor, *, lambda_rec: float, lambda_m: float, lambda_nll: float,
               middle_targets: Sequence[Tensor] | None = None) -> dict[str, Tensor]:
    """Every loss term, unweighted (``recon_mse``, ``middle_mse_<i>``, ``nll`` when the network
    has a head), plus the weighted total under ``loss``. The middle reconstructions aim at
    ``middle_targets`` if given (e.g. the clean image's features), else at the encoder's own
    whats."""
    terms = {"recon_mse": F.mse_loss(out.recon, x)}
    pairs = out.middle_pairs if middle_targets is None else zip(out.decoded[1:], middle_targets)
    middles = [F.mse_loss(decoded, target) for decoded, target in pairs]
    terms |= {f"middle_mse_{i}": term for i, term in enumerate(middles, start=1)}
    loss = lambda_rec * terms["recon_mse"] + lambda_m * sum(middles)
    if out.logits is not None:
        labelled = y >= 0  # UNLABELLED (-1) samples train the reconstruction terms only
        # a batch without labels still yields a (zero) NLL connected to the head
        nll = F.cross_entropy(out.logits[labelled], y[labelled]) if labelled.any() else out.logits.sum() * 0
        terms["nll"] = nll
        loss = loss + lambda_nll * nll
    terms["loss"] = loss
    return terms
