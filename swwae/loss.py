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

import torch.nn.functional as F
from torch import Tensor

from swwae.loss_terms import WEIGHTS, loss_weights  # noqa: F401 - the weights' table (swwae.loss_terms), here too
from swwae.model import SWWAEOutput

UNLABELLED = -1  # the label of a sample whose label the model must not see


def swwae_loss(
    out: SWWAEOutput,
    x: Tensor,
    y: Tensor,
    *,
    lambda_rec: float,
    lambda_m: float,
    lambda_nll: float,
    middle_targets: Sequence[Tensor] | None = None,
) -> dict[str, Tensor]:
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
        # the mean over labelled samples: UNLABELLED (-1) ones are left out of the sum, and a batch
        # without labels gives a zero NLL still connected to the head. No `if labelled.any()` and
        # no boolean indexing: each would wait for the GPU (a host sync) at every step
        labelled = (y != UNLABELLED).sum().clamp_(min=1)
        nll = F.cross_entropy(out.logits, y, ignore_index=UNLABELLED, reduction="sum") / labelled
        terms["nll"] = nll
        loss = loss + lambda_nll * nll
    terms["loss"] = loss
    return terms
