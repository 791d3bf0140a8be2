"""Pool + unpool, forward + backward: hard and soft what-where against native max (un)pooling.

    python scripts/bench_pooling.py [--repeats 30] [--batch 128] [--device cpu] [--threads N]
                                    [--cases 2x2s2 3x3s2 4x4s4 ...] [--no-keep-freed-memory]

The three variants run interleaved in one process (round-robin), so machine noise hits them
alike; the table gives median times, and ratios to native as the median over rounds of
each round's ratio (a load that drifts between rounds cancels out; the targets are judged
on it), and as the ratio of the best rounds (closest to an idle machine). On a loaded
machine the soft path, which runs many more, smaller ops than native, pays more for every
thread the OS takes away: compare with --threads 1. Targets, DESIGN 4:
hard <= 1.0x, soft <= 2.0x, hard peak memory <= 1.1x. Native is
nn.MaxPool2d(return_indices=True) + nn.MaxUnpool2d: the usual way, which overwrites where
windows overlap. As in ``train.py`` (``keep_freed_memory: true``), glibc keeps freed memory
for the next step (``swwae.host_memory``); ``--no-keep-freed-memory`` leaves glibc's default,
which hands large blocks back to the OS and faults them in again at every step: that costs
the soft path, with its many temporaries, the most. Peak memory is the most tensor memory
alive at once during one step, beyond the input (on CPU, tracked through torch's
dispatcher: quiet, exact, a little slow).
"""

from __future__ import annotations

import argparse
import statistics
import time
import weakref

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from swwae.host_memory import keep_freed_memory
from swwae.pooling import Unpool, WhatWherePool

CASES = ["2x2s2", "3x3s2"]  # kernel x kernel, stride
TARGETS = {"hard": 1.0, "soft": 2.0}
MEMORY_TARGETS = {"hard": 1.1}


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


def run_once(step, x, device):
    x = x.detach().requires_grad_(True)
    start = time.perf_counter()
    out = step(x)
    out.square().sum().backward()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return time.perf_counter() - start


class _PeakTensorMemory(TorchDispatchMode):
    """Bytes of the tensor storages allocated while active (and still alive), and their peak.

    Every aten op, backward ones included, goes through ``__torch_dispatch__``; an output
    whose storage is not one of the op's inputs' is a new allocation, counted until the
    storage is freed. Unlike the memory profiler, this prints nothing and counts nothing
    twice."""

    def __init__(self):
        super().__init__()
        self.live = self.peak = 0
        self.sizes = {}  # data_ptr -> nbytes of the storages counted and still alive

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)}
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            storage = t.untyped_storage()
            key, size = storage.data_ptr(), storage.nbytes()
            if size and key not in inputs and key not in self.sizes:
                self.sizes[key] = size
                self.live += size
                self.peak = max(self.peak, self.live)
                weakref.finalize(storage, self._free, key)
        return out

    def _free(self, key):
        self.live -= self.sizes.pop(key)


def peak_memory(step, x, device):
    """Peak bytes allocated by one forward + backward, beyond the input itself."""
    x = x.detach().requires_grad_(True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step(x).square().sum().backward()
        return torch.cuda.max_memory_allocated() - base
    with _PeakTensorMemory() as tracker:
        step(x).square().sum().backward()
    return tracker.peak


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: torch's)")
    parser.add_argument("--cases", nargs="+", type=parse_case, default=[parse_case(c) for c in CASES],
                        help="pooling geometries, KxKsS (default: 2x2s2 3x3s2)")
    parser.add_argument("--keep-freed-memory", action=argparse.BooleanOptionalAction, default=True,
                        help="glibc keeps freed memory for the next step, as train.py has it (default: yes)")
    args = parser.parse_args(argv)
    kept = args.keep_freed_memory and keep_freed_memory()
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.channels, args.size, args.size, device=device)
    print(f"input {tuple(x.shape)} float32 on {device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats, "
          f"{'glibc keeps freed memory' if kept else 'glibc default (hands freed memory back)'}\n")
    print("| case | variant | median ms | ratio to native | best-round ratio | target "
          "| peak MiB | memory ratio | target |")
    print("|---|---|---|---|---|---|---|---|---|")
    failed = False
    for case in args.cases:
        steps = {"native": native_step(**case), "hard": swwae_step(**case, mode="hard"),
                 "soft": swwae_step(**case, mode="soft")}
        times = {name: [] for name in steps}
        for _ in range(3):  # warm-up
            for name, step in steps.items():
                run_once(step, x, device)
        for _ in range(args.repeats):
            for name, step in steps.items():
                times[name].append(run_once(step, x, device))
        medians = {name: statistics.median(t) for name, t in times.items()}
        ratios = {name: statistics.median(a / b for a, b in zip(t, times["native"])) for name, t in times.items()}
        best = {name: min(t) / min(times["native"]) for name, t in times.items()}
        memory = {name: peak_memory(step, x, device) for name, step in steps.items()}
        label = f"{case['kernel_size']}x{case['kernel_size']} stride {case['stride']}"
        for name in steps:
            target, mem_target = TARGETS.get(name), MEMORY_TARGETS.get(name)
            mem_ratio = memory[name] / memory["native"]
            if (target is not None and ratios[name] > target) or (mem_target is not None and mem_ratio > mem_target):
                failed = True
            print(f"| {label} | {name} | {medians[name] * 1e3:.2f} | {ratios[name]:.2f}x | {best[name]:.2f}x "
                  f"| {_target(target)} | {memory[name] / 2**20:.1f} | {mem_ratio:.2f}x | {_target(mem_target)} |")
    print("\nall targets met" if not failed else "\nsome targets missed (see ratios above)")
    return 0


def _target(value):
    return "" if value is None else f"<= {value:.1f}x"


if __name__ == "__main__":
    raise SystemExit(main())
