"""Pre-emption (docs/architecture.md 5): SIGTERM and SIGUSR1 save a resumable checkpoint into the
run's own folder and end the run in one line; the same command continues it by itself
(resume=auto), on SLURM after requeueing the job, bit-identical to a run never stopped."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.cli import last_error_line, train_cli, train_here
from swwae.training.run import preempted_line

# dropout draws from the global generator; three epochs of three batches
REPRO = ["model.widths=[8]", "model.dropout=0.2", "trainer.max_epochs=3", "trainer.deterministic=true", "seed=3"]
RUN = "swwae_hard_mnist_sample_seed3"


def metrics_of(tmp: Path, name: str) -> dict:
    summary = json.loads((tmp / "outputs" / name / "metrics.json").read_text())
    summary["metrics"].pop("train_time_s")
    summary.pop("checkpoint")
    summary.pop("checkpoint_sha256")  # the file's bytes hold its run's own paths: the weights are compared
    return summary


def weights(folder: Path) -> dict:
    return torch.load(folder / "last.ckpt", weights_only=True)["state_dict"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("uninterrupted")
    result = train_here(tmp, *REPRO, name="whole")
    assert result.returncode == 0, result.stderr[-2000:]
    return metrics_of(tmp, "whole"), weights(tmp / "checkpoints" / RUN), train_losses(result.stdout)


def train_losses(stdout: str) -> dict[str, str]:
    """The epoch lines' training loss, by epoch."""
    return dict(re.findall(r"^epoch (\d)/\d+: train/loss=(\S+)", stdout, re.MULTILINE))


def fake_scontrol(tmp: Path) -> Path:
    """An ``scontrol`` on PATH that records how it was called (no cluster here)."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    script = bin_dir / "scontrol"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp / "scontrol.log"}\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return bin_dir


SLURM = {
    "SLURM_JOB_ID": "4242",
    "SLURM_NTASKS": "1",
    "SLURM_NTASKS_PER_NODE": "1",
    "SLURM_NNODES": "1",
    "SLURM_NODEID": "0",
    "SLURM_PROCID": "0",
    "SLURM_LOCALID": "0",
    "SLURM_JOB_NAME": "swwae",
    "SLURM_NODELIST": "localhost",
}


@pytest.mark.slow
@pytest.mark.parametrize("signum", ["SIGTERM", "SIGUSR1"])
def test_a_signal_saves_mid_epoch_and_the_same_command_continues_bit_identically(tmp_path, signum, uninterrupted):
    started = time.perf_counter()
    stopped = train_cli(
        tmp_path,
        *REPRO,
        "+callbacks.stop._target_=helpers.faults.SignalAt",
        "+callbacks.stop.epoch=1",
        "+callbacks.stop.batch=1",
        f"+callbacks.stop.signum={signum}",
        name="stopped",
    )
    assert stopped.returncode == 128 + getattr(signal, signum), stopped.stderr[-2000:]
    folder = tmp_path / "checkpoints" / RUN
    assert last_error_line(stopped) == (
        f"pre-empted by {signum}; saved {folder.relative_to(tmp_path)}/last.ckpt (in epoch 2, after 2 batches; "
        "step 5); the same command continues it (resume=auto)"
    )
    assert "Traceback" not in stopped.stderr
    saved = torch.load(folder / "last.ckpt", weights_only=True)
    position = saved["swwae_preempted"]  # with the epoch's training sums so far, of the 2 batches
    assert saved["global_step"] == 5 and {k: position[k] for k in ("epoch", "batches_done")} == {
        "epoch": 1,
        "batches_done": 2,
    }
    assert "loss" in position["train_means"]["names"] and position["train_means"]["count"] > 0
    clock = saved["callbacks"]["RunClock"]  # the time so far, carried to the process that continues
    assert clock["epoch"] == 1 and 0 < clock["epoch_seconds"] < clock["seconds"]

    again = train_here(tmp_path, *REPRO, name="again")  # the same command, no resume=true
    wall = time.perf_counter() - started
    assert again.returncode == 0, again.stderr[-2000:]
    times = [float(t) for t in re.findall(r"^epoch \d/3: .* \(([0-9.]+) s\)$", again.stdout, re.MULTILINE)]
    assert len(times) == 2 and times[0] > clock["epoch_seconds"] and sum(times) < wall  # epoch 2 counts both shares
    train_time = json.loads((tmp_path / "outputs" / "again" / "metrics.json").read_text())["metrics"]["train_time_s"]
    assert clock["seconds"] < train_time < wall
    assert "resume=auto: continuing this run from" in again.stdout + again.stderr
    expected, reference, losses = uninterrupted
    assert metrics_of(tmp_path, "again") == expected  # every val and test metric, bit for bit
    assert train_losses(again.stdout)["2"] == losses["2"]  # the whole epoch's mean, not the part after the restart
    state = weights(folder)
    assert state.keys() == reference.keys() and all(torch.equal(state[k], reference[k]) for k in reference)


@pytest.mark.slow
@pytest.mark.parametrize(
    "resume, requeue, after",
    [
        ("auto", None, "the same command continues it (resume=auto)"),
        ("true", "requeued SLURM job 7", "requeued SLURM job 7: it continues by itself"),
        ("false", None, "continue with: python train.py seed=1 resume=true"),  # the same command starts over
        ("false", "requeued SLURM job 7", "requeued SLURM job 7 (resume=false: it starts over); continue with: "),
        ("false", "requeueing SLURM job 7 failed (denied)", "requeueing SLURM job 7 failed (denied); continue with: "),
    ],
)
def test_the_pre_emption_line_says_how_the_run_goes_on(monkeypatch, resume, requeue, after):
    monkeypatch.setattr("swwae.training.run.this_command", lambda name: "python train.py")
    saved = {"path": "checkpoints/run/last.ckpt", "epoch": 1, "step": 5, "batches_done": 2, "requeue": requeue}
    preemption = SimpleNamespace(received=signal.SIGTERM, saved=saved)
    line = preempted_line(None, preemption, resume, ("seed=1", "resume=false"))
    assert line.startswith(
        "pre-empted by SIGTERM; saved checkpoints/run/last.ckpt (in epoch 2, after 2 batches; step 5); "
    )
    assert after in line


def test_on_slurm_sigusr1_requeues_the_job_and_the_requeued_job_continues_by_itself(tmp_path, uninterrupted):
    env = SLURM | {"PATH": f"{fake_scontrol(tmp_path)}{os.pathsep}{os.environ['PATH']}"}
    stopped = train_cli(
        tmp_path,
        *REPRO,
        "+callbacks.stop._target_=helpers.faults.SignalAt",
        "+callbacks.stop.epoch=2",
        "+callbacks.stop.batch=0",
        "+callbacks.stop.signum=SIGUSR1",
        name="job",
        env=env,
    )
    assert stopped.returncode == 128 + signal.SIGUSR1, stopped.stderr[-2000:]
    assert last_error_line(stopped).endswith("; requeued SLURM job 4242: it continues by itself")
    assert (tmp_path / "scontrol.log").read_text().split() == ["requeue", "4242"]
    assert not list(tmp_path.rglob("hpc_ckpt_*.ckpt"))  # not Lightning's file in the output folder

    # the requeued job: the same command and environment, a new (timestamped) output folder
    requeued = train_here(tmp_path, *REPRO, name="job-requeued", env=env | {"SLURM_RESTART_COUNT": "1"})
    assert requeued.returncode == 0, requeued.stderr[-2000:]
    expected, reference, _ = uninterrupted
    assert metrics_of(tmp_path, "job-requeued") == expected
    state = weights(tmp_path / "checkpoints" / RUN)
    assert all(torch.equal(state[k], reference[k]) for k in reference)


@pytest.mark.parametrize(
    "world_size, accumulate, stops_after", [(1, 1, [1]), (2, 1, [2]), (1, 4, [3]), (2, 4, [3]), (1, 3, [2])]
)
def test_under_ddp_the_processes_agree_to_stop_only_after_batches_where_they_meet_anyway(
    tmp_path, monkeypatch, world_size, accumulate, stops_after
):
    """Agreeing to stop is a read back from every GPU: under DDP the processes agree after the
    batches where the host reads back anyway (every ``log_every_n_steps``, an epoch's last), so a
    signal during batch 1 of 7 stops the run after batch 2 (log_every_n_steps=3), not after
    every batch's read back; a process alone stops after the batch the signal came in. With
    accumulate_grad_batches, after the batch whose optimiser step takes the gradients summed so
    far (a checkpoint holds none: the run continued from batch 2 of 4 stepped without them)."""
    from types import SimpleNamespace

    from swwae.training import preemption

    asked = []

    def reduce(noted, reduce_op):
        asked.append(batch_idx)
        return noted

    saved, order = [], []
    trainer = SimpleNamespace(
        world_size=world_size,
        accumulate_grad_batches=accumulate,
        log_every_n_steps=3,
        num_training_batches=7,
        current_epoch=0,
        global_step=0,
        is_global_zero=True,
        strategy=SimpleNamespace(
            reduce=reduce, root_device=torch.device("cpu"), barrier=lambda name=None: order.append("barrier")
        ),
        save_checkpoint=lambda path: saved.append(batch_idx),
    )
    monkeypatch.setattr(preemption, "wait_for_saves", lambda trainer: order.append("saved"))
    callback = preemption.Preemption(tmp_path)
    for batch_idx in range(7):
        if batch_idx == 1:
            callback._note(signal.SIGTERM, None)
        try:
            callback.on_train_batch_end(trainer, None, None, None, batch_idx)
        except preemption.PreemptionSaved:
            break
    assert saved == stops_after and callback.saved["batches_done"] == stops_after[0] + 1
    assert asked == ([] if world_size == 1 else [2])  # not after batches 0 and 1
    # every process waits until the checkpoint is on disk: one that ended first had Lightning's DDP
    # launcher SIGKILL rank 0 while its background writer was saving
    assert order == ["saved", "barrier"]


def test_under_ddp_a_signal_to_one_process_stops_every_process_each_saying_which(tmp_path, monkeypatch):
    """``kill -USR1 <pid>`` of a DDP run's command reaches its first process alone: the others
    agreed to stop with it, then each failed to name the signal it had not noted (a traceback,
    ``ValueError: None is not a valid Signals``). They agree on the signal too (the highest noted:
    SIGTERM over SIGUSR1), and every process saves, stops and says so as the first does."""
    from swwae.training import preemption

    noted_by_another = signal.SIGUSR1

    def reduce(noted, reduce_op):  # this process noted nothing; the other one SIGUSR1
        assert reduce_op == "max"
        return torch.maximum(noted, torch.tensor(int(noted_by_another)))

    trainer = SimpleNamespace(
        world_size=2,
        accumulate_grad_batches=1,
        log_every_n_steps=1,
        num_training_batches=7,
        current_epoch=0,
        global_step=3,
        is_global_zero=False,
        strategy=SimpleNamespace(
            reduce=reduce,
            reduce_boolean_decision=lambda stop, all=True: stop or bool(noted_by_another),  # (agreeing to stop alone)
            root_device=torch.device("cpu"),
            barrier=lambda name=None: None,
        ),
        save_checkpoint=lambda path: None,
    )
    monkeypatch.setattr(preemption, "wait_for_saves", lambda trainer: None)
    callback = preemption.Preemption(tmp_path)
    with pytest.raises(preemption.PreemptionSaved):
        callback.on_train_batch_end(trainer, None, None, None, 2)
    assert callback.received == signal.SIGUSR1
    line = preempted_line(None, callback)
    assert line.startswith(
        f"pre-empted by SIGUSR1; saved {tmp_path / 'last.ckpt'} (in epoch 1, after 3 batches; step 3)"
    )
    noted_by_another = 0  # none noted anywhere: every process goes on
    callback = preemption.Preemption(tmp_path)
    callback.on_train_batch_end(trainer, None, None, None, 2)
    assert callback.received is None


@pytest.mark.parametrize("owns_run", [True, False])  # rank 0 of a DDP run (or a process alone); another rank
def test_under_ddp_the_pre_emption_line_is_said_once_by_the_runs_owner(tmp_path, monkeypatch, capsys, owns_run):
    """Every process of a DDP run stops at the agreed batch with the same line: each said it (two
    lines for one run of two processes). Rank 0 says it; every process exits 128 + the signal."""
    from omegaconf import OmegaConf

    from swwae.commands import train as command
    from swwae.training import process, run
    from swwae.training.composing import Launch
    from swwae.training.preemption import PreemptionSaved

    def fit(*args, **kwargs):
        raise PreemptionSaved("SIGUSR1")

    saved = {"path": "checkpoints/run/last.ckpt", "epoch": 1, "step": 5, "batches_done": 2, "requeue": None}
    preemption = SimpleNamespace(received=signal.SIGUSR1, saved=saved)
    job = SimpleNamespace(trainer=SimpleNamespace(fit=fit), module=None, datamodule=None, preemption=preemption)
    job.owns_run = owns_run
    spec = SimpleNamespace(resume="auto", test=True, verbose=False)
    monkeypatch.setattr(command, "check_config", lambda cfg: spec)
    monkeypatch.setattr(process, "set_torch_defaults", lambda verbose: None)
    monkeypatch.setattr(run, "train", lambda cfg, this, spec: run.fit_and_test(None, job, None, spec, ()))
    with pytest.raises(SystemExit) as stopped:
        command.run(OmegaConf.create({}), Launch(output_dir=str(tmp_path)))
    assert stopped.value.code == 128 + signal.SIGUSR1
    said = capsys.readouterr().err
    assert said.count("pre-empted by SIGUSR1; saved checkpoints/run/last.ckpt") == int(owns_run), said


def test_a_failed_pre_emption_save_still_meets_the_other_processes(tmp_path, monkeypatch):
    """Rank 0's save failing (a full disk) must not leave the others waiting for it under DDP."""
    from types import SimpleNamespace

    from swwae.errors import DiskError
    from swwae.training import preemption

    met = []
    trainer = SimpleNamespace(
        world_size=1,
        accumulate_grad_batches=1,
        current_epoch=0,
        strategy=SimpleNamespace(barrier=lambda name=None: met.append(name)),
        save_checkpoint=lambda path: None,
    )

    def full_disk(trainer):
        raise DiskError("no space left")

    monkeypatch.setattr(preemption, "wait_for_saves", full_disk)
    callback = preemption.Preemption(tmp_path)
    callback._note(signal.SIGTERM, None)
    with pytest.raises(DiskError):
        callback.on_train_batch_end(trainer, None, None, None, 0)
    assert len(met) == 1
