"""Epoch timing of train.py's own code path: ``clock_epochs(overrides, folder)`` composes the
real config as ``python train.py <overrides>`` would, runs ``swwae.training.run.train`` into a
temporary folder with an ``EpochClock`` among its callbacks, and returns the clock.

It lives in the package, not in a script, because two benchmarks share it
(``scripts/bench_epoch.py``: Lightning against a hand-written loop; ``scripts/bench_scaling.py``:
epoch time over data and width) and Hydra must import ``EpochClock`` by name. It needs
Lightning and Hydra, and the shipped configs (``swwae.training.composing``); the plain timing and memory
measurements are in ``swwae.bench.harness``.

The hand-written side (``HandLoop``) is the plainest loop a user would write on *the same
tensors* (the datamodule's) and the same network (a plain-torch ``SWWAE`` with the module's
weights, compiled with the job's backend where the run compiles its own): shuffle, gather
batches, forward, ``swwae.loss.swwae_loss``, backward, Adam step; then validation under
inference mode. ``EpochClock`` interleaves the two step by step: one
hand-written training step before each of Lightning's, and one validation batch before each
of its validation batches, off Lightning's clock. A Lightning epoch's clock runs from its
``on_train_epoch_start`` to the next one (or to the end of training), less the hand-written
steps, so it holds the data loading, hooks, logging, validation, image logging and
checkpointing too (each save until its file is written: the job writes them in the background,
whose CPU time would otherwise land on the hand loop's steps that follow).

On a GPU (``trainer=gpu``) the two run one after the other instead (``clock_epochs(...,
hand_loop=False)``, then ``hand_epochs``): a
GPU is not a shared, noisy machine, and a step of the other loop between two of Lightning's
would drain its queue of launched work. The hand-written loop then holds its images on the GPU
and draws its order there, the fastest plain loop; each epoch is clocked between
synchronisations of the device, and ``BusySampler`` says how busy the GPU was. The job's
checkpoints are written in the background there, as in any run.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import torch
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

from swwae.bench.harness import Stopwatch, synchronize
from swwae.bench.steps import AUTOCAST
from swwae.loss import loss_weights, swwae_loss
from swwae.model import SWWAE
from swwae.optim import adam
from swwae.training.callbacks import ReconstructionImages
from swwae.training.checkpoints import wait_for_saves
from swwae.training.composing import compose_run
from swwae.training.data.batching import to_float
from swwae.training.process import compile_in_place
from swwae.training.run import train

# helpers


def compose_config(folder: Path, overrides=()) -> DictConfig:
    """The train config as ``swwae train <overrides>`` composes it, writing under ``folder``."""
    paths = [f"paths.log_dir={folder / 'logs'}", f"paths.checkpoint_dir={folder / 'checkpoints'}"]
    return compose_run([*overrides, *paths], folder / "output")  # its folder, always


def limit_batches(train_size: int, batch: int | None) -> int:
    """trainer.limit_train_batches for about ``train_size`` images an epoch."""
    return max(1, -(-train_size // (batch or 128)))


@contextlib.contextmanager
def silenced():
    """The progress bar and the run's chatter go to /dev/null (they are still drawn)."""
    level = logging.getLogger("lightning.pytorch").level
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    with (
        open(os.devnull, "w") as null,
        contextlib.redirect_stdout(null),
        contextlib.redirect_stderr(null),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.getLogger("lightning.pytorch").setLevel(level)


def timed_part(part: str):
    """Decorate a HandLoop method: add its time to ``part`` and to the whole of the current
    epoch's record, and return it."""

    def decorate(fn):
        def timed(self, *args):
            start = time.perf_counter()
            fn(self, *args)
            synchronize(self.device)  # its GPU work is its time (nothing to wait for on a CPU)
            seconds = time.perf_counter() - start
            self.epochs[-1][part] += seconds
            self.epochs[-1]["epoch"] += seconds
            return seconds

        return timed

    return decorate


def written(save, trainer):
    """``trainer.save_checkpoint`` that returns once the file is written (the job's saves are
    written in the background: ``swwae.training.checkpoints``)."""

    def save_and_wait(*args, **kwargs):
        save(*args, **kwargs)
        wait_for_saves(trainer)

    return save_and_wait


# classes


class HandLoop:
    """The hand-written baseline: same tensors, same network and loss, plain torch. Driven
    step by step (``EpochClock`` interleaves its steps with Lightning's); each call records
    its own time into the current epoch's record."""

    def __init__(self, module, datamodule, device=None, precision: str = "32-true"):
        hp = module.hparams
        self.device = torch.device(device or "cpu")
        self.net = SWWAE.from_settings(hp, hp.image_shape, hp.num_classes, hp.pixel_mean)  # plain torch
        self.net.load_state_dict(module.net.state_dict())
        self.layout = torch.channels_last if module.channels_last else torch.contiguous_format
        self.net.to(self.device, memory_format=self.layout)
        if module.compile_backend:  # the job's network compiled (compile=true): the twin's alike
            compile_in_place(self.net, module.compile_backend)
        self.autocast = AUTOCAST.get(str(precision))  # None: no autocast (32-true, or a true precision)
        self.weights = loss_weights(hp)  # every weight of swwae.loss_terms
        self.data = datamodule
        if self.device.type != "cpu":  # the images on the device, as the fastest plain loop has them
            self.data = SimpleNamespace(
                **{f"{split}_{part}": getattr(datamodule, f"{split}_{part}").to(self.device)
                   for split in ("train", "val") for part in "xy"},
                batch_size=datamodule.batch_size,
            )  # fmt: skip
        self.optimizer = adam(self.net.parameters(), hp.lr, hp.weight_decay)  # the job's (swwae.optim)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=20)
        self.generator = torch.Generator().manual_seed(0)
        self.epochs: list[dict[str, float]] = []

    def start_epoch(self) -> float:
        self.epochs.append({"epoch": 0.0, "train": 0.0, "val": 0.0})
        return self._start_epoch()

    @timed_part("train")
    def _start_epoch(self):
        self.net.train()
        n = len(self.data.train_x)
        order = (
            torch.randperm(n, generator=self.generator)
            if self.device.type == "cpu"
            else torch.randperm(n, device=self.device)
        )
        self.batches = order.split(self.data.batch_size)
        self.step = 0

    @timed_part("train")
    def train_step(self):
        idx = self.batches[self.step % len(self.batches)]
        self.step += 1
        x, y = to_float(self.data.train_x[idx]), self.data.train_y[idx]  # stored uint8, as the loader does
        x = x.contiguous(memory_format=self.layout)
        with self._precision():
            loss = swwae_loss(self.net(x), x, y, **self.weights)["loss"]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    @timed_part("val")
    def val_step(self, i: int):
        if i == 0:
            self.net.eval()
        batch = self.data.batch_size
        x, y = to_float(self.data.val_x[i * batch : (i + 1) * batch]), self.data.val_y[i * batch : (i + 1) * batch]
        x = x.contiguous(memory_format=self.layout)
        with torch.inference_mode(), self._precision():
            float(swwae_loss(self.net(x), x, y, **self.weights)["recon_mse"])

    def _precision(self):
        """Autocast as the run's precision has it (off for 32-true)."""
        return torch.autocast(self.device.type, dtype=self.autocast, enabled=self.autocast is not None)

    @timed_part("val")
    def end_epoch(self):
        self.scheduler.step()


class EpochClock(L.Callback):
    """Times every Lightning epoch and its parts. With ``hand_loop``, a hand-written twin runs
    one step before each Lightning training step and one validation batch before each of
    Lightning's, off Lightning's clock: the two are interleaved step by step, so machine
    noise hits them alike. Added to the run's callbacks through the config."""

    last: EpochClock | None = None  # the instance of the latest run, for main() to read

    def __init__(self, hand_loop: bool = True):
        self.hand_loop, self.lightning = hand_loop, []
        self._open = self.twin = self.module = self.device = None
        self.images, self.checkpoints = Stopwatch(), Stopwatch()
        EpochClock.last = self

    @property
    def hand(self) -> list[dict[str, float]]:
        return self.twin.epochs if self.twin is not None else []

    def setup(self, trainer, module, stage):
        if stage != "fit":
            return
        self.data, self.module, self.device = trainer.datamodule, module, trainer.strategy.root_device
        self.precision = trainer.precision
        self.twin = HandLoop(module, trainer.datamodule) if self.hand_loop else None
        # instance-level wrappers: Lightning looks hooks up on the instance
        save = trainer.save_checkpoint
        if self.hand_loop:
            # interleaved on shared cores, the background writer would take its CPU time from the
            # hand loop's next steps: each save is clocked until its file is written instead
            save = written(save, trainer)
        trainer.save_checkpoint = self.checkpoints.wrap(save)
        for callback in trainer.callbacks:
            if isinstance(callback, ReconstructionImages):
                callback.on_validation_epoch_end = self.images.wrap(callback.on_validation_epoch_end)

    def _now(self) -> float:
        """Lightning's clock: wall time since the epoch started, less the hand-written steps."""
        return time.perf_counter() - self._open["start"] - self._open["paused"]

    def _hand(self, seconds: float) -> None:
        self._open["paused"] += seconds

    def _close(self):
        if self._open is not None:
            record = self._open
            if self.twin is not None:
                self._hand(self.twin.end_epoch())
            synchronize(self.device)
            record["end"] = time.perf_counter()
            record["epoch"] = self._now()
            record.setdefault("train", record["epoch"])  # an epoch without validation
            record.setdefault("val", 0.0)
            record["images"] = self.images.total - record.pop("images_before")
            record["checkpoints"] = self.checkpoints.total - record.pop("checkpoints_before")
            self.lightning.append(record)
            self._open = None

    def on_train_epoch_start(self, trainer, module):
        self._close()
        self.train_size = min(len(self.data.train_x), trainer.num_training_batches * self.data.batch_size)
        self.batches = (trainer.num_training_batches, sum(trainer.num_val_batches))
        synchronize(self.device)
        self._open = {
            "start": time.perf_counter(),
            "paused": 0.0,
            "images_before": self.images.total,
            "checkpoints_before": self.checkpoints.total,
        }
        if self.twin is not None:
            self._hand(self.twin.start_epoch())

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.twin is not None and self._open is not None:
            self._hand(self.twin.train_step())

    def on_validation_epoch_start(self, trainer, module):
        if self._open is not None and not trainer.sanity_checking:
            self._open["train"] = self._now()

    def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        if self.twin is not None and self._open is not None and not trainer.sanity_checking:
            self._hand(self.twin.val_step(batch_idx))

    def on_validation_epoch_end(self, trainer, module):
        if self._open is not None and "train" in self._open and "val" not in self._open:
            self._open["val"] = self._now() - self._open["train"]  # image logging included

    def on_train_end(self, trainer, module):
        self._close()


# the run


def hand_epochs(clock: EpochClock, epochs: int) -> list[dict[str, float]]:
    """``epochs`` epochs of the hand-written loop alone, after ``clock``'s run, on its device, in
    its precision and layout, as many batches as its epochs had; each record with its span."""
    loop = HandLoop(clock.module, clock.data, clock.device, clock.precision)
    train_batches, val_batches = clock.batches
    for _ in range(epochs):
        synchronize(loop.device)
        start = time.perf_counter()
        loop.start_epoch()
        for _ in range(train_batches):
            loop.train_step()
        for i in range(val_batches):
            loop.val_step(i)
        loop.end_epoch()
        loop.epochs[-1].update(start=start, end=time.perf_counter())
    return loop.epochs


def clock_epochs(overrides, folder: Path, hand_loop: bool = True) -> tuple[EpochClock, float]:
    """``swwae.training.run.train`` on the composed config plus an EpochClock; the clock and the wall time."""
    cfg = compose_config(folder, [*overrides, "resume=false"])  # every measurement trains from scratch
    with open_dict(cfg):
        cfg.callbacks = cfg.callbacks or {}
        cfg.callbacks.bench_clock = {"_target_": f"{__name__}.EpochClock", "hand_loop": hand_loop}  # this very class
    start = time.perf_counter()
    with silenced():
        train(cfg)
    GlobalHydra.instance().clear()
    clock = EpochClock.last
    for r in clock.lightning:  # parts of a Lightning epoch that add up to it
        r["val"] -= r["images"]
        r["after validation"] = r["epoch"] - r["train"] - r["val"] - r["images"]
    return clock, time.perf_counter() - start
