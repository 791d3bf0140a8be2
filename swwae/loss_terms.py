"""The loss terms and their weights: one table, plain Python (the training job checks the
weights before torch is imported). Each term names the function that computes it (pure torch,
``swwae.loss``); its weight is a model setting (``model.<weight>``, declared by the entry: the
schema of ``swwae.settings`` reads it here); which metric picks ``best.ckpt``
(``swwae.training.composing``) reads what it trains.

    loss = sum over terms of  <weight> * <term>

A lab's own term is a function and one line:

    TERMS.register(LossTerm("lambda_tv", 0.0, "tv", "reconstruction", "total variation of the image", my_tv))
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from swwae.tables import Table

TRAINS = ("reconstruction", "classifier")  # what a term trains


@dataclass(frozen=True)
class LossTerm:
    """One term of the loss and the model setting that weighs it. ``compute(out, x, y,
    middle_targets)`` returns the term's logged values (``{"tv": tensor}``; several for a family,
    ``middle_mse_<i>``; none when it does not apply, e.g. no classifier), which add up to the
    term the weight multiplies."""

    weight: str  # the model setting (model.<weight>), swwae_loss's keyword
    default: float  # its default (0 for a term registered from outside: swwae.settings.check_registered_terms)
    term: str  # the logged term it weighs (train/<term>): a metric name, or a family (middle_mse_<i>)
    trains: str  # "reconstruction" (the decoder) or "classifier" (the head)
    description: str = ""
    compute: str | Callable = ""  # "module:function" (imported on use) or the function

    def __post_init__(self):
        if self.trains not in TRAINS:
            raise ValueError(f"loss term {self.weight!r}: trains must be one of {TRAINS}, got {self.trains!r}")

    @property
    def name(self) -> str:
        return self.weight

    def function(self) -> Callable:
        if not isinstance(self.compute, str):
            return self.compute
        module, _, name = self.compute.partition(":")
        return getattr(importlib.import_module(module), name)


_LOSS = "swwae.loss"
TERMS: Table[LossTerm] = Table(
    "loss term",
    "model.<weight>",
    (
        LossTerm(
            "lambda_rec", 1.0, "recon_mse", "reconstruction", "MSE of the image's reconstruction", f"{_LOSS}:recon_mse"
        ),
        LossTerm(
            "lambda_m",
            0.1,
            "middle_mse",
            "reconstruction",
            "sum of the middle reconstructions' MSEs",
            f"{_LOSS}:middle_mse",
        ),
        LossTerm("lambda_nll", 1.0, "nll", "classifier", "NLL of the labelled samples' classes", f"{_LOSS}:nll"),
    ),
)  # the shipped terms; registered ones follow


def loss_weights(settings: Mapping) -> dict[str, float]:
    """The loss weights of a flat model config (a mapping), defaults where it has none."""
    return {t.weight: float(settings.get(t.weight, t.default)) for t in TERMS.values()}


def weight_of(settings: Mapping, weight: str) -> float:
    """A flat model config's ``weight``, the term's default where the config has none, as the
    loss weighs it. (Read as 0 there, a model config without ``lambda_nll`` got no head from
    ``SWWAE.from_settings`` and a semi-supervised run was monitored by ``val/recon_mse``.)"""
    return float(settings.get(weight, TERMS[weight].default) or 0)


def trains_reconstruction(settings: Mapping) -> bool:
    """Whether a flat model config weighs any reconstruction term above 0."""
    return any(weight_of(settings, t.weight) > 0 for t in TERMS.values() if t.trains == "reconstruction")
