"""The data side of the feature probes: a run's own data with every training label known,
and one network (or the pixels) probed on it. ``scripts/probe.py`` and
``scripts/feature_study.py`` share it; the probes themselves are ``swwae.probe``."""

from __future__ import annotations

import time
from collections.abc import Mapping

import torch

from swwae.errors import ConfigError
from swwae.model import NETWORK
from swwae.pooling.modes import POOL_MODES
from swwae.probe import (
    DIRECTIONS,
    features,
    invariance,
    label_key,
    labelled_subset,
    probe_features,
    relative_change,
    shift,
)
from swwae.training.registry import data_of_run
from swwae.training.runs.identity import FREE_DATA_KEYS

# data settings that do not change which images a split holds: where the files are and how
# they are read (outside a run's identity), and how a run draws its batches and labels
SPLIT_FREE_DATA_KEYS = (
    *FREE_DATA_KEYS,
    "batch_size",
    "seed",
    "num_labels",
    "labelled_per_batch",
    "num_unlabelled",
    "augment",
)
# network settings outside the network string that change what the encoder computes in eval mode
# (dropout does not): a random-weights control is shared only by networks that agree on them
ENCODER_SETTINGS = ("nonlinearity", "batch_norm", "pool_stride", "pool_padding")
INVARIANCE_IMAGES = 500  # the first test images, shifted


def parse_labels(values: list[str]) -> list[int | None]:
    """``--labels`` of the probe scripts: positive numbers of labelled training images, or
    ``all`` (None)."""
    labels = []
    for value in values:
        if value == "all":
            labels.append(None)
        elif value.isdigit() and int(value) > 0:
            labels.append(int(value))
        else:
            raise ConfigError(f"--labels takes positive numbers or 'all', got {value!r}")
    return labels


def check_probe_settings(k: int, seed: int, shifts) -> None:
    """``ConfigError`` unless ``--k`` >= 1 and ``--seed``, ``--shifts`` >= 0, told before any
    checkpoint is read: scikit-learn refuses a k-NN of no neighbour with a traceback, and only
    after every model has been loaded (``swwae probe`` and ``swwae feature-study`` share the rule)."""
    if k < 1 or seed < 0 or any(s < 0 for s in shifts):
        raise ConfigError("--k must be >= 1, --seed and --shifts >= 0")


def load_data(data: Mapping | None, data_root: str | None = None, source: str = "the run config"):
    """The run's data module (from the ``data`` section of its saved config, through the
    registry of shipped data sets) with every training label known and no augmentation: the
    probes draw their own labelled subsets."""
    keys = set(data) if isinstance(data, dict) else set()
    changes = {"num_labels": None} | {k: None for k in ("labelled_per_batch", "num_unlabelled") if k in keys}
    changes |= {"augment": False} if "augment" in keys else {}
    datamodule = data_of_run(data, source, data_root, fetch_hint=f"swwae evaluate {source} --download", **changes)
    datamodule.setup("fit")
    return datamodule


def check_same_split(configs: dict) -> None:
    """ConfigError unless every run config ({name: config}) holds the same data split."""
    strip = lambda cfg: {k: v for k, v in cfg["data"].items() if k not in SPLIT_FREE_DATA_KEYS}  # noqa: E731
    (first, first_cfg), *others = configs.items()
    for name, cfg in others:
        if strip(cfg) != strip(first_cfg):
            raise ConfigError(f"{name} was trained on other data than {first}: probe them separately")


def subsets_for(data, labels, seed: int) -> dict[str, torch.Tensor]:
    """{"100": indices, ..., "all": ...} into the labelled training images, from ``seed`` alone."""
    train_y = data.train_y[data.train_y >= 0]
    return {label_key(n): labelled_subset(train_y, n, seed=seed, num_classes=data.num_classes) for n in labels}


def encoder_key(net) -> str:
    """What the random-weights control of ``net`` shares with others: its encoder (network
    string without the classifier), pooling and the settings of its mode (``beta=``, ``wavelet=``),
    and any of ``ENCODER_SETTINGS`` off its default. Two networks of one key get one control:
    a key without ``batch_norm`` gave a batch-norm checkpoint the control of a plain one."""
    arch = net.arch.rsplit("-", 1)[0] if net.arch.endswith("fc") else net.arch
    settings = net.settings
    named = [f"{name}={settings.get(name)}" for name in POOL_MODES.entry(net.pool_mode).parameters]
    named += [f"{name}={settings[name]}" for name in ENCODER_SETTINGS if settings[name] != getattr(NETWORK, name)]
    return " ".join([arch, net.pool_mode, *named])


def probe_model(name: str, data, subsets, net=None, k: int = 20, stages: str = "top", shifts=(1, 2, 3)) -> dict:
    """The linear and k-NN probes and the invariance of ``net``'s features, or of the raw
    pixels when ``net`` is None, as one row: {"name", "dim", "linear", "linear_C", "knn",
    "invariance", "seconds"}."""
    started = time.perf_counter()
    encode = (lambda x: x.flatten(1).float() / 255.0) if net is None else (lambda x: features(net, x, stages))
    labelled = data.train_y >= 0
    splits = {
        "train": (data.train_x[labelled], data.train_y[labelled]),
        "val": (data.val_x, data.val_y),
        "test": (data.test_x, data.test_y),
    }
    feats = {split: (encode(x), y) for split, (x, y) in splits.items()}
    row = {"name": name, "dim": int(feats["train"][0].shape[1])}
    row |= probe_features(feats["train"], feats["val"], feats["test"], subsets, k=k)
    images = data.test_x[:INVARIANCE_IMAGES]
    row["invariance"] = pixel_invariance(images, shifts) if net is None else invariance(net, images, shifts=shifts)
    row["seconds"] = round(time.perf_counter() - started, 1)
    return row


def pixel_invariance(images: torch.Tensor, shifts) -> dict:
    """The raw image's own change under the shifts: the reference row."""
    x = images.float() / 255.0 if images.dtype == torch.uint8 else images
    return {
        "pixels": {
            int(s): float(torch.cat([relative_change(shift(x, dy * s, dx * s), x) for dy, dx in DIRECTIONS]).nanmean())
            for s in shifts
        }
    }
