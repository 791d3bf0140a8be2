"""Pre-emption that resumes itself: SIGTERM and SIGUSR1 save a resumable checkpoint into the
run's own folder, then the run ends with one line.

Cluster schedulers warn a job before they stop it: SLURM sends SIGUSR1 ahead of its time limit
when asked (``#SBATCH --signal=USR1@90``) and SIGTERM when it pre-empts or cancels. Lightning's
own SLURM handler writes ``hpc_ckpt_<n>.ckpt`` into the Hydra output folder, which a requeued job
(a new, timestamped output folder) never finds, or, with a fixed folder, resumes past the
project's config checks. Here the handler only notes the signal; at the end of the training batch
in progress (with ``accumulate_grad_batches``, of the batch whose optimiser step closes its
window: gradients are in no checkpoint), ``Preemption`` saves ``checkpoints/<run>/last.ckpt``
(atomic, checksummed, marked with how far into its epoch it is), requeues the job on SLURM (``scontrol requeue``, as
Lightning's auto-requeue does, on SLURM's requeue signal SIGUSR1), and stops the run. The same
command then continues it (``resume=auto``, the default): the data order and every random draw
are functions of (seed, epoch, batch), so the sampler skips the batches already trained and the
run ends bit-identical to one never stopped (with ``trainer.deterministic=true``).
"""

from __future__ import annotations

import logging
import os
import re
import signal
import subprocess
from pathlib import Path

import lightning as L
import torch
from lightning.fabric.plugins.environments import SLURMEnvironment

from swwae.checkpoint_file import POSITION_KEY
from swwae.training.checkpoints import wait_for_saves
from swwae.training.module import every_process_sum, processes_meet_after

log = logging.getLogger(__name__)

SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
REQUEUE_SIGNAL = signal.SIGUSR1  # SLURMEnvironment's default requeue signal


class PreemptionSaved(BaseException):
    """Raised through Lightning after the pre-emption checkpoint is saved (a BaseException: no
    ``except Exception`` on the way swallows it; not a KeyboardInterrupt, which Lightning turns
    into ``sys.exit(1)``). The job turns it into ``swwae.errors.Preempted``."""


def slurm_job_id() -> str | None:
    array = os.environ.get("SLURM_ARRAY_JOB_ID")
    return f"{array}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array else os.environ.get("SLURM_JOB_ID")


def requeue_slurm_job() -> str:
    """``scontrol requeue`` this job; what happened, in words."""
    job = slurm_job_id()
    if not job or not re.fullmatch(r"[0-9_]+", job):
        return "not requeued (no SLURM job id)"
    try:
        result = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"requeueing SLURM job {job} failed ({err})"
    if result.returncode != 0:
        return f"requeueing SLURM job {job} failed ({result.stderr.strip() or result.returncode})"
    return f"requeued SLURM job {job}"


def mid_accumulation(trainer: L.Trainer, batch_idx: int) -> bool:
    """Whether training batch ``batch_idx`` added its gradients to a sum that no optimiser step
    has taken yet (``accumulate_grad_batches``; Lightning steps after every n-th batch of an
    epoch and after its last): a checkpoint holds no gradients, so a run saved there and
    continued would step without them. The run stops at the end of the window instead."""
    done = batch_idx + 1
    return done % trainer.accumulate_grad_batches != 0 and done != trainer.num_training_batches


def agreed_signal(trainer: L.Trainer, received: int | None) -> int | None:
    """The signal that every DDP process stops on, agreed at the same batch end: one that any of
    them noted (SIGTERM where one noted SIGTERM and another SIGUSR1), or None. A signal sent to one
    process alone (``kill`` of the command's own, Lightning's first) stops them all; the others
    had stopped with it and, having noted none, failed to say which in a traceback."""
    noted = torch.tensor(int(received or 0), device=trainer.strategy.root_device)
    return int(trainer.strategy.reduce(noted, reduce_op="max")) or None


class Preemption(L.Callback):
    """Notes SIGTERM and SIGUSR1 while training and, at the end of the batch in progress, saves
    a resumable checkpoint into ``folder`` and stops the run (see the module docstring)."""

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.received: int | None = None
        self.saved: dict | None = None  # what was saved: path, epoch, step, batches done, requeue
        self._position: dict | None = None
        self._stopping = False  # a signal noted (under DDP: by any process) and agreed on
        self._previous: dict[int, object] = {}

    # the handlers: installed before trainer.fit, so that Lightning keeps them (it adds its SLURM
    # SIGUSR1 handler only where none is set, and calls ours after its own on SIGTERM)

    def install(self) -> Preemption:
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._note)
        return self

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _note(self, signum, frame) -> None:
        self.received = signum

    # the hooks

    def on_train_start(self, trainer: L.Trainer, module) -> None:
        """SIGTERM back to ours while training: Lightning has put its own handler in front of it
        (after ``on_fit_start``), which under DDP (from Lightning 2.5.2 on) waits inside itself for
        the other processes (a broadcast), while they wait for this one in the training step's
        collectives (pytorch-lightning issue 20806). Ours only notes the signal; every process
        stops at the same batch end (below): under DDP the first where they meet anyway
        (``processes_meet_after``, every ``log_every_n_steps`` batches), since agreeing is a read
        back from the GPU that would otherwise stall every step. Lightning's teardown puts ours back, ``restore`` the
        one before it."""
        signal.signal(signal.SIGTERM, self._note)

    def on_train_batch_end(self, trainer: L.Trainer, module, outputs, batch, batch_idx: int) -> None:
        if not self._stopping:
            signum = self.received
            if trainer.world_size > 1:  # every rank stops at the same batch, or the collectives hang:
                if not processes_meet_after(trainer, batch_idx):  # they agree where they read back anyway
                    return
                signum = agreed_signal(trainer, signum)
            if signum is None:
                return
            self.received = signum  # under DDP the signal of any process (a kill of the command's own)
            self._stopping = True  # agreed: every rank stops at the same batch below
        if mid_accumulation(trainer, batch_idx):
            return
        signum = self.received
        self._position = {"epoch": trainer.current_epoch, "batches_done": batch_idx + 1}
        means = getattr(module, "term_means", None)  # the epoch's training sums so far, every process's
        if means is not None and (totals := means.totals(every_process_sum(trainer))) is not None:
            self._position["train_means"] = totals
        path = self.folder / "last.ckpt"
        trainer.save_checkpoint(path)
        try:
            wait_for_saves(trainer)  # on disk before the job is requeued or the process ends
        finally:  # under DDP the others wait for it too (a failed save included): a process that
            # ended first would have Lightning's launcher SIGKILL rank 0, whose writer may still be saving
            trainer.strategy.barrier("pre-emption checkpoint saved")
        requeue = (
            requeue_slurm_job()
            if signum == REQUEUE_SIGNAL and SLURMEnvironment.detect() and trainer.is_global_zero
            else None
        )
        self.saved = {
            "path": path,
            "epoch": trainer.current_epoch,
            "step": trainer.global_step,
            "batches_done": batch_idx + 1,
            "requeue": requeue,
        }
        raise PreemptionSaved(signal.Signals(signum).name)

    def on_save_checkpoint(self, trainer, module, checkpoint: dict) -> None:
        if self._position is not None:
            checkpoint[POSITION_KEY] = dict(self._position)
