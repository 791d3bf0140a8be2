"""The training job behind ``train.py``: config in, trained model, logs, checkpoints and
``metrics.json`` out. Data flows one way: config -> datamodule + module -> Trainer ->
callbacks/loggers -> files."""

from __future__ import annotations

import json
import logging
import math
import shutil
import time
from pathlib import Path

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.plugins.io import CheckpointIO
from omegaconf import DictConfig, OmegaConf

from swwae.callbacks import BatchSeed, SaveRunConfig
from swwae.checkpoint_io import AtomicCheckpointIO
from swwae.checkpoints import check_resumable, newest_readable, pick_resume_checkpoint
from swwae.errors import ConfigError, NonFiniteError, UserError
from swwae.host_memory import keep_freed_memory
from swwae.monitor import check_monitor

log = logging.getLogger(__name__)

# helpers


def config_summary(cfg: DictConfig) -> dict:
    """What tells runs apart in tables: model, data, seed and the run name."""
    choices = cfg_choices(cfg)
    return {"run_name": cfg.run_name, "model": choices.get("model"), "data": choices.get("data"), "seed": cfg.seed}


def cfg_choices(cfg: DictConfig) -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices)
    except ValueError:  # outside a Hydra app (tests calling train() directly)
        return {}


def resume_checkpoint(cfg: DictConfig, module=None, datamodule=None) -> str | None:
    """``resume=true``: the newest checkpoint of checkpoints/<run_name>/ that reads back
    (last.ckpt, else best.ckpt, ... with a warning), checked to fit the current model and
    data config; None for a fresh run."""
    if not cfg.resume:
        return None
    folder = Path(cfg.paths.checkpoint_dir) / cfg.run_name
    found = pick_resume_checkpoint(folder)
    if found is None:
        log.warning("resume=true but %s holds no checkpoint: starting a fresh run", folder)
        return None
    path, checkpoint = found
    if module is not None:
        check_resumable(path, checkpoint, module, datamodule)
    for scheduler in checkpoint.get("lr_schedulers") or []:
        if scheduler.get("T_max") not in (None, cfg.trainer.get("max_epochs")):
            log.warning("%s holds a cosine schedule over %s epochs; this run has trainer.max_epochs=%s: the "
                        "learning rate keeps the old schedule (0 at epoch %s, rising after)", path,
                        scheduler["T_max"], cfg.trainer.get("max_epochs"), scheduler["T_max"])
    log.info("resuming from %s (epoch %s, step %s)", path, checkpoint.get("epoch"), checkpoint.get("global_step"))
    return str(path)


def move_old_run_aside(cfg: DictConfig) -> None:
    """A fresh run moves an old run's checkpoints aside (nothing already saved is lost)
    rather than overwrite them."""
    folder = Path(cfg.paths.checkpoint_dir) / cfg.run_name
    if folder.is_dir() and any(folder.glob("*.ckpt")):
        aside = folder.with_name(f"{folder.name}.previous-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(folder), str(aside))
        log.warning("%s held an earlier run: moved it to %s (use resume=true to continue a run)", folder, aside)


def check_seed(seed) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32):
        raise ConfigError(f"seed must be an integer in 0..{2**32 - 1} (or null), got {seed!r}")


def logged_val_metrics(module) -> list[str]:
    return ["val/loss", *(f"val/{name}" for name in module.metrics["val"])]


def kept_checkpoint(cfg: DictConfig) -> str:
    """What a run that stopped on an error leaves to resume from, in words."""
    path, checkpoint, _ = newest_readable(Path(cfg.paths.checkpoint_dir) / cfg.run_name)
    if path is None:
        return "no checkpoint was saved"
    return f"{path} (epoch {checkpoint.get('epoch')}, step {checkpoint.get('global_step')}) is kept"


def build_trainer(cfg: DictConfig, loggers: list, callbacks: list) -> L.Trainer:
    """The Trainer of ``cfg.trainer``, saving checkpoints atomically (``AtomicCheckpointIO``)
    unless the config names a CheckpointIO plugin of its own."""
    given = cfg.trainer.get("plugins") or []
    given = list(given) if OmegaConf.is_list(given) or isinstance(given, (list, tuple)) else [given]
    plugins = [build(p) if OmegaConf.is_dict(p) else p for p in given]  # nodes with _target_, or names
    if not any(isinstance(p, CheckpointIO) for p in plugins):
        plugins.append(AtomicCheckpointIO())
    return build(cfg.trainer, logger=loggers or False, callbacks=callbacks, plugins=plugins)


def latest_version(logger_cfg: DictConfig) -> int | None:
    """The newest TensorBoard version folder of this run, so a resumed run continues its curves."""
    root = Path(logger_cfg.save_dir) / logger_cfg.name
    versions = [int(p.name.split("_")[1]) for p in root.glob("version_*") if p.name.split("_")[1].isdigit()]
    return max(versions) if versions else None


def build_loggers(cfg: DictConfig, resuming: bool) -> list:
    loggers = []
    for name, logger_cfg in (cfg.get("logger") or {}).items():
        extra = {}
        if resuming and logger_cfg.get("_target_", "").endswith("TensorBoardLogger"):
            extra["version"] = latest_version(logger_cfg)
        loggers.append(build(logger_cfg, **extra))
    return loggers


def final_metrics(trainer: L.Trainer, prefix: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(prefix) and not k.endswith("loss")}


def build(node, **kwargs):
    """``hydra.utils.instantiate``, but our own errors come out unwrapped (one line)."""
    try:
        return instantiate(node, **kwargs)
    except InstantiationException as err:
        if isinstance(err.__cause__, UserError):
            raise err.__cause__ from None
        raise ConfigError(str(err).replace("\n", " ")) from err


# the job


def train(cfg: DictConfig) -> float:
    """Train, test, write ``metrics.json``; return ``cfg.optimized_metric`` for sweepers."""
    started = time.perf_counter()
    if cfg.get("keep_freed_memory") and keep_freed_memory():
        log.debug("glibc keeps freed memory for reuse (keep_freed_memory=true)")
    check_seed(cfg.get("seed"))
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build(cfg.data, _convert_="all")
    datamodule.prepare_data()
    datamodule.setup("fit")  # load now: data errors stop the run before any training
    module = build(cfg.model, image_shape=datamodule.image_shape, num_classes=datamodule.num_classes,
                         _convert_="all")  # plain lists in hparams: checkpoints load with weights_only
    check_monitor(cfg.optimized_metric, cfg.optimized_mode, logged_val_metrics(module))
    ckpt_path = resume_checkpoint(cfg, module, datamodule)
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values()]
    callbacks.append(SaveRunConfig(OmegaConf.to_container(cfg, resolve=True)))
    if cfg.get("seed") is not None:
        callbacks.append(BatchSeed(cfg.seed))  # a resumed run replays the uninterrupted one
    loggers = build_loggers(cfg, resuming=ckpt_path is not None)
    trainer = build_trainer(cfg, loggers, callbacks)
    if ckpt_path is None:  # every check passed: only now touch what is on disk
        move_old_run_aside(cfg)

    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
    except NonFiniteError as err:  # one line for train.py, saying what is left to resume from
        raise NonFiniteError(f"{err}; {kept_checkpoint(cfg)}") from None
    metrics = final_metrics(trainer, "val/")
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cfg.get("test"):
        trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        metrics |= final_metrics(trainer, "test/")
    metrics["train_time_s"] = time.perf_counter() - started
    summary = config_summary(cfg) | {"status": "ok", "epochs": trainer.current_epoch, "checkpoint": best or None,
                                     "monitor": {"metric": cfg.optimized_metric, "mode": cfg.optimized_mode},
                                     "metrics": metrics}

    if trainer.is_global_zero:
        Path(cfg.paths.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(cfg.paths.output_dir) / "metrics.json").write_text(json.dumps(summary, indent=2))
        for logger in trainer.loggers:
            if isinstance(logger, TensorBoardLogger):  # the hparams table with final metrics
                hparams = OmegaConf.to_container(cfg.model, resolve=True) | {"seed": cfg.seed, "data": summary["data"]}
                logger.log_hyperparams(hparams, metrics={f"hp/{k}": v for k, v in metrics.items()})
                logger.experiment.flush()
        shown = " ".join(f"{k}={metrics[k]:.4f}" for k in ("test/recon_mse", "test/acc") if k in metrics)
        print(f"done: {cfg.run_name}: {shown} ({metrics['train_time_s']:.0f} s) -> {cfg.paths.output_dir}")

    value = metrics.get(cfg.optimized_metric, math.nan)
    if not math.isfinite(value):
        raise ConfigError(f"{cfg.optimized_metric} was not computed (is it a metric this run logs?)")
    return value


def set_torch_defaults() -> None:
    """Quieter, faster defaults for in-memory tensors on CPU."""
    import warnings

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    torch.set_float32_matmul_precision("high")
