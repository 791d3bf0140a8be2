"""The settings of swwae's own callbacks (the ``callbacks`` section, ``configs/callbacks/default.yaml``):
each one's type, default and help, declared here only. The config's nodes are filled from here
(``swwae.training.composing.store_settings`` stores them as ``settings/callbacks``), the command
line's values are checked here before torch is imported (``swwae.training.spec``), the classes parse
their arguments here, and docs/configs.md tables them (``scripts/settings_table.py``).
Lightning's own callbacks (checkpoints, the learning-rate monitor) keep Lightning's signatures:
their config holds the project's choices for them, not a second copy of defaults.
Plain Python: no torch, no Lightning."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, StrictBool

from swwae.errors import ConfigError
from swwae.install import command
from swwae.settings import SPLIT_NAMES, Settings, TrueFalseOrAuto, bounded, parse


class ReconstructionImagesSettings(Settings):
    """``swwae.training.callbacks.ReconstructionImages``: the panels (input | reconstruction | where
    dropped, the where masks, the middle reconstructions) to every logger that takes images."""

    num_images: bounded(int, ge=1) = Field(
        4,
        description="the first validation images, the same every time (the whole split where it holds fewer); "
        "4 keeps a row one line in TensorBoard's card",
    )
    every_n_epochs: bounded(int, ge=0) = Field(1, description="panels every n-th epoch; 0: never")
    in_background: TrueFalseOrAuto = Field(
        False,
        description="TensorBoard's panels drawn, encoded and written by a thread of their own while training goes on "
        "(auto: on a GPU; off by default until measured there: docs/performance.md)",
    )


class EmbeddingsSettings(Settings):
    """``swwae.training.embeddings.Embeddings``: when training ends, the top what of images to
    TensorBoard's projector."""

    enabled: StrictBool = Field(False, description="true: on (off: it costs seconds of CPU; docs/tracking.md)")
    num_images: bounded(int, ge=1) = Field(
        1000,
        description="the first images of the split, one point each (the whole split where it holds fewer: "
        "e.g. the bundled sample's 500 test images)",
    )
    split: Literal[SPLIT_NAMES] = Field("test", description="the split whose images are shown")


class KNNAccuracySettings(Settings):
    """``swwae.training.knn_monitor.KNNAccuracy``: ``val/knn_acc``, a k-NN probe of the frozen top what."""

    every_n_epochs: bounded(int, ge=0) = Field(
        0,
        description='0: off; 5: every 5th epoch (docs/analysis.md "Feature probes"); '
        "1 to pick best.ckpt by it (optimized_metric=val/knn_acc)",
    )
    k: bounded(int, ge=1) = Field(20, description="neighbours (cosine, distance-weighted) that vote")
    max_train_images: bounded(int, ge=1) = Field(10_000, description="the first labelled training images it votes with")


class ProgressBarSettings(Settings):
    """``swwae.training.callbacks.progress_bar``: a live bar on a terminal, one line per epoch into a
    file (nohup, SLURM)."""

    refresh_rate: bounded(int, ge=0) = Field(
        5, description="steps between the live bar's updates; 0: lines per epoch even on a terminal"
    )


@dataclass(frozen=True)
class OwnCallback:
    """One of swwae's callbacks: its key in the ``callbacks`` section, the class (or factory) it
    builds, and its settings."""

    name: str
    target: str
    settings: type[Settings]


CALLBACKS = {
    callback.name: callback
    for callback in (
        OwnCallback(
            "reconstruction_images", "swwae.training.callbacks.ReconstructionImages", ReconstructionImagesSettings
        ),
        OwnCallback("embeddings", "swwae.training.embeddings.Embeddings", EmbeddingsSettings),
        OwnCallback("knn_accuracy", "swwae.training.knn_monitor.KNNAccuracy", KNNAccuracySettings),
        OwnCallback("progress_bar", "swwae.training.callbacks.progress_bar", ProgressBarSettings),
    )
}


def own_callback(target) -> OwnCallback | None:
    """The callback of ours that ``target`` (a node's ``_target_``) names, if any."""
    return next((c for c in CALLBACKS.values() if c.target == target), None)


def callback_nodes(nodes: Mapping | None, name: str) -> list[tuple[str, Mapping]]:
    """(key, node) of each node of a ``callbacks`` section that builds our callback ``name``
    (``CALLBACKS``), whatever key the config gives it."""
    wanted = CALLBACKS[name]
    return [
        (key, node)
        for key, node in (nodes or {}).items()
        if isinstance(node, Mapping) and own_callback(node.get("_target_")) is wanted
    ]


def check_callbacks(nodes: Mapping) -> None:
    """Each node of the ``callbacks`` section that builds one of ours, by its settings: a bad value
    is one line (``callbacks.<key>.<setting>``) before torch is imported. Others check themselves
    when they are built."""
    for key, node in nodes.items():
        callback = own_callback(node.get("_target_")) if isinstance(node, Mapping) else None
        if callback is not None:
            parse(callback.settings, {k: v for k, v in node.items() if k != "_target_"}, f"callbacks.{key}")


def is_tensorboard(target) -> bool:
    """Whether a logger node's ``_target_`` is Lightning's TensorBoard logger, under any of its import paths."""
    return str(target or "").rpartition(".")[2] == "TensorBoardLogger"


def check_projector(nodes: Mapping | None, loggers: Mapping | None) -> None:
    """``callbacks.embeddings.enabled=true`` writes to TensorBoard's projector only: without a
    TensorBoard logger it would be on and write nothing. One line, before anything is written."""
    wanted = any(node.get("enabled") for _, node in callback_nodes(nodes, "embeddings"))
    targets = [node.get("_target_") for node in (loggers or {}).values() if isinstance(node, Mapping)]
    if wanted and not any(is_tensorboard(target) for target in targets):
        raise ConfigError(
            "callbacks.embeddings.enabled=true writes to TensorBoard's projector, and this run has no "
            f"TensorBoard logger (its loggers: {', '.join(loggers or {}) or 'none'}): add one (logger=many, or "
            f"'logger=[tensorboard,csv]'), or leave it off ({command('evaluate')} <checkpoint> --embeddings "
            "writes them later)"
        )


KNN_METRIC = "val/knn_acc"  # what swwae.training.knn_monitor.KNNAccuracy logs


def check_knn_monitor(metric, nodes: Mapping | None, every_validation: int | None) -> None:
    """``optimized_metric=val/knn_acc``: ModelCheckpoint reads the monitor at every validation and
    stops the run (Lightning's MisconfigurationException) at one without it, after an epoch of
    training; the k-NN monitor must be on and measure it at every validation
    (``every_validation``: ``trainer.check_val_every_n_epoch``, None: validations counted in
    batches, in any epoch). One line, before torch is imported, saying what to set."""
    if metric != KNN_METRIC:
        return
    found = callback_nodes(nodes, "knn_accuracy")
    key = found[0][0] if found else "knn_accuracy"
    every = max((int(node.get("every_n_epochs") or 0) for _, node in found), default=0)
    if every == 1 or (every and every_validation and every_validation % every == 0):
        return
    if not every:
        raise ConfigError(
            f"optimized_metric={KNN_METRIC} is measured by the k-NN monitor, which this run leaves off: "
            f"turn it on at every validation with callbacks.{key}.every_n_epochs=1, or pick best.ckpt by "
            "another metric"
        )
    validate = (
        f", or validate only where it is measured with trainer.check_val_every_n_epoch={every}"
        if every_validation is not None
        else ""
    )
    raise ConfigError(
        f"optimized_metric={KNN_METRIC} picks best.ckpt at every validation, and callbacks.{key}.every_n_epochs="
        f"{every} measures it once in {every} epochs (a validation without it would stop the run): "
        f"set callbacks.{key}.every_n_epochs=1{validate}"
    )


def parse_callback(name: str, values: Mapping) -> Settings:
    """The settings of our callback ``name`` from ``values`` (a node less its ``_target_``, or a
    class's keyword arguments), or ConfigError: the first problem in one line, as
    ``callbacks.<name>.<key>``."""
    return parse(CALLBACKS[name].settings, values, f"callbacks.{name}")
