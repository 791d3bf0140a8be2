"""A run that already finished (``resume`` on a run that trained as far as this config asks):
nothing to train. Report its metrics (from its own metrics.json when that still describes the
checkpoint's bytes, else by evaluating its checkpoints again, through the safe reader), write
them into this run's folder too, and return the monitored value, as the run did: a repeated or
requeued command succeeds."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from swwae.training.building import build_trainer
from swwae.training.reporting import (
    copy_test_outcomes,
    evaluate_best,
    monitored_value,
    run_summary,
    shown,
    write_test_outcomes,
)
from swwae.training.runs.folder import RunFolder


def report_finished(cfg: DictConfig, folder: RunFolder, module, datamodule, path: Path, checkpoint: dict) -> float:
    epochs = checkpoint.get("epoch", -1) + 1
    wanted = [cfg.optimized_metric] + (["test/recon_mse"] if cfg.get("test") else [])
    summary, source = folder.own_metrics(checkpoint, wanted)
    if summary is None:  # e.g. killed after its last checkpoint, before it wrote metrics.json
        trainer = build_trainer(
            cfg,
            [],
            [],
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            devices=1,
            num_nodes=1,
            strategy="auto",
        )
        trainer.validate(module, datamodule=datamodule, ckpt_path=str(path), verbose=False)
        best = path.with_name("best.ckpt") if path.with_name("best.ckpt").is_file() else path
        metrics = evaluate_best(trainer, module, datamodule, cfg, str(best))
        summary = run_summary(cfg, module.net.arch, epochs, str(best.absolute()), metrics)  # as a run names it
        source = f"evaluated again from {best.name}"
        write_test_outcomes(folder.output_dir, module)
    else:  # the outcomes the run wrote beside its metrics.json, if any (a sweep reads them per job)
        copy_test_outcomes(checkpoint, folder.output_dir)
    folder.write_metrics(summary)
    print(
        f"done: {cfg.run_name} had already finished: {epochs} of {cfg.trainer.max_epochs} epochs trained; "
        f"{shown(summary['metrics'], cfg.optimized_metric)} ({source}); nothing was retrained or logged again "
        f"(resume=false trains it again, under the loggers now asked for) -> {cfg.paths.output_dir}"
    )
    return monitored_value(cfg, summary["metrics"])
