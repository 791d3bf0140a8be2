"""The loss terms and their weights: one table, plain Python (the training job checks the
weights before torch is imported). ``swwae.loss`` computes the terms; the weights' defaults,
their checks (``swwae.settings.check_training``), which metric picks ``best.ckpt``
(``swwae.training.composing``) and the benchmark's hand loop read them here, by name.

    loss = sum over terms of  <weight> * <term>
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

TRAINS = ("reconstruction", "classifier")  # what a term trains


@dataclass(frozen=True)
class LossTerm:
    """One term of the loss and the model setting that weighs it."""

    weight: str  # the model setting (model.<weight>), SWWAEModule's argument, swwae_loss's keyword
    default: float  # its default (configs/model/swwae_hard.yaml, SWWAEModule's signature)
    term: str  # the logged term it weighs (train/<term>): a metric name, or a family (middle_mse_<i>)
    trains: str  # "reconstruction" (the decoder) or "classifier" (the head)
    description: str = ""

    def __post_init__(self):
        if self.trains not in TRAINS:
            raise ValueError(f"loss term {self.weight!r}: trains must be one of {TRAINS}, got {self.trains!r}")


TERMS: tuple[LossTerm, ...] = (
    LossTerm("lambda_rec", 1.0, "recon_mse", "reconstruction", "MSE of the image's reconstruction"),
    LossTerm("lambda_m", 0.1, "middle_mse", "reconstruction", "sum of the middle reconstructions' MSEs"),
    LossTerm("lambda_nll", 1.0, "nll", "classifier", "NLL of the labelled samples' classes"),
)
WEIGHTS: dict[str, float] = {t.weight: t.default for t in TERMS}  # weight -> its default


def loss_weights(settings: Mapping) -> dict[str, float]:
    """The loss weights of a flat model config (a mapping), defaults where it has none."""
    return {t.weight: float(settings.get(t.weight, t.default)) for t in TERMS}


def trains_reconstruction(settings: Mapping) -> bool:
    """Whether a flat model config weighs any reconstruction term above 0."""
    return any(float(settings.get(t.weight, 0) or 0) > 0 for t in TERMS if t.trains == "reconstruction")
