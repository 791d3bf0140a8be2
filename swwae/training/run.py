"""The training job behind ``train.py``: config in, trained model, logs, checkpoints and
``metrics.json`` out. Data flows one way: config -> datamodule + module -> Trainer ->
callbacks/loggers -> files."""

from __future__ import annotations

import json
import logging
import math
import shlex
import shutil
import time
from pathlib import Path

import lightning as L
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.trainer.states import TrainerStatus
from omegaconf import DictConfig, OmegaConf

from swwae.training.callbacks import BatchSeed, LogRunConfig, SaveRunConfig
from swwae.training.checkpoint_io import AtomicCheckpointIO
from swwae.training.checkpoints import check_resumable, newest_readable, pick_resume_checkpoint
from swwae.training.compiling import compile_network
from swwae.errors import ConfigError, Interrupted, NonFiniteError, UserError
from swwae.training.host_memory import keep_freed_memory
from swwae.training.loggers import check_extras, log_summary, run_params
from swwae.training.monitor import check_monitor

log = logging.getLogger(__name__)

# helpers


def config_summary(cfg: DictConfig, module=None) -> dict:
    """What tells runs apart in tables: model, data, seed, the network (in the paper's
    notation) and the run name."""
    choices = cfg_choices(cfg)
    summary = {"run_name": cfg.run_name, "model": choices.get("model"), "data": choices.get("data"), "seed": cfg.seed}
    return summary | ({"arch": module.net.arch} if module is not None else {})


def cfg_choices(cfg: DictConfig) -> dict:
    try:
        from hydra.core.hydra_config import HydraConfig

        return dict(HydraConfig.get().runtime.choices)
    except ValueError:  # outside a Hydra app (tests calling train() directly)
        return {}


def resume_checkpoint(cfg: DictConfig, module=None, datamodule=None) -> tuple[Path, dict] | None:
    """``resume=true``: (path, contents) of the newest checkpoint of checkpoints/<run_name>/
    that reads back (last.ckpt, else best.ckpt, ... with a warning), checked to fit the
    current model and data config; None for a fresh run."""
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
    return path, checkpoint


def has_finished(checkpoint: dict, cfg: DictConfig) -> bool:
    """Whether the run that saved ``checkpoint`` already trained as far as ``cfg.trainer``
    asks (``checkpoint["epoch"]`` is the epoch it was saved at the end of)."""
    max_epochs, max_steps = cfg.trainer.get("max_epochs"), cfg.trainer.get("max_steps")
    if max_steps is not None and max_steps >= 0 and checkpoint.get("global_step", 0) >= max_steps:
        return True
    return max_epochs is not None and max_epochs >= 0 and checkpoint.get("epoch", -1) + 1 >= max_epochs


def continue_command(cfg: DictConfig) -> str:
    """The command line that continues this run: its own overrides, plus resume=true."""
    try:
        from hydra.core.hydra_config import HydraConfig

        overrides = list(HydraConfig.get().overrides.task)
    except ValueError:  # outside a Hydra app
        overrides = []
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "resume"]
    return " ".join(["python train.py", *map(shlex.quote, kept), "resume=true"])


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
    if cfg.get("flush_denormal") and torch.set_flush_denormal(True):  # False where the CPU cannot
        log.debug("denormal floats flush to zero (flush_denormal=true)")
    check_seed(cfg.get("seed"))
    check_extras(cfg)  # a tracker whose optional package is missing: one line, before the data
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build(cfg.data, _convert_="all")
    datamodule.prepare_data()
    datamodule.setup("fit")  # load now: data errors stop the run before any training
    module = build(cfg.model, image_shape=datamodule.image_shape, num_classes=datamodule.num_classes,
                   pixel_mean=datamodule.pixel_mean(), _convert_="all")  # plain lists: checkpoints load weights_only
    compile_network(module, cfg.get("compile"))  # compile=true (issue 20): in place, checkpoints unchanged
    check_monitor(cfg.optimized_metric, cfg.optimized_mode, logged_val_metrics(module))
    resume = resume_checkpoint(cfg, module, datamodule)
    if resume is not None and has_finished(resume[1], cfg):  # a repeated or re-queued command
        return report_finished(cfg, module, datamodule, *resume)
    if resume is not None:
        log.info("resuming from %s (epoch %s, step %s)", resume[0], resume[1].get("epoch"), resume[1].get("global_step"))
    ckpt_path = None if resume is None else str(resume[0])
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values()]
    run_config = OmegaConf.to_container(cfg, resolve=True)
    callbacks.append(SaveRunConfig(run_config))
    # the trackers get the run config (model/lr, data/batch_size, ...), not Lightning's flat
    # copy of the module's and datamodule's arguments on top of it
    module._log_hyperparams = datamodule._log_hyperparams = False
    callbacks.append(LogRunConfig(run_params(run_config, module.net.arch, cfg_choices(cfg))))
    if cfg.get("seed") is not None:
        callbacks.append(BatchSeed(cfg.seed))  # a resumed run replays the uninterrupted one
    loggers = build_loggers(cfg, resuming=ckpt_path is not None)
    trainer = build_trainer(cfg, loggers, callbacks)
    if ckpt_path is None:  # every check passed: only now touch what is on disk
        move_old_run_aside(cfg)

    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=ckpt_path)
        metrics = final_metrics(trainer, "val/")
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        if cfg.get("test"):
            trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=False)
            metrics |= final_metrics(trainer, "test/")
    except NonFiniteError as err:  # one line for train.py, saying what is left to resume from
        raise NonFiniteError(f"{err}; {kept_checkpoint(cfg)}") from None
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
        if trainer.state.status != TrainerStatus.INTERRUPTED:
            raise
        raise Interrupted(f"interrupted at epoch {trainer.current_epoch}, step {trainer.global_step}; "
                          f"{kept_checkpoint(cfg)}; continue with: {continue_command(cfg)}") from None
    metrics["train_time_s"] = time.perf_counter() - started
    summary = config_summary(cfg, module) | {"status": "ok", "epochs": trainer.current_epoch, "checkpoint": best or None,
                                     "monitor": {"metric": cfg.optimized_metric, "mode": cfg.optimized_mode},
                                     "metrics": metrics}
    if trainer.is_global_zero:
        write_metrics(cfg, summary)
        hparams = OmegaConf.to_container(cfg.model, resolve=True) | {
            "seed": cfg.seed, "data": summary["data"], "arch": summary["arch"]}
        for logger in trainer.loggers:  # TensorBoard's hparams table; params + hp/* metrics elsewhere
            log_summary(logger, hparams, metrics, step=trainer.global_step)
        print(f"done: {cfg.run_name}: {shown(metrics)} ({metrics['train_time_s']:.0f} s) -> {cfg.paths.output_dir}")
    return monitored_value(cfg, metrics)


def report_finished(cfg: DictConfig, module, datamodule, path: Path, checkpoint: dict) -> float:
    """``resume=true`` on a run that has already finished: nothing to train. Report its
    metrics (from its own metrics.json, else by evaluating its checkpoints again), write
    them into this run's folder too, and return the monitored value, as the run did."""
    epochs = checkpoint.get("epoch", -1) + 1
    summary, source = finished_summary(cfg, checkpoint)
    if summary is None:  # e.g. killed after its last checkpoint, before it wrote metrics.json
        trainer = build(cfg.trainer, logger=False, callbacks=[], enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, devices=1, num_nodes=1, strategy="auto")
        trainer.validate(module, datamodule=datamodule, ckpt_path=str(path), verbose=False)
        metrics = final_metrics(trainer, "val/")
        best = path.with_name("best.ckpt") if path.with_name("best.ckpt").is_file() else path
        if cfg.get("test"):
            trainer.test(module, datamodule=datamodule, ckpt_path=str(best), verbose=False)
            metrics |= final_metrics(trainer, "test/")
        summary = config_summary(cfg, module) | {"status": "ok", "epochs": epochs, "checkpoint": str(best),
                                         "monitor": {"metric": cfg.optimized_metric, "mode": cfg.optimized_mode},
                                         "metrics": metrics}
        source = f"evaluated again from {best.name}"
    write_metrics(cfg, summary)
    print(f"done: {cfg.run_name} had already finished at epoch {epochs} of {cfg.trainer.max_epochs}: "
          f"{shown(summary['metrics'])} ({source}) -> {cfg.paths.output_dir}")
    return monitored_value(cfg, summary["metrics"])


def finished_summary(cfg: DictConfig, checkpoint: dict) -> tuple[dict | None, str]:
    """The finished run's own metrics.json (its folder is in the run config stored in the
    checkpoint), if it holds what this command would report."""
    folder = (checkpoint.get("swwae_config") or {}).get("paths", {}).get("output_dir")
    path = Path(folder) / "metrics.json" if folder else None
    try:
        summary = json.loads(path.read_text())
    except (AttributeError, OSError, ValueError):
        return None, ""
    metrics = summary.get("metrics") or {}
    wanted = [cfg.optimized_metric] + (["test/recon_mse"] if cfg.get("test") else [])
    if summary.get("status") != "ok" or any(not math.isfinite(metrics.get(k, math.nan)) for k in wanted):
        return None, ""
    return summary, f"from {path}"


def write_metrics(cfg: DictConfig, summary: dict) -> None:
    Path(cfg.paths.output_dir).mkdir(parents=True, exist_ok=True)
    (Path(cfg.paths.output_dir) / "metrics.json").write_text(json.dumps(summary, indent=2))


def shown(metrics: dict) -> str:
    return " ".join(f"{k}={metrics[k]:.4f}" for k in ("test/recon_mse", "test/acc") if k in metrics)


def monitored_value(cfg: DictConfig, metrics: dict) -> float:
    value = metrics.get(cfg.optimized_metric, math.nan)
    if not math.isfinite(value):
        raise ConfigError(f"{cfg.optimized_metric} was not computed (is it a metric this run logs?)")
    return value


def set_torch_defaults() -> None:
    """Quieter, faster defaults for in-memory tensors on CPU."""
    import warnings

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    # on Ctrl-C train.py says what is kept and how to continue, instead of Lightning's line
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: "Detected KeyboardInterrupt" not in record.getMessage())
    torch.set_float32_matmul_precision("high")
