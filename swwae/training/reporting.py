"""What a run reports: the metrics of its best checkpoint, the contents of ``metrics.json``
(written by the run's folder, ``swwae.training.runs``), the final metrics for every logger, the
``done:`` line, and the value returned to sweepers. A finished run's
report (``resume`` on a run that already trained as far as asked) is built by the same code."""

from __future__ import annotations

import math

import lightning as L
from omegaconf import DictConfig, OmegaConf

from swwae.errors import ConfigError
from swwae.training.building import choices
from swwae.training.loggers import log_summary

SHOWN = ("test/recon_mse", "test/acc")  # the done: line's metrics, or the monitor's when not tested

# helpers


def final_metrics(trainer: L.Trainer, prefix: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(prefix) and not k.endswith("loss")}


def evaluate_best(trainer: L.Trainer, module, datamodule, cfg: DictConfig, best: str | None) -> dict[str, float]:
    """The run's validation metrics as ``trainer`` holds them, and (``cfg.test``) the test
    metrics of ``best`` (loaded through the trainer's checkpoint IO: the safe reader)."""
    metrics = final_metrics(trainer, "val/")
    if cfg.get("test"):
        trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        metrics |= final_metrics(trainer, "test/")
    return metrics


def run_summary(cfg: DictConfig, arch: str, epochs: int, checkpoint: str | None, metrics: dict) -> dict:
    """The contents of ``metrics.json``: what tells runs apart in tables (model, data, seed,
    the network in the paper's notation, the run name), how it ended, and its metrics."""
    picked = choices()
    return {
        "run_name": cfg.run_name,
        "model": picked.get("model"),
        "data": picked.get("data"),
        "seed": cfg.seed,
        "arch": arch,
        "status": "ok",
        "epochs": epochs,
        "checkpoint": checkpoint,
        "monitor": {"metric": cfg.optimized_metric, "mode": cfg.optimized_mode},
        "metrics": metrics,
    }


def log_final(trainer: L.Trainer, cfg: DictConfig, summary: dict) -> None:
    """The final metrics to every logger (TensorBoard's hparams table, MLflow, W&B, CSV)."""
    hparams = OmegaConf.to_container(cfg.model, resolve=True) | {
        "seed": cfg.seed,
        "data": summary["data"],
        "arch": summary["arch"],
    }
    for logger in trainer.loggers:
        log_summary(logger, hparams, summary["metrics"], step=trainer.global_step)


def shown(metrics: dict, monitor: str) -> str:
    """The done: line's metrics: the test metrics, or the monitored one when the run was not
    tested; never an empty list."""
    keys = [k for k in SHOWN if k in metrics] or [k for k in (monitor,) if k in metrics]
    return " ".join(f"{k}={metrics[k]:.4f}" for k in keys) or "no metric was computed"


def monitored_value(cfg: DictConfig, metrics: dict) -> float:
    value = metrics.get(cfg.optimized_metric, math.nan)
    if not math.isfinite(value):
        raise ConfigError(f"{cfg.optimized_metric} was not computed (is it a metric this run logs?)")
    return value
