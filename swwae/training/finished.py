"""A run that already finished (``resume`` on a run that trained as far as this config asks):
nothing to train. Report its metrics (from its own metrics.json, else by evaluating its
checkpoints again, through the safe reader), write them into this run's folder too, and return
the monitored value, as the run did: a repeated or requeued command succeeds."""

from __future__ import annotations

import json
import math
from pathlib import Path

from omegaconf import DictConfig

from swwae.training.building import build_trainer
from swwae.training.reporting import evaluate_best, monitored_value, run_summary, shown, write_metrics


def own_summary(cfg: DictConfig, checkpoint: dict) -> tuple[dict | None, str]:
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


def report_finished(cfg: DictConfig, module, datamodule, path: Path, checkpoint: dict) -> float:
    epochs = checkpoint.get("epoch", -1) + 1
    summary, source = own_summary(cfg, checkpoint)
    if summary is None:  # e.g. killed after its last checkpoint, before it wrote metrics.json
        trainer = build_trainer(cfg, [], [], enable_checkpointing=False, enable_progress_bar=False,
                                enable_model_summary=False, devices=1, num_nodes=1, strategy="auto")
        trainer.validate(module, datamodule=datamodule, ckpt_path=str(path), verbose=False)
        best = path.with_name("best.ckpt") if path.with_name("best.ckpt").is_file() else path
        metrics = evaluate_best(trainer, module, datamodule, cfg, str(best))
        summary = run_summary(cfg, module.net.arch, epochs, str(best), metrics)
        source = f"evaluated again from {best.name}"
    write_metrics(cfg, summary)
    print(f"done: {cfg.run_name} had already finished at epoch {epochs} of {cfg.trainer.max_epochs}: "
          f"{shown(summary['metrics'], cfg.optimized_metric)} ({source}; resume=false trains it again) "
          f"-> {cfg.paths.output_dir}")
    return monitored_value(cfg, summary["metrics"])
