"""Scale-out (docs/architecture.md 4.7): ``trainer=ddp`` really trains with two CPU processes (gloo), and
the batch sampler in the ``sampler=`` slot makes Lightning deal distinct batches to the
ranks (its DistributedSamplerWrapper)."""

from __future__ import annotations

import hashlib
import json
import math
import os

import lightning as L

from conftest import QUICK, ROOT, run_cli


class RecordBatches(L.Callback):
    """Test probe, loaded by the DDP processes: a fingerprint of every training sample each
    rank sees, written to ``<out>/rank<k>.json`` at the end of training."""

    def __init__(self, out: str):
        self.out, self.seen = out, []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        x = batch[0].detach().cpu()
        self.seen.append([hashlib.sha1(sample.numpy().tobytes()).hexdigest() for sample in x])

    def on_train_end(self, trainer, module):
        path = os.path.join(self.out, f"rank{trainer.global_rank}.json")
        with open(path, "w") as f:
            json.dump({"world_size": trainer.world_size, "batches": self.seen}, f)


def test_ddp_with_two_cpu_processes_trains_on_distinct_batches(tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT / "tests"), os.environ.get("PYTHONPATH", "")]))
    result = run_cli(
        ROOT / "train.py", "trainer=ddp", "trainer.accelerator=cpu", "trainer.devices=2",
        *QUICK, "trainer.limit_train_batches=2", "trainer.limit_val_batches=1",
        "model.widths=[8]", "data.batch_size=32", "callbacks.progress_bar.refresh_rate=0",
        "+callbacks.record_batches._target_=test_ddp.RecordBatches", f"+callbacks.record_batches.out={tmp_path}",
        f"hydra.run.dir={tmp_path / 'run'}", f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.checkpoint_dir={tmp_path / 'checkpoints'}",
        cwd=tmp_path, timeout=600,
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
