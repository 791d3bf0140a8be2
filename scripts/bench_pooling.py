"""Pool + unpool, forward + backward: hard and soft what-where against native max (un)pooling.

    python scripts/bench_pooling.py [--repeats 30] [--batch 128] [--device cpu]

The three variants run interleaved in one process (round-robin), so machine noise hits them
alike; the table gives medians and ratios to native (targets, DESIGN 4: hard <= 1.0x,
soft <= 2.0x, hard peak memory <= 1.1x). Native is nn.MaxPool2d(return_indices=True) +
nn.MaxUnpool2d: the usual way, which overwrites where windows overlap.
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import torch
from torch import nn

from swwae.pooling import Unpool, WhatWherePool

CASES = [dict(kernel_size=2, stride=2), dict(kernel_size=3, stride=2)]
TARGETS = {"hard": 1.0, "soft": 2.0}


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


def peak_memory(step, x, device):
    """Peak bytes allocated by one forward + backward, beyond the input itself."""
    x = x.detach().requires_grad_(True)
    if device.type == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
        step(x).square().sum().backward()
        return torch.cuda.max_memory_allocated() - base
    # CPU: torch's allocator reports through the profiler; tracemalloc misses torch buffers
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step(x).square().sum().backward()
    events = sorted((e for e in prof.events() if e.cpu_memory_usage), key=lambda e: e.time_range.start)
    live = peak = 0
    for e in events:
        live += e.cpu_memory_usage
        peak = max(peak, live)
    return peak


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--channels", type=int, default=32)
    parser.add_argument("--size", type=int, default=28)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    x = torch.randn(args.batch, args.channels, args.size, args.size, device=device)
    print(f"input {tuple(x.shape)} float32 on {device}, torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads, {args.repeats} interleaved repeats\n")
    print("| case | variant | median ms | ratio to native | target | peak MiB | memory ratio |")
    print("|---|---|---|---|---|---|---|")
    failed = False
    for case in CASES:
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
        memory = {name: peak_memory(step, x, device) for name, step in steps.items()}
        label = f"{case['kernel_size']}x{case['kernel_size']} stride {case['stride']}"
        for name in steps:
            ratio = medians[name] / medians["native"]
            target = TARGETS.get(name)
            if target is not None and ratio > target:
                failed = True
            mem_ratio = memory[name] / memory["native"]
            print(f"| {label} | {name} | {medians[name] * 1e3:.2f} | {ratio:.2f}x | "
                  f"{'' if target is None else f'<= {target:.1f}x'} | {memory[name] / 2**20:.1f} | {mem_ratio:.2f}x |")
    print("\nall targets met" if not failed else "\nsome targets missed (see ratios above)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
