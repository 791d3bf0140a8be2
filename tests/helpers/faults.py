"""Fault injection for the subprocess tests: Lightning callbacks that a test adds to a real
``train.py`` run by dotted path, e.g.
``+callbacks.kill._target_=helpers.faults.KillAt +callbacks.kill.epoch=1 +callbacks.kill.batch=1``
(``helpers.cli`` puts ``tests/`` on the child's path); in the test's own process,
``with_callback`` adds one to the job's Trainer."""

from __future__ import annotations

import hashlib
import json
import os
import signal

import lightning as L
import torch

from swwae.training.checkpoints import wait_for_saves


class AtBatch(L.Callback):
    """Acts once, at the start of training batch ``batch`` of epoch ``epoch``, once the
    checkpoints saved before it are on disk: they are written in the background, and a fault
    that strikes during a write loses that write only (the file before it stays whole)."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            wait_for_saves(trainer)
            self.act(trainer, module)

    def act(self, trainer, module) -> None:
        raise NotImplementedError


class Crash(Exception):
    """A run that crashed (``CrashAt``)."""


class CrashAt(AtBatch):
    """Raise ``Crash``: a run that stops part way, in the test's own process, leaving the
    checkpoints of the epochs it finished (an in-process stand-in for ``KillAt``)."""

    def act(self, trainer, module) -> None:
        raise Crash(f"crashed in epoch {trainer.current_epoch + 1}")


def crash_at(epoch: int, batch: int = 0) -> list[str]:
    """The overrides that add ``CrashAt`` to a run: it stops at the start of training batch
    ``batch`` of epoch ``epoch`` (counted from 0)."""
    return [
        "+callbacks.crash._target_=helpers.faults.CrashAt",
        f"+callbacks.crash.epoch={epoch}",
        f"+callbacks.crash.batch={batch}",
    ]


class KillAt(AtBatch):
    """SIGKILL this very process: no handler, no cleanup, like the OOM killer or a lost node."""

    def act(self, trainer, module) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class InterruptAt(AtBatch):
    """Press Ctrl-C: SIGINT to this very process."""

    def act(self, trainer, module) -> None:
        os.kill(os.getpid(), signal.SIGINT)


class SignalAt(AtBatch):
    """Send ``signum`` (a name: SIGTERM, SIGUSR1) to this very process, as a scheduler does
    before it pre-empts a job."""

    def __init__(self, epoch: int, batch: int, signum: str = "SIGTERM"):
        super().__init__(epoch, batch)
        self.signum = getattr(signal, signum)

    def act(self, trainer, module) -> None:
        os.kill(os.getpid(), self.signum)


class PoisonAt(L.Callback):
    """Fill the first parameter with NaN after training batch ``batch`` of ``epoch`` (after its
    optimizer step), in every process or only in process ``rank``: the next forward pass then
    yields a NaN loss."""

    def __init__(self, epoch: int, batch: int, rank: int | None = None):
        self.epoch, self.batch, self.rank = epoch, batch, rank

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch and self.rank in (None, trainer.global_rank):
            with torch.no_grad():
                next(module.parameters()).fill_(float("nan"))


class NonFiniteLossAt(L.Callback):
    """Make the loss terms recorded for training batch ``batch`` of ``epoch`` infinite, in every
    process or only in process ``rank``, the weights untouched: a step whose loss overflowed while
    the weights stayed finite (under ``16-mixed`` the grad scaler skips such a step, in every
    process, since the gradients are all-reduced)."""

    def __init__(self, epoch: int, batch: int, rank: int | None = None):
        self.epoch, self.batch, self.rank = epoch, batch, rank

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch and self.rank in (None, trainer.global_rank):
            watch = module.loss_watch
            watch.pending[-1] = tuple(torch.full_like(t, float("inf")) for t in watch.pending[-1])


class RecordBatches(L.Callback):
    """A fingerprint of every training sample each rank sees, written to ``<out>/rank<k>.json``
    as each batch starts (a run stopped part way keeps what it saw; the DDP test reads which
    samples went where)."""

    def __init__(self, out: str):
        self.out, self.seen = out, []

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        x = batch[0].detach().cpu()
        self.seen.append([hashlib.sha1(sample.numpy().tobytes()).hexdigest() for sample in x])
        with open(os.path.join(self.out, f"rank{trainer.global_rank}.json"), "w") as f:
            json.dump({"world_size": trainer.world_size, "batches": self.seen}, f)


class PauseAt(AtBatch):
    """Write the file ``ready``, then wait (up to ``timeout`` s) until the file ``go`` exists: a
    run held mid-training while a test starts a second one beside it."""

    def __init__(self, epoch: int, batch: int, ready: str, go: str, timeout: float = 240.0):
        super().__init__(epoch, batch)
        self.ready, self.go, self.timeout = ready, go, timeout

    def act(self, trainer, module) -> None:
        import time
        from pathlib import Path

        Path(self.ready).write_text(str(os.getpid()))
        deadline = time.monotonic() + self.timeout
        while not Path(self.go).exists() and time.monotonic() < deadline:
            time.sleep(0.05)


def with_callback(monkeypatch, callback: L.Callback) -> None:
    """Add ``callback`` to the Trainer that ``swwae.training.run.train`` builds (in the test's
    own process)."""
    from swwae.training import run

    build = run.build_trainer
    monkeypatch.setattr(
        run, "build_trainer", lambda cfg, loggers, callbacks, **kw: build(cfg, loggers, [*callbacks, callback], **kw)
    )
