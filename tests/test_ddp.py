"""Scale-out (docs/architecture.md 4.7): ``trainer=ddp`` really trains with two CPU processes (gloo), and
each rank trains its own whole batches (``DealtBatches``, in the ``sampler=`` slot); a finished
DDP run is evaluated again on its devices."""

from __future__ import annotations

import json
import math

import pytest

from helpers.cli import run_cli
from helpers.config import DDP_QUICK, ROOT


@pytest.mark.slow
def ddp_run(tmp_path, folder: str, *overrides: str):
    return run_cli(
        ROOT / "train.py",
        *DDP_QUICK,
        "model.widths=[8]",
        "data.batch_size=32",
        "callbacks.progress_bar.refresh_rate=0",
        *overrides,
        f"hydra.run.dir={tmp_path / folder}",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.checkpoint_dir={tmp_path / 'checkpoints'}",
        cwd=tmp_path,
        timeout=600,
    )


def test_ddp_with_two_cpu_processes_trains_on_distinct_batches_and_is_evaluated_again_as_it_was(tmp_path):
    result = ddp_run(
        tmp_path,
        "run",
        "+callbacks.record_batches._target_=helpers.faults.RecordBatches",
        f"+callbacks.record_batches.out={tmp_path}",
    )
    assert result.returncode == 0, result.stderr[-3000:]

    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())  # rank 0 writes it, once
    for name in ("val/recon_mse", "test/recon_mse", "test/acc"):
        assert math.isfinite(metrics["metrics"][name]), name
    assert (tmp_path / "checkpoints" / metrics["run_name"] / "best.ckpt").is_file()

    ranks = [json.loads((tmp_path / f"rank{k}.json").read_text()) for k in (0, 1)]
    assert [r["world_size"] for r in ranks] == [2, 2]
    batches = [r["batches"] for r in ranks]
    assert [len(b) for b in batches] == [2, 2] and all(len(batch) == 32 for b in batches for batch in b)
    samples = [{s for batch in b for s in batch} for b in batches]
    assert len(samples[0]) == len(samples[1]) == 64  # whole batches, no repeats within a rank
    assert not samples[0] & samples[1]  # each rank gets its own batches

    # killed after its last checkpoint, before metrics.json: the same command evaluates it again on
    # the job's one Trainer, on its two processes, as the run itself was (the same repeated batch
    # where the test split does not divide), so its metrics are the run's own
    (tmp_path / "run" / "metrics.json").unlink()
    again = ddp_run(tmp_path, "again")
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [line for line in again.stdout.splitlines() if line.startswith("done: ")]
    assert len(lines) == 1 and "had already finished" in lines[0], again.stdout[-2000:]  # said once, by rank 0
    assert "(evaluated again from best.ckpt)" in lines[0]
    evaluated = json.loads((tmp_path / "again" / "metrics.json").read_text())["metrics"]
    for name in ("val/recon_mse", "test/recon_mse", "test/acc"):
        assert evaluated[name] == pytest.approx(metrics["metrics"][name], rel=1e-5), name
