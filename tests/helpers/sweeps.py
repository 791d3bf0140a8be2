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
