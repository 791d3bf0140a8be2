"""The Lightning and Hydra objects of a run, built from its config: the Trainer (always with
the project's checkpoint IO), the loggers, anything with a ``_target_``; and what Hydra knows of
the run (its choices and command-line overrides), with the fallback for ``train()`` called
outside a Hydra app (tests, the epoch clock)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.plugins.io import CheckpointIO
from omegaconf import DictConfig, OmegaConf

from swwae.errors import ConfigError, UserError
from swwae.training.checkpoint_io import AtomicCheckpointIO

# what Hydra knows


def hydra_config() -> DictConfig | None:
    """Hydra's own config of this run, or None outside a Hydra app."""
    from hydra.core.hydra_config import HydraConfig

    try:
        return HydraConfig.get()
    except ValueError:
        return None


def choices() -> dict:
    """The config group options of this run (``model``, ``data``, ...), or {} outside Hydra."""
    hydra = hydra_config()
    return dict(hydra.runtime.choices) if hydra is not None else {}


def task_overrides() -> list[str]:
    """The command-line overrides of this run, or [] outside Hydra."""
    hydra = hydra_config()
    return list(hydra.overrides.task) if hydra is not None else []


# building


def build(node, **kwargs):
    """``hydra.utils.instantiate``, but our own errors come out unwrapped (one line)."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, UserError):
            raise err.__cause__ from None
        raise ConfigError(str(err).replace("\n", " ")) from err


def build_trainer(cfg: DictConfig, loggers: list, callbacks: list, **overrides) -> L.Trainer:
    """The Trainer of ``cfg.trainer`` (``overrides`` on top), saving and loading checkpoints
    through ``AtomicCheckpointIO`` (atomic, checksummed, weights only) unless the config names a
    CheckpointIO plugin of its own. Every Trainer of the job is built here, so that no load of a
    ``ckpt_path`` bypasses the safe reader."""
    given = cfg.trainer.get("plugins") or []
    given = list(given) if OmegaConf.is_list(given) or isinstance(given, (list, tuple)) else [given]
    plugins = [build(p) if OmegaConf.is_dict(p) else p for p in given]  # nodes with _target_, or names
    if not any(isinstance(p, CheckpointIO) for p in plugins):
        plugins.append(AtomicCheckpointIO())
    return build(cfg.trainer, logger=loggers or False, callbacks=callbacks, plugins=plugins, **overrides)


def latest_version(logger_cfg: DictConfig) -> int | None:
    """The newest TensorBoard version folder of this run, so a resumed run continues its curves."""
    root = Path(logger_cfg.save_dir) / logger_cfg.name
    versions = [int(p.name.split("_")[1]) for p in root.glob("version_*") if p.name.split("_")[1].isdigit()]
    return max(versions) if versions else None


def build_loggers(cfg: DictConfig, resuming: bool) -> list:
    loggers = []
    for logger_cfg in (cfg.get("logger") or {}).values():
        extra = {}
        if resuming and logger_cfg.get("_target_", "").endswith("TensorBoardLogger"):
            extra["version"] = latest_version(logger_cfg)
        loggers.append(build(logger_cfg, **extra))
    return loggers
