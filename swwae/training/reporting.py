"""What a run reports: the metrics of its best checkpoint, the contents of ``metrics.json``
(written by the run's folder, ``swwae.training.runs``), the final metrics for every logger, the
``done:`` line, and the value returned to sweepers. A finished run's
report (``resume`` on a run that already trained as far as asked) is built by the same code."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import lightning as L
import torch
from omegaconf import DictConfig, OmegaConf

from swwae.errors import ConfigError
from swwae.training.building import choices
from swwae.training.folders import write_failed
from swwae.training.loggers import log_summary

SHOWN = ("test/recon_mse", "test/acc")  # the done: line's metrics, or the monitor's when not tested
MAX_OUTCOMES_BYTES = 16 * 2**20  # test_outcomes.csv of a test split of ~300,000 images

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


def write_test_outcomes(folder: Path, module) -> Path | None:
    """``<output dir>/test_outcomes.csv``: one row per test image, in the split's order (label,
    predicted class or -1 without a classifier, reconstruction MSE), so that two runs tested
    on the same images can be compared image by image (McNemar's test) without reading the
    test split again. Written by a run alone in its process (a DDP rank sees a shard)."""
    if not module.test_outcomes or module.trainer.world_size != 1:
        return None
    rows = torch.cat(module.test_outcomes).tolist()
    path = folder / "test_outcomes.csv"
    try:
        with path.open("w", newline="") as f:
            f.write("index,label,prediction,recon_mse\n")
            f.writelines(f"{i},{int(y)},{int(p)},{mse:.6g}\n" for i, (y, p, mse) in enumerate(rows))
    except OSError as err:
        raise write_failed(path, err) from None
    return path


def copy_test_outcomes(checkpoint: dict, folder: Path) -> Path | None:
    """A finished run reported again into another folder (a sweep repeated) brings its
    ``test_outcomes.csv`` along, from the output folder its checkpoint names: a regular file of
    bounded size, copied as bytes, never parsed here."""
    stored = checkpoint.get("swwae_config")
    for key in ("paths", "output_dir"):
        stored = stored.get(key) if isinstance(stored, dict) else None
    if not isinstance(stored, str):
        return None
    source, target = Path(stored) / "test_outcomes.csv", folder / "test_outcomes.csv"
    try:
        if not source.is_file() or source.stat().st_size > MAX_OUTCOMES_BYTES or source.resolve() == target.resolve():
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as err:
        raise write_failed(target, err) from None
    return target


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
