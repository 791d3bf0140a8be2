"""The model's and the data's settings, checked in plain Python: each value that cannot work is
one line saying what to change. ``SWWAE``, ``SWWAEModule`` and the data modules call these
checks when they are built; the training job calls the same ones before torch is imported
(``swwae.training.checks``), so that bad input answers in a second, with the same words.

The name lists are plain tuples, and the pooling modes a plain table (``swwae.pool_modes``),
so that no torch is needed to read them; the tests hold ``NONLINEARITIES`` equal to the
registry it names (``swwae.model.NONLINEARITY_LAYERS``).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping

import swwae.pooling.modes as pool_modes
from swwae.arch import Arch, parse, shorthand
from swwae.errors import ConfigError
from swwae.loss_terms import loss_weights

NONLINEARITIES = ("relu", "leaky_relu", "elu", "gelu", "tanh")
SCHEDULERS = ("none", "cosine")
LABELLED_SHARE = 4  # without data.labelled_per_batch: a quarter of every batch is labelled


def __getattr__(name: str):
    """``POOL_MODES``: the mode table's names now (PEP 562), registered modes too."""
    if name == "POOL_MODES":
        return pool_modes.POOL_MODES.names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# the model


def pool_mode_of(name: object, setting: str = "model.pool_mode") -> pool_modes.PoolMode:
    """The mode table's entry of ``name``, or ConfigError (one line) naming the choices."""
    try:
        return pool_modes.POOL_MODES.entry(name, setting)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def trains_classifier(settings: Mapping) -> bool:
    """Whether a flat model config trains a classifier head: ``lambda_nll > 0`` and, when the
    network is written out (``arch``), an ``Nfc`` token in it. The one place this is decided:
    the network gets a head by it, the checkpoint monitor picks ``val/acc`` by it."""
    if not float(settings.get("lambda_nll", 0) or 0) > 0:
        return False
    return settings.get("arch") is None or parse(settings["arch"]).classes is not None


def check_network(kernel_size, pool_mode, beta, nonlinearity, dropout, image_shape) -> None:
    """The network's scalar settings."""
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ConfigError(f"model.kernel_size must be a positive odd int (same-size convs), got {kernel_size}")
    pool_mode_of(pool_mode)  # one of the mode table's, or its one line
    if isinstance(beta, bool) or not (isinstance(beta, numbers.Real) and math.isfinite(beta) and beta > 0):
        raise ConfigError(f"model.beta must be a finite number > 0 (the soft argmax temperature), got {beta}")
    if nonlinearity not in NONLINEARITIES:
        raise ConfigError(f"model.nonlinearity={nonlinearity!r} is unknown; choose one of {', '.join(NONLINEARITIES)}")
    if not 0 <= dropout < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")
    if len(image_shape) != 3:
        raise ConfigError(f"image_shape must be (channels, height, width), got {image_shape}")


def network_spec(arch, widths, kernel_size, pool_size, num_classes) -> Arch:
    """The network's layers: ``arch`` in the paper's notation, or the widths shorthand."""
    if arch is None:
        widths = list(widths or [])
        if not widths or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths):
            raise ConfigError(f"model.widths must be a non-empty list of positive ints, got {widths}")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ConfigError(f"model.pool_size must be a positive int (PxP pools), got {pool_size}")
        return parse(shorthand(widths, kernel_size, pool_size, num_classes))
    spec = parse(arch)
    if spec.classes and num_classes and spec.classes != num_classes:
        raise ConfigError(
            f'model.arch="{arch}" ends with a classifier over {spec.classes} classes, but the '
            f"data have {num_classes}: write {num_classes}fc"
        )
    return spec


def check_training(weights: Mapping, *, input_noise, nll_warmup_epochs, lr, scheduler, arch) -> None:
    """The loss weights (by name: every weight of ``swwae.loss_terms``, defaults where
    ``weights`` has none) and the optimiser's settings."""
    weights = loss_weights(weights)
    if min(weights.values()) < 0 or sum(weights.values()) == 0:
        *first, last = weights
        raise ConfigError(f"model.{', '.join(first)} and {last} must be >= 0 and not all 0")
    lambda_nll = weights["lambda_nll"]
    if not nll_warmup_epochs >= 0:
        raise ConfigError(f"model.nll_warmup_epochs must be >= 0, got {nll_warmup_epochs}")
    if not input_noise >= 0:
        raise ConfigError(f"model.input_noise must be >= 0, got {input_noise}")
    if not lr > 0:
        raise ConfigError(f"model.lr must be > 0, got {lr}")
    if scheduler not in SCHEDULERS:
        raise ConfigError(f"model.scheduler={scheduler!r} is unknown; choose one of {', '.join(SCHEDULERS)}")
    if arch is not None and parse(arch).classes and lambda_nll == 0:
        raise ConfigError(
            f'model.arch="{arch}" ends with a classifier that model.lambda_nll=0 never trains: '
            f"drop its fc token, or set model.lambda_nll > 0"
        )


# the data


def check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"data.{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def choose_labelled_per_batch(k: int | None, batch_size: int, labels: int, what: str) -> int:
    """``data.labelled_per_batch`` (its default: a quarter of the batch, at most ``labels``),
    or a one-line error when it cannot work."""
    if k is None:
        return max(1, min(batch_size // LABELLED_SHARE, labels))
    if k >= batch_size:
        raise ConfigError(
            f"data.labelled_per_batch={k} leaves no room for unlabelled samples "
            f"in batches of data.batch_size={batch_size}: make it smaller than the batch"
        )
    if k > labels:
        raise ConfigError(f"data.labelled_per_batch={k} is more than the {what}: a batch would repeat labels")
    return k


def check_data(
    name: str,
    num_classes: int,
    batch_size=128,
    num_labels=None,
    seed=0,
    num_workers=0,
    split_seed=0,
    labelled_per_batch=None,
    num_unlabelled=None,
) -> dict:
    """The settings every data set shares, checked and normalised (``labelled_per_batch`` is
    decided here when some labels are hidden), in the order the data module reads them."""
    values = {
        "split_seed": check_int("split_seed", split_seed, 0),
        "batch_size": check_int("batch_size", batch_size, 1),
    }
    values["num_labels"] = None if num_labels is None else check_int("num_labels", num_labels, 1)
    if values["num_labels"] is not None and values["num_labels"] < num_classes:
        raise ConfigError(
            f"data.num_labels={values['num_labels']} is fewer than the {num_classes} classes of "
            f"{name}: every class needs at least one labelled sample"
        )
    k = None if labelled_per_batch is None else check_int("labelled_per_batch", labelled_per_batch, 1)
    if values["num_labels"] is not None:
        k = choose_labelled_per_batch(
            k, values["batch_size"], values["num_labels"], f"data.num_labels={values['num_labels']} labelled samples"
        )
    values["labelled_per_batch"] = k
    values["seed"] = check_int("seed", seed, 0)
    values["num_workers"] = check_int("num_workers", num_workers, 0)
    values["num_unlabelled"] = None if num_unlabelled is None else check_int("num_unlabelled", num_unlabelled, 1)
    return values
