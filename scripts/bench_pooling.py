"""Pool + unpool, forward + backward: hard and soft what-where against native max (un)pooling.

    python scripts/bench_pooling.py [--repeats 30] [--batch 128] [--device cpu] [--threads N]
                                    [--cases 2x2s2 3x3s2 4x4s4 ...] [--no-keep-freed-memory] [--profile]

The three variants run interleaved in one process (round-robin), so machine noise hits them
alike; the table gives median times, and ratios to native as the median over rounds of
each round's ratio (a load that drifts between rounds cancels out; the targets are judged
on it), and as the ratio of the best rounds (closest to an idle machine). On a loaded
machine the soft path, which runs many more, smaller ops than native, pays more for every
thread the OS takes away: compare with --threads 1. Targets, docs/architecture.md 5:
hard <= 1.0x, soft <= 2.0x, peak memory hard <= 1.1x, soft <= 1.5x. On CUDA the soft where
runs its fused kernels (swwae.pooling.fused), and a ``soft (reference)`` row shows the path
they replace. Native is
nn.MaxPool2d(return_indices=True) + nn.MaxUnpool2d: the usual way, which overwrites where
windows overlap. As in ``train.py`` (``keep_freed_memory: true``), glibc keeps freed memory
for the next step (``swwae.training.process.keep_freed_memory``); ``--no-keep-freed-memory`` leaves glibc's default,
which hands large blocks back to the OS and faults them in again at every step: that costs
the soft path, with its many temporaries, the most. Peak memory is the most memory allocated
at once during one step, beyond the input (on CPU, the high-water mark of torch's
allocator). Timing and memory: ``swwae.bench.harness``, shared by every benchmark.
``--profile`` adds, for each case, the kernels each variant's pool + unpool runs and their time
(on the CPU, its ops' own time; ``swwae.bench.breakdown.by_kernel``): which of the fused soft
where's kernels takes its time beside native's.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import functools

import torch
from torch import nn

from swwae.bench.breakdown import by_kernel, kernel_times
from swwae.bench.harness import peak_memory, set_threads, time_interleaved
from swwae.pooling import Unpool, WhatWherePool
from swwae.pooling.soft import fused_kernels_on, fused_kernels_run
from swwae.training.process import keep_freed_memory

CASES = ["2x2s2", "3x3s2"]  # kernel x kernel, stride
TARGETS = {"hard": 1.0, "soft": 2.0}
MEMORY_TARGETS = {"hard": 1.1, "soft": 1.5}
PROFILED_CALLS = 3  # with --profile, each variant's kernels' time is the mean of so many calls


def parse_case(text: str) -> dict:
    """'3x3s2' -> dict(kernel_size=3, stride=2)."""
    try:
        size, stride = text.lower().split("s")
        height, width = size.split("x")
        if height != width:
            raise ValueError
        return dict(kernel_size=int(height), stride=int(stride))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a case is KxKsS, e.g. 3x3s2 (3x3 windows, stride 2), got {text!r}") from None


def native_step(kernel_size, stride):
    pool = nn.MaxPool2d(kernel_size, stride, return_indices=True)
    unpool = nn.MaxUnpool2d(kernel_size, stride)

    def step(x):
        what, indices = pool(x)
        return unpool(what, indices, output_size=x.shape)

    return step


def swwae_step(kernel_size, stride, mode):
    pool = WhatWherePool(kernel_size, stride, mode=mode)
    unpool = Unpool(pool)

    def step(x):
        what, where = pool(x)
        return unpool(what, where)

    return step


def reference(step):
    """``step`` with the soft where through the reference path (swwae.pooling.soft), not the
    fused kernels."""

    def on_reference(x):
        with fused_kernels_on():
            return step(x)

    return on_reference


def backward(step, x) -> None:
    """One forward + backward of ``step`` on a fresh leaf of ``x``."""
    step(x.detach().requires_grad_(True)).square().sum().backward()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ... (default: cpu)")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument(
        "--cases",
        nargs="+",
        type=parse_case,
        default=[parse_case(c) for c in CASES],
        help="pooling geometries, KxKsS (default: 2x2s2 3x3s2)",
    )
    parser.add_argument(
        "--keep-freed-memory",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="glibc keeps freed memory for the next step, as train.py has it (default: yes)",
    )
    parser.add_argument("--profile", action="store_true", help="also each variant's kernels and their time, by case")
    args = parser.parse_args(argv)
    kept = args.keep_freed_memory and keep_freed_memory()
    set_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.channels, args.size, args.size, device=device)
    print(
        f"input {tuple(x.shape)} float32 on {device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats, "
        f"{'glibc keeps freed memory' if kept else 'glibc default (hands freed memory back)'}\n"
    )
    print(
        "| case | variant | median ms | ratio to native | best-round ratio | target "
        "| peak MiB | memory ratio | target |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    profiles = {}  # case label -> variant -> its kernel_times, with --profile
    for case in args.cases:
        steps = {
            "native": native_step(**case),
            "hard": swwae_step(**case, mode="hard"),
            "soft": swwae_step(**case, mode="soft"),
        }
        if fused_kernels_run(x):  # beside the fused kernels, the reference path they replace
            steps["soft (reference)"] = reference(swwae_step(**case, mode="soft"))
        calls = {name: functools.partial(backward, step, x) for name, step in steps.items()}
        times = time_interleaved(calls, args.repeats, warmup=3, device=device)
        medians = {name: times.median(name) for name in steps}
        ratios = {name: times.paired_ratio(name, "native") for name in steps}
        best = {name: times.best_ratio(name, "native") for name in steps}
        memory = {name: peak_memory(call, device) for name, call in calls.items()}
        label = f"{case['kernel_size']}x{case['kernel_size']} stride {case['stride']}"
        if args.profile:
            profiles[label] = {name: kernel_times(call, device, PROFILED_CALLS) for name, call in calls.items()}
        for name in steps:
            target, mem_target = TARGETS.get(name), MEMORY_TARGETS.get(name)
            mem_ratio = memory[name] / memory["native"]
            if (target is not None and ratios[name] > target) or (mem_target is not None and mem_ratio > mem_target):
                failed = True
            print(
                f"| {label} | {name} | {medians[name] * 1e3:.2f} | {ratios[name]:.2f}x | {best[name]:.2f}x "
                f"| {_target(target)} | {memory[name] / 2**20:.1f} | {mem_ratio:.2f}x | {_target(mem_target)} |"
            )
    print("\nall targets met" if not failed else "\nsome targets missed (see ratios above)")
    for label, times in profiles.items():
        print(f"\nwhere each variant's pool + unpool goes, {label} ({PROFILED_CALLS} calls profiled):\n")
        print("\n".join(by_kernel(times, device)))
    return 0


def _target(value):
    return "" if value is None else f"<= {value:.1f}x"


if __name__ == "__main__":
    raise SystemExit(main())
