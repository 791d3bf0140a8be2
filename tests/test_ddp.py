"""Scale-out (docs/architecture.md 4.7): ``trainer=ddp`` really trains with two CPU processes (gloo), and
each rank trains its own whole batches (``DealtBatches``, in the ``sampler=`` slot); a finished
DDP run is evaluated again on its devices. The runs here start as ``python -m swwae train``: Lightning
starts the other process by running the command again (``python train.py``: tests/test_preemption.py;
the installed ``swwae`` script: tests/test_host_sync.py)."""

from __future__ import annotations

import csv
import json
import math
import signal
from pathlib import Path

import pytest
import torch

from helpers.cli import run_cli
from helpers.config import DDP_QUICK
from swwae.commands.evaluate import evaluate
from swwae.training.data import MNISTSampleDataModule
from swwae.training.term_means import ImageMean

# log_every_n_steps=1: the processes meet after every batch, so a signal stops the run at the batch
# it came in (under DDP a stop waits for the next such batch: tests/test_preemption.py)
TWO_EPOCHS = ["trainer.max_epochs=2", "trainer.deterministic=true", "trainer.log_every_n_steps=1"]
BATCH = 40  # the test split's 500 images: 13 batches, which two processes cannot share out whole


@pytest.mark.slow
def ddp_run(tmp_path, folder: str, *overrides: str, checkpoints: str = "checkpoints", timeout: float = 600):
    return run_cli(
        "-m",
        "swwae",
        "train",
        *DDP_QUICK,
        "model.widths=[8]",
        f"data.batch_size={BATCH}",
        "callbacks.progress_bar.refresh_rate=0",
        *overrides,
        f"hydra.run.dir={tmp_path / folder}",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.checkpoint_dir={tmp_path / checkpoints}",
        cwd=tmp_path,
        timeout=timeout,
    )


def recording(folder: Path) -> list[str]:
    folder.mkdir()
    return [
        "+callbacks.record_batches._target_=helpers.faults.RecordBatches",
        f"+callbacks.record_batches.out={folder}",
    ]


def batches_seen(folder: Path) -> list[list]:
    return [json.loads((folder / f"rank{k}.json").read_text())["batches"] for k in (0, 1)]


def test_the_evaluation_loss_over_processes_is_its_mean_over_their_images():
    """The processes' sums reduced as sums (here a process and a stand-in for another, which
    evaluated 3 images of loss 2): Lightning's mean of a logged value averages the processes'
    image counts as integers, and came out 10% off for 11 images on two processes."""
    other = ImageMean()
    other.update(torch.tensor(2.0), 3)

    def with_the_other(metric: ImageMean) -> ImageMean:
        states = lambda m: {"total": m.total, "images": m.images}  # noqa: E731
        gather = lambda t, group=None: [t, next(states(other)[n] for n, v in states(metric).items() if v is t)]  # noqa: E731
        metric.dist_sync_fn, metric.distributed_available_fn = gather, lambda: True
        return metric

    this = with_the_other(ImageMean())
    this.update(torch.tensor(1.0), 8)
    assert this.compute().item() == pytest.approx((8 * 1.0 + 3 * 2.0) / 11)
    with pytest.warns(UserWarning, match="called before the ``update``"):  # torchmetrics' note, and right
        assert with_the_other(ImageMean()).compute().item() == 2.0  # a process without images: the other's mean


def test_test_outcomes_are_kept_whole_where_each_process_tested_the_whole_split_and_dropped_where_unknown():
    """``use_distributed_sampler=false``: every process tested the whole split, its rows are all of
    them; another sampler's share (a data module of one's own): which images are whose is unknown,
    so no test_outcomes.csv rather than a wrong one."""
    from types import SimpleNamespace

    from torch.utils.data import DataLoader, DistributedSampler

    from swwae.training.module import SWWAEModule

    module = SWWAEModule(widths=[4])
    module.test_outcomes = rows = [torch.zeros(5, 3, dtype=torch.float64)]
    module.trainer = SimpleNamespace(test_dataloaders=DataLoader(range(5)))
    assert module.every_process_outcomes() is rows
    shared = DataLoader(range(5), sampler=DistributedSampler(range(5), num_replicas=2, rank=0))
    module.trainer = SimpleNamespace(test_dataloaders=shared)
    assert module.every_process_outcomes() == []


@pytest.mark.slow
def test_ddp_with_two_cpu_processes_trains_on_distinct_batches_resumes_exactly_and_is_evaluated_again(tmp_path):
    result = ddp_run(tmp_path, "run", *TWO_EPOCHS, *recording(tmp_path / "seen"))
    assert result.returncode == 0, result.stderr[-3000:]

    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())  # rank 0 writes it, once
    for name in ("val/recon_mse", "test/recon_mse", "test/acc"):
        assert math.isfinite(metrics["metrics"][name]), name
    best = tmp_path / "checkpoints" / metrics["run_name"] / "best.ckpt"
    # the two processes' test metrics are the split's, every image once (EvaluationShare; Lightning's
    # sampler repeated a batch here), as one process evaluates the checkpoint
    alone = evaluate(best, "test", out=tmp_path / "alone.png")
    for name in ("test/recon_mse", "test/acc"):
        assert metrics["metrics"][name] == pytest.approx(alone[name], rel=1e-5), name
    # and every test image's outcome, gathered from both, in the split's order (the paired tests')
    with (tmp_path / "run" / "test_outcomes.csv").open() as f:
        rows = list(csv.DictReader(f))
    split = MNISTSampleDataModule(seed=0)
    split.setup()
    assert [int(r["index"]) for r in rows] == list(range(len(split.test_y)))
    assert [int(r["label"]) for r in rows] == split.test_y.tolist()
    right = sum(r["label"] == r["prediction"] for r in rows) / len(rows)
    assert right == pytest.approx(alone["test/acc"], abs=1e-6)
    assert sum(float(r["recon_mse"]) for r in rows) / len(rows) == pytest.approx(alone["test/recon_mse"], rel=1e-4)

    assert [json.loads((tmp_path / "seen" / f"rank{k}.json").read_text())["world_size"] for k in (0, 1)] == [2, 2]
    batches = batches_seen(tmp_path / "seen")
    assert [len(b) for b in batches] == [4, 4] and all(len(batch) == BATCH for b in batches for batch in b)
    for epoch in (0, 1):
        samples = [{s for batch in b[2 * epoch : 2 * epoch + 2] for s in batch} for b in batches]
        assert len(samples[0]) == len(samples[1]) == 2 * BATCH  # whole batches, no repeats within a rank
        assert not samples[0] & samples[1]  # each rank gets its own batches

    # the same run (its own checkpoint folder) stopped by SIGTERM after a batch of epoch 2 (each
    # process signals itself as the batch starts; under Lightning's own SIGTERM handler the two
    # waited for each other forever: swwae.training.preemption), then continued by the same
    # command: each process goes on with its own batches, and the run ends with the weights of the
    # run never stopped, bit for bit
    stopped = ["+callbacks.stop._target_=helpers.faults.SignalAt", "+callbacks.stop.epoch=1", "+callbacks.stop.batch=0"]
    stopped += ["+callbacks.stop.signum=SIGTERM", *recording(tmp_path / "before")]
    first = ddp_run(tmp_path, "stopped", *TWO_EPOCHS, *stopped, checkpoints="checkpoints2", timeout=300)
    assert first.returncode == 128 + signal.SIGTERM, first.stderr[-3000:]
    then = ddp_run(tmp_path, "continued", *TWO_EPOCHS, *recording(tmp_path / "after"), checkpoints="checkpoints2")
    assert then.returncode == 0, then.stderr[-3000:]
    for rank, (before, after) in enumerate(zip(batches_seen(tmp_path / "before"), batches_seen(tmp_path / "after"))):
        assert before + after == batches[rank]
    run_name = metrics["run_name"]
    whole = torch.load(tmp_path / "checkpoints" / run_name / "last.ckpt", weights_only=True)["state_dict"]
    resumed = torch.load(tmp_path / "checkpoints2" / run_name / "last.ckpt", weights_only=True)["state_dict"]
    assert whole.keys() == resumed.keys() and all(torch.equal(whole[k], resumed[k]) for k in whole)

    # killed after its last checkpoint, before metrics.json: the same command evaluates it again on
    # the job's one Trainer, on its two processes, as the run itself was, so its metrics are the run's own
    (tmp_path / "run" / "metrics.json").unlink()
    again = ddp_run(tmp_path, "again", *TWO_EPOCHS)
    assert again.returncode == 0, again.stderr[-3000:]
    lines = [line for line in again.stdout.splitlines() if line.startswith("done: ")]
    assert len(lines) == 1 and "had already finished" in lines[0], again.stdout[-2000:]  # said once, by rank 0
    assert "(evaluated again from best.ckpt)" in lines[0]
    evaluated = json.loads((tmp_path / "again" / "metrics.json").read_text())["metrics"]
    for name in ("val/recon_mse", "test/recon_mse", "test/acc"):
        assert evaluated[name] == pytest.approx(metrics["metrics"][name], rel=1e-5), name


@pytest.mark.slow
def test_a_sweep_of_ddp_runs_starts_each_jobs_other_process_for_that_job_alone(tmp_path):
    """``-m`` with DDP: Lightning starts each job's second process by running the command again;
    given the sweep's command line, each of them ran a sweep of its own (jobs in folders of their
    own, into a process group that was not theirs), and the second job joined the first one's
    group, whose other process had ended. Each job's other process runs that job, in its folder and
    its run (whose name the sweep tags: ``..._lr0.001_seed0``)."""
    rates = ("0.001", "0.002")
    for lr in rates:
        (tmp_path / "seen" / lr).mkdir(parents=True)
    result = run_cli(
        *("-m", "swwae", "train", "-m", *DDP_QUICK, "model.widths=[4]", "data.batch_size=16"),
        f"model.lr={','.join(rates)}",
        "+callbacks.record_batches._target_=helpers.faults.RecordBatches",
        f"+callbacks.record_batches.out={tmp_path / 'seen'}/${{model.lr}}",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.checkpoint_dir={tmp_path / 'checkpoints'}",
        cwd=tmp_path,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (sweep,) = (tmp_path / "multirun" / "quick").iterdir()  # one sweep: the other processes started none
    assert "2 jobs, 2 configs, 0 failed" in (sweep / "summary.md").read_text()
    for lr in rates:
        seen = [json.loads((tmp_path / "seen" / lr / f"rank{k}.json").read_text()) for k in (0, 1)]
        assert [s["world_size"] for s in seen] == [2, 2]
        assert not {x for b in seen[0]["batches"] for x in b} & {x for b in seen[1]["batches"] for x in b}
    runs = [f"swwae_hard_mnist_sample_lr{lr}_seed0" for lr in rates]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith(".")) == runs
    jobs = sorted(p.name for p in sweep.iterdir() if p.is_dir())
    assert jobs == [f"{i}_{run}" for i, run in enumerate(runs)]
    for job in jobs:  # the other process's Hydra folder is its job's, and its empty log is gone
        assert sorted(p.name for p in (sweep / job).iterdir()) == [".hydra", "metrics.json", "test_outcomes.csv"]
    assert not (tmp_path / "outputs").exists()
