"""Which validation metric picks ``best.ckpt`` and is returned to sweepers.

By default it follows what the model trains: a run that trains a classifier on few labels
(``data.num_labels`` set, or STL-10's unlabelled images) or on nothing else (``lambda_rec = lambda_m = 0``) is judged by
``val/acc``; a model that trains reconstructions only (no classifier head: lambda_nll = 0,
or a ``model.arch`` without an ``Nfc`` token) by ``val/recon_mse``; a fully labelled SWWAE,
which trains both, by its reconstruction. A checkpoint picked by a metric the model never
trains (a classifier-only run by its untrained decoder) would make every comparison built on it wrong.

The configs reach these rules through two OmegaConf resolvers (registered on import)::

    optimized_metric: ${swwae.default_monitor:}
    optimized_mode: ${swwae.monitor_mode:${optimized_metric}}

so that an explicit ``optimized_metric=...`` still wins, and sweepers (Optuna's
``direction``) see the resolved values before any job runs.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from swwae.errors import ConfigError
from swwae.loss_terms import trains_reconstruction as weighs_reconstruction
from swwae.settings import trains_classifier
from swwae.training.runs import names  # noqa: F401 - registers the run name's ${swwae.arch_tag:} too


def has_classifier(model: DictConfig) -> bool:
    """A classifier head that trains (``swwae.model.trains_classifier``)."""
    try:
        return trains_classifier(model)
    except ConfigError:  # the model reports a bad string itself, with a caret under the token
        return True


def trains_reconstruction(model: DictConfig) -> bool:
    """A reconstruction term weighed above 0 (``swwae.loss_terms``)."""
    return weighs_reconstruction(model)


def default_monitor(model: DictConfig, data: DictConfig) -> str:
    """The validation metric the model trains (see the module docstring)."""
    semi_supervised = data.get("num_labels") is not None or bool(data.get("unlabelled"))  # STL-10's 100,000
    if has_classifier(model) and (semi_supervised or not trains_reconstruction(model)):
        return "val/acc"
    return "val/recon_mse"


def monitor_mode(metric: str) -> str:
    """Accuracies are maximised, errors and losses minimised."""
    return "max" if str(metric).rsplit("/", 1)[-1].startswith("acc") else "min"


def check_monitor(metric: str, mode: str, logged: list[str]) -> None:
    """``metric`` must be one of the validation metrics the model logs: ModelCheckpoint
    watches it at every validation, and sweepers read it at the end."""
    if metric not in logged:
        raise ConfigError(
            f"optimized_metric={metric} is not a validation metric of this model; "
            f"choose one of {', '.join(sorted(logged))}"
        )
    check_mode(mode)


def check_mode(mode) -> str:
    if mode not in ("min", "max"):
        raise ConfigError(f"optimized_mode must be min or max, got {mode!r}")
    return mode


def _register() -> None:
    if not OmegaConf.has_resolver("swwae.default_monitor"):
        OmegaConf.register_new_resolver(
            "swwae.default_monitor", lambda *, _root_: default_monitor(_root_.model, _root_.data)
        )
    if not OmegaConf.has_resolver("swwae.monitor_mode"):
        OmegaConf.register_new_resolver("swwae.monitor_mode", monitor_mode)


_register()
