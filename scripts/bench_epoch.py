"""One training epoch through train.py's own code path against a hand-written torch loop.

    python scripts/bench_epoch.py [--epochs 4] [--batch 128] [overrides ...]
    python scripts/bench_epoch.py model=swwae_soft data=mnist_sample

The Lightning side is ``swwae.run.train`` on the real config, composed with Hydra's compose
API (as ``python train.py`` would, with the extra overrides given), writing into a temporary
folder: the Trainer of configs/trainer/default.yaml, the swwae datamodule, logging at its
default cadence, and the default callbacks (checkpoints, reconstruction images, learning
rate monitor, progress bar; its output goes to /dev/null). The hand-written side is the
plainest loop a user would write on *the same tensors* (the datamodule's) and the same
network (a twin of the LightningModule with the same weights): shuffle, gather batches,
forward, the module's loss, backward, Adam step; then validation under inference mode.

The two are interleaved step by step in one process: a callback runs one hand-written
training step before each of Lightning's, and one validation batch before each of its
validation batches, off Lightning's clock. A Lightning epoch's clock runs from its
``on_train_epoch_start`` to the next one (or to the end of training), less the hand-written
steps, so it holds the data loading, hooks, logging, validation, image logging and
checkpointing too.
Target (DESIGN 4): Lightning + data pipeline <= 1.10x the hand-written loop per epoch.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import lightning as L
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig, open_dict

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script: import swwae (and this module, by name) from the checkout

from swwae.callbacks import ReconstructionImages  # noqa: E402
from swwae.run import set_torch_defaults, train  # noqa: E402

TARGET = 1.10

# helpers


def compose_config(folder: Path, overrides=()) -> DictConfig:
    """The train config as ``python train.py <overrides>`` composes it, writing under ``folder``."""
    GlobalHydra.instance().clear()
    paths = [f"paths.log_dir={folder / 'logs'}", f"paths.checkpoint_dir={folder / 'checkpoints'}"]
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=[*paths, *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = cfg.hydra.runtime.output_dir = str(folder / "output")
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


class Stopwatch:
    """Sums the time spent in calls of wrapped functions."""

    def __init__(self):
        self.total = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start

        return timed


def timed_part(part: str):
    """Decorate a HandLoop method: add its time to ``part`` and to the whole of the current
    epoch's record, and return it."""

    def decorate(fn):
        def timed(self, *args):
            start = time.perf_counter()
            fn(self, *args)
            seconds = time.perf_counter() - start
            self.epochs[-1][part] += seconds
            self.epochs[-1]["epoch"] += seconds
            return seconds

        return timed

    return decorate


class HandLoop:
    """The hand-written baseline: same tensors, same network and loss, plain torch. Driven
    step by step (``EpochClock`` interleaves its steps with Lightning's); each call records
    its own time into the current epoch's record."""

    def __init__(self, module, datamodule):
        self.net = type(module)(**module.hparams)  # the same LightningModule class, never attached to a Trainer
        self.net.load_state_dict(module.state_dict())
        self.data = datamodule
        hp = module.hparams
        self.optimizer = torch.optim.Adam(self.net.parameters(), lr=hp.lr, weight_decay=hp.weight_decay)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=20)
        self.generator = torch.Generator().manual_seed(0)
        self.epochs: list[dict[str, float]] = []

    def start_epoch(self) -> float:
        self.epochs.append({"epoch": 0.0, "train": 0.0, "val": 0.0})
        return self._start_epoch()

    @timed_part("train")
    def _start_epoch(self):
        self.net.train()
        self.batches = torch.randperm(len(self.data.train_x), generator=self.generator).split(self.data.batch_size)
        self.step = 0

    @timed_part("train")
    def train_step(self):
        idx = self.batches[self.step % len(self.batches)]
        self.step += 1
        x, y = self.data.train_x[idx], self.data.train_y[idx]
        loss = self.net.losses(self.net(x), x, y)["loss"]
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()

    @timed_part("val")
    def val_step(self, i: int):
        if i == 0:
            self.net.eval()
        batch = self.data.batch_size
        x, y = self.data.val_x[i * batch : (i + 1) * batch], self.data.val_y[i * batch : (i + 1) * batch]
        with torch.inference_mode():
            float(self.net.losses(self.net(x), x, y)["recon_mse"])

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
        self._open = self.twin = None
        self.images, self.checkpoints = Stopwatch(), Stopwatch()
        EpochClock.last = self

    @property
    def hand(self) -> list[dict[str, float]]:
        return self.twin.epochs if self.twin is not None else []

    def setup(self, trainer, module, stage):
        if stage != "fit":
            return
        self.data = trainer.datamodule
        self.twin = HandLoop(module, trainer.datamodule) if self.hand_loop else None
        # instance-level wrappers: Lightning looks hooks up on the instance
        trainer.save_checkpoint = self.checkpoints.wrap(trainer.save_checkpoint)
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
        self._open = {"start": time.perf_counter(), "paused": 0.0, "images_before": self.images.total,
                      "checkpoints_before": self.checkpoints.total}
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


@contextlib.contextmanager
def quiet():
    """The progress bar and the run's chatter go to /dev/null (they are still drawn)."""
    level = logging.getLogger("lightning.pytorch").level
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    with open(os.devnull, "w") as null, contextlib.redirect_stdout(null), contextlib.redirect_stderr(null), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            logging.getLogger("lightning.pytorch").setLevel(level)


def run(overrides, folder: Path, hand_loop: bool = True) -> tuple[EpochClock, float]:
    """``swwae.run.train`` on the composed config plus an EpochClock; the clock and the wall time."""
    cfg = compose_config(folder, overrides)
    with open_dict(cfg):
        cfg.callbacks = cfg.callbacks or {}
        cfg.callbacks.bench_clock = {"_target_": f"{__name__}.EpochClock", "hand_loop": hand_loop}  # this very class
    start = time.perf_counter()
    with quiet():
        train(cfg)
    GlobalHydra.instance().clear()
    clock = EpochClock.last
    for r in clock.lightning:  # parts of a Lightning epoch that add up to it
        r["val"] -= r["images"]
        r["after validation"] = r["epoch"] - r["train"] - r["val"] - r["images"]
    return clock, time.perf_counter() - start


def limit_batches(train_size: int, batch: int | None) -> int:
    """trainer.limit_train_batches for about ``train_size`` images an epoch."""
    return max(1, -(-train_size // (batch or 128)))


def median(values) -> float:
    return statistics.median(values) if values else float("nan")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--epochs", type=int, default=4, help="epochs of the run (each one paired with a hand-written epoch)")
    parser.add_argument("--batch", type=int, default=None, help="data.batch_size (default: the config's)")
    parser.add_argument("--train-size", type=int, default=None,
                        help="training samples per epoch (a limit_train_batches), default: the whole split")
    parser.add_argument("--skip", type=int, default=1, help="first epochs left out of the medians (warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for train.py")
    args = parser.parse_args(argv)
    set_torch_defaults()
    if args.threads:
        torch.set_num_threads(args.threads)
    overrides = [f"trainer.max_epochs={args.epochs}", "test=false", *args.overrides]
    if args.batch:
        overrides.append(f"data.batch_size={args.batch}")
    if args.train_size:
        overrides.append(f"+trainer.limit_train_batches={limit_batches(args.train_size, args.batch)}")
    with tempfile.TemporaryDirectory(prefix="bench_epoch_") as tmp:
        clock, wall = run(overrides, Path(tmp))
    skip = min(args.skip, len(clock.lightning) - 1)
    lit, hand = clock.lightning[skip:], clock.hand[skip:]
    train_size = clock.train_size
    print(f"one epoch through train.py's code path ({' '.join(args.overrides) or 'default config'}) vs a "
          f"hand-written loop; {train_size} training images, batch {clock.twin.data.batch_size}; torch {torch.__version__}, "
          f"threads: {torch.get_num_threads()}; {len(lit)} epochs each, interleaved (+{skip} warm-up)\n")
    print("| part of an epoch | Lightning median s | hand loop median s | ratio | target |")
    print("|---|---|---|---|---|")
    for part in ("train", "val", "images", "checkpoints", "after validation"):
        a = median([r[part] for r in lit])
        b = median([r[part] for r in hand]) if part in hand[0] else None
        note = {"val": " (without images)", "after validation": " (checkpoint saves, logging, scheduler)",
                "checkpoints": " (inside after validation)"}.get(part, "")
        print(f"| {part}{note} | {a:.3f} | {'' if b is None else f'{b:.3f}'} | "
              f"{'' if b is None else f'{a / b:.3f}x'} | |")
    epoch_l, epoch_h = median([r["epoch"] for r in lit]), median([r["epoch"] for r in hand])
    ratio, paired = epoch_l / epoch_h, median([a["epoch"] / b["epoch"] for a, b in zip(lit, hand)])
    print(f"| **whole epoch** | **{epoch_l:.3f}** | **{epoch_h:.3f}** | **{ratio:.3f}x** "
          f"(paired {paired:.3f}x) | <= {TARGET}x |")
    images = median([r["images"] for r in lit])
    print(f"\nreconstruction images: {images * 1e3:.0f} ms an epoch, {images / epoch_l:.1%} of it")
    print(f"throughput: {train_size / epoch_l:.0f} training images/s over whole epochs (Lightning), "
          f"{train_size / epoch_h:.0f} (hand loop); training part alone "
          f"{train_size / median([r['train'] for r in lit]):.0f} vs {train_size / median([r['train'] for r in hand]):.0f}")
    outside = wall - sum(r["epoch"] for r in clock.lightning) - sum(r["epoch"] for r in clock.hand)
    print(f"whole run {wall:.1f} s; outside its {len(clock.lightning)} epochs (setup, sanity check, teardown): {outside:.1f} s")
    print("\ntarget met" if max(ratio, paired) <= TARGET else "\ntarget missed (see the ratio above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
