"""One training epoch through train.py's own code path against a hand-written torch loop.

    python scripts/bench_epoch.py [--epochs 4] [--batch 128] [overrides ...]
    python scripts/bench_epoch.py model=swwae_soft data=mnist_sample
    python scripts/bench_epoch.py --device cuda [overrides ...]     # on a GPU: trainer=gpu
    python scripts/bench_epoch.py --device cuda --synthetic 50000 data=cifar10   # CIFAR-10's shape, no files

The Lightning side is ``swwae.training.run.train`` on the real config, composed with Hydra's compose
API (as ``python train.py`` would, with the extra overrides given), writing into a temporary
folder: the Trainer of configs/trainer/default.yaml, the swwae datamodule, logging at its
default cadence, and the default callbacks (checkpoints, reconstruction images, learning
rate monitor, progress bar; its output goes to /dev/null). The hand-written side is the
plainest loop a user would write on *the same tensors* (the datamodule's) and the same
network (a twin of the LightningModule with the same weights, compiled alike where the run
has ``compile`` set): shuffle, gather batches, forward, the module's loss, backward, Adam step;
then validation under inference mode.

The two are interleaved step by step in one process: a callback runs one hand-written
training step before each of Lightning's, and one validation batch before each of its
validation batches, off Lightning's clock. A Lightning epoch's clock runs from its
``on_train_epoch_start`` to the next one (or to the end of training), less the hand-written
steps, so it holds the data loading, hooks, logging, validation, image logging and
checkpointing too. The clock and the twin loop are ``swwae.bench.epoch_clock`` (shared with
``scripts/bench_scaling.py``); medians and ratios ``swwae.bench.harness``.
Target (docs/architecture.md 5): Lightning + data pipeline <= 1.10x the hand-written loop per epoch.

``--device cuda`` runs the job with ``trainer=gpu`` and then, one after the other rather than
interleaved (``swwae.bench.epoch_clock``), the hand-written loop with its images on the GPU;
the table adds how busy the GPU was in each (``swwae.bench.harness.BusySampler``: NVML's
utilisation, through torch or nvidia-smi, sampled every 0.1 s; "not sampled" where neither
answers, "no GPU" in ``--in-turn``'s table on the CPU). Target there: <= 1.2x the hand loop.
``--synthetic N`` gives the data set random uint8 images of its shape instead of its files (N
training images, a tenth of that each for validation and test): a CIFAR-shaped epoch where
CIFAR-10 cannot be downloaded.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import contextlib
import math
import tempfile
import types
from pathlib import Path

import torch

from swwae.bench.epoch_clock import clock_epochs, hand_epochs, limit_batches
from swwae.bench.harness import BusySampler, median, paired_ratio, set_threads
from swwae.training.data.base import InMemoryDataModule, Splits
from swwae.training.process import set_torch_defaults

TARGET = {"cpu": 1.10, "cuda": 1.20}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--epochs", type=int, default=4, help="epochs of the run (each one paired with a hand-written epoch)"
    )
    parser.add_argument("--batch", type=int, default=None, help="data.batch_size (default: the config's)")
    parser.add_argument(
        "--train-size",
        type=int,
        default=None,
        help="training samples per epoch (a limit_train_batches), default: the whole split",
    )
    parser.add_argument("--skip", type=int, default=1, help="first epochs left out of the medians (warm-up)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cuda: trainer=gpu, loops in turn")
    parser.add_argument("--in-turn", action="store_true", help="the loops one after the other (as on a GPU)")
    parser.add_argument("--synthetic", type=int, default=0, metavar="N", help="N random images of the data's shape")
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for train.py")
    args = parser.parse_args(argv)
    with synthetic_images(args.synthetic):
        return in_turn(args) if args.device == "cuda" or args.in_turn else interleaved(args)


@contextlib.contextmanager
def synthetic_images(count: int):
    """Every data set's ``load`` gives ``count`` random uint8 training images of its shape (a tenth
    as many for validation and for test) while the block runs; nothing changes with 0."""
    if not count:
        yield
        return

    def load(self) -> Splits:
        generator = torch.Generator().manual_seed(0)
        parts = []
        for n in (count, max(1, count // 10), max(1, count // 10)):
            x = torch.randint(0, 256, (n, *self.image_shape), dtype=torch.uint8, generator=generator)
            parts += [x, torch.arange(n) % self.num_classes]
        return Splits(*parts)

    setup = InMemoryDataModule.setup

    def setup_synthetic(self, stage=None):
        self.load = types.MethodType(load, self)  # the data set's own load, shadowed
        return setup(self, stage)

    InMemoryDataModule.setup = setup_synthetic
    try:
        yield
    finally:
        InMemoryDataModule.setup = setup


def run_overrides(args) -> list[str]:
    """The run's overrides: ``trainer=gpu`` on a GPU, its epochs, no test, the batch and training
    images asked for, then the user's."""
    gpu = ["trainer=gpu"] if args.device == "cuda" else []
    overrides = [*gpu, f"trainer.max_epochs={args.epochs}", "test=false", *args.overrides]
    if args.batch:
        overrides.append(f"data.batch_size={args.batch}")
    if args.train_size:
        overrides.append(f"++trainer.limit_train_batches={limit_batches(args.train_size, args.batch)}")
    return overrides


def print_parts(lit: list[dict], hand: list[dict]) -> None:
    """The table rows of an epoch's parts, Lightning's against the hand loop's where it has them."""
    for part in ("train", "val", "images", "checkpoints", "after validation"):
        a = median([r[part] for r in lit])
        b = median([r[part] for r in hand]) if part in hand[0] else None
        note = {
            "val": " (without images)",
            "after validation": " (checkpoint saves, logging, scheduler)",
            "checkpoints": " (inside after validation)",
        }.get(part, "")
        print(
            f"| {part}{note} | {a:.3f} | {'' if b is None else f'{b:.3f}'} | {'' if b is None else f'{a / b:.3f}x'} | |"
        )


def print_per_batch(lit: list[dict], hand: list[dict], batches: tuple[int, int]) -> None:
    """The job's time beyond the hand loop a training step and a validation batch: on a GPU, where
    a small network's step is host time, the per-batch cost of the framework around it."""
    train, val = batches
    extra = {part: median([r[part] for r in lit]) - median([r[part] for r in hand]) for part in ("train", "val")}
    val_line = f", {extra['val'] / val * 1e3:.2f} ms a validation batch ({val} an epoch)" if val else ""
    print(f"\nbeyond the hand loop: {extra['train'] / train * 1e3:.2f} ms a training step ({train} an epoch){val_line}")


def interleaved(args) -> int:
    """The table on the CPU: the two loops interleaved step by step."""
    set_torch_defaults()
    set_threads(args.threads)
    overrides = run_overrides(args)
    with tempfile.TemporaryDirectory(prefix="bench_epoch_") as tmp:
        clock, wall = clock_epochs(overrides, Path(tmp))
    skip = min(args.skip, len(clock.lightning) - 1)
    lit, hand = clock.lightning[skip:], clock.hand[skip:]
    train_size = clock.train_size
    print(
        f"one epoch through train.py's code path ({' '.join(args.overrides) or 'default config'}) vs a "
        f"hand-written loop; {train_size} training images, batch {clock.twin.data.batch_size}; "
        f"torch {torch.__version__}, "
        f"threads: {torch.get_num_threads()}; {len(lit)} epochs each, interleaved (+{skip} warm-up)\n"
    )
    print("| part of an epoch | Lightning median s | hand loop median s | ratio | target |")
    print("|---|---|---|---|---|")
    print_parts(lit, hand)
    epoch_l, epoch_h = median([r["epoch"] for r in lit]), median([r["epoch"] for r in hand])
    ratio, paired = epoch_l / epoch_h, paired_ratio([r["epoch"] for r in lit], [r["epoch"] for r in hand])
    print(
        f"| **whole epoch** | **{epoch_l:.3f}** | **{epoch_h:.3f}** | **{ratio:.3f}x** "
        f"(paired {paired:.3f}x) | <= {TARGET['cpu']}x |"
    )
    images = median([r["images"] for r in lit])
    print(f"\nreconstruction images: {images * 1e3:.0f} ms an epoch, {images / epoch_l:.1%} of it")
    print_per_batch(lit, hand, clock.batches)
    print(
        f"throughput: {train_size / epoch_l:.0f} training images/s over whole epochs (Lightning), "
        f"{train_size / epoch_h:.0f} (hand loop); training part alone "
        f"{train_size / median([r['train'] for r in lit]):.0f} vs {train_size / median([r['train'] for r in hand]):.0f}"
    )
    outside = wall - sum(r["epoch"] for r in clock.lightning) - sum(r["epoch"] for r in clock.hand)
    print(
        f"whole run {wall:.1f} s; outside its {len(clock.lightning)} epochs (setup, sanity check, teardown): "
        f"{outside:.1f} s"
    )
    print("\ntarget met" if max(ratio, paired) <= TARGET["cpu"] else "\ntarget missed (see the ratio above)")
    return 0


def busy_cell(used: float | None) -> str:
    """The table's "GPU busy" cell: a percentage; none on the CPU; and on a GPU whose
    utilisation could not be read (no NVML, no nvidia-smi line for its bus), no figure either."""
    if used is None:
        return "no GPU"
    return f"{used:.0f}%" if math.isfinite(used) else "not sampled"


def in_turn(args) -> int:
    """The job, then the hand-written loop alone on the same device, each epoch clocked and, on a
    GPU, its utilisation sampled: the table of ``--device cuda`` (``--in-turn`` on the CPU)."""
    set_torch_defaults()
    set_threads(args.threads)
    gpu = args.device == "cuda"
    overrides = run_overrides(args)
    busy = BusySampler("cuda") if gpu else contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="bench_epoch_") as tmp, busy:
        clock, _ = clock_epochs(overrides, Path(tmp), hand_loop=False)
        hand = hand_epochs(clock, len(clock.lightning))
    skip = min(args.skip, len(clock.lightning) - 1)
    lit, hand = clock.lightning[skip:], hand[skip:]
    where = torch.cuda.get_device_name() if gpu else "the CPU"
    print(
        f"one epoch on {where} through train.py ({' '.join(overrides[:gpu] + args.overrides) or 'default config'}) "
        f"vs a hand-written loop with its images there, one after the other; {clock.train_size} training "
        f"images, batch {clock.data.batch_size}, {clock.precision}; torch {torch.__version__}; {len(lit)} epochs "
        f"each (+{skip} warm-up)\n"
    )
    print("| loop | epoch median s | training images/s | GPU busy (mean over its epochs) | ratio | target |")
    print("|---|---|---|---|---|---|")
    epochs = {"train.py": lit, "hand loop": hand}
    medians = {name: median([r["epoch"] for r in records]) for name, records in epochs.items()}
    for name, records in epochs.items():
        # over all the measured epochs, not a median of each: NVML's counter averages over 1/6 s or
        # more, about as long as a short epoch
        used = busy.between(records[0]["start"], records[-1]["end"]) if gpu else None
        ratio = medians[name] / medians["hand loop"]
        target = f"<= {TARGET[args.device]}x" if name == "train.py" else ""
        print(
            f"| {name} | {medians[name]:.3f} | {clock.train_size / medians[name]:.0f} | {busy_cell(used)} "
            f"| {ratio:.3f}x | {target} |"
        )
    print(
        "\nwhere train.py's epoch goes (on a GPU each part is clocked without waiting for the device, so "
        "work queued in one part may be counted in the next):\n"
    )
    print("| part of an epoch | train.py median s | hand loop median s | ratio | |")
    print("|---|---|---|---|---|")
    print_parts(lit, hand)
    print_per_batch(lit, hand, clock.batches)
    met = medians["train.py"] <= TARGET[args.device] * medians["hand loop"]
    print("\ntarget met" if met else "\ntarget missed (see the ratio above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
