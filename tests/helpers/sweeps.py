"""Sweep folders as a finished ``train.py -m`` leaves them, written without training: a job
folder each, its overrides and its ``metrics.json``, for the summaries to read."""

from __future__ import annotations

import json


def fake_job(sweep_dir, num, overrides, metrics=None, **record):
    """Job ``num`` of ``sweep_dir``, run with ``overrides`` (the last one ``seed=N``), reporting
    ``metrics`` and ``record``'s other keys; without ``metrics``, a job that never finished."""
    folder = sweep_dir / f"{num}_job"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))
    if metrics is not None:
        record = {"run_name": f"run{num}", "seed": int(overrides[-1].split("=")[1]), "metrics": metrics} | record
        (folder / "metrics.json").write_text(json.dumps(record))
    return folder


LABELS = [i % 10 for i in range(20)]  # the test images of ``write_job``'s runs: 20, their labels


def write_job(
    sweep, number: int, model: str, seed: int, wrong: int, recon: float | None, lambda_rec=1.0, precision=None
):
    """A finished job as train.py leaves it, for the paired reports (``swwae where-report``):
    metrics.json, its saved config (with trainer.precision where given), and a test_outcomes.csv
    whose first ``wrong`` images are misclassified."""
    folder = sweep / f"{number}_{model}_seed{seed}"
    (folder / ".hydra").mkdir(parents=True)
    swept = f"- trainer.precision={precision}\n" if precision else ""
    (folder / ".hydra" / "overrides.yaml").write_text(f"- model={model}\n{swept}- seed={seed}\n")
    trainer = f"trainer:\n  precision: {precision}\n" if precision else ""
    (folder / ".hydra" / "config.yaml").write_text(f"model:\n  lambda_rec: {lambda_rec}\n{trainer}")
    predictions = [(y + 1) % 10 if i < wrong else y for i, y in enumerate(LABELS)]
    rows = ["index,label,prediction,recon_mse"]
    rows += [f"{i},{y},{p},0.01" for i, (y, p) in enumerate(zip(LABELS, predictions))]
    (folder / "test_outcomes.csv").write_text("\n".join(rows) + "\n")
    metrics = {"test/acc": 1 - wrong / len(LABELS)} | ({"test/recon_mse": recon} if recon is not None else {})
    record = {"run_name": folder.name, "model": model, "seed": seed, "status": "ok", "metrics": metrics}
    (folder / "metrics.json").write_text(json.dumps(record))
    return folder
