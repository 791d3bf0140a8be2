"""Throughput of the default run, and how its epoch time grows with the data and the width.

    python scripts/bench_scaling.py [--sizes 1000 2000 4000] [--widths 16 32 64] [--epochs 2] [--repeats 1]

Every point is ``swwae.training.run.train`` on the real config (train.py's code path: Trainer,
datamodule, logging, the default callbacks; ``test=false``), timed epoch by epoch as in
``scripts/bench_epoch.py`` (``swwae.bench.epoch_clock``, without the hand-written twin); the first
epoch of each run is warm-up. The data sweep runs the default widths on 1k, 2k and 4k
training images a epoch (``trainer.limit_train_batches``; validation stays the 500 images
of the split); the width sweep runs widths ``[w, 2w]`` (the default is [32, 64]) on the
whole split. With ``--repeats`` > 1 the points run round-robin, so machine noise hits them
alike; medians are reported.

Linear in the data: the epoch time is fitted by ``t = a + b n`` (a: validation, images,
checkpoints; b: seconds per training image); the training part alone should double with n.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from swwae.bench.epoch_clock import clock_epochs, limit_batches
from swwae.bench.harness import median, set_threads
from swwae.training.process import set_torch_defaults


def fit_line(xs, ys) -> tuple[float, float, float]:
    """Least squares ``y = a + b x``: (a, b, R^2)."""
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx if sxx else float("nan")
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1 - ss_res / ss_tot if ss_tot else float("nan")


def measure(points, args) -> dict:
    """point (size, width) -> {"n": images an epoch, "epoch": [...], "train": [...], ...}."""
    results = {p: {"epoch": [], "train": [], "images": []} for p in points}
    for _ in range(args.repeats):
        for size, width in points:
            overrides = [
                f"trainer.max_epochs={args.epochs}",
                "test=false",
                f"model.widths=[{width},{2 * width}]",
                f"data.batch_size={args.batch}",
                *args.overrides,
            ]
            if size is not None:
                overrides.append(f"++trainer.limit_train_batches={limit_batches(size, args.batch)}")
            with tempfile.TemporaryDirectory(prefix="bench_scaling_") as tmp:
                clock, _ = clock_epochs(overrides, Path(tmp), hand_loop=False)
            kept = clock.lightning[min(1, len(clock.lightning) - 1) :]  # the first epoch warms up
            results[(size, width)]["n"] = clock.train_size
            for key in ("epoch", "train", "images"):
                results[(size, width)][key] += [r[key] for r in kept]
            print(".", end="", flush=True, file=sys.stderr)
    print(file=sys.stderr)
    return {p: {"n": r["n"], **{k: median(r[k]) for k in ("epoch", "train", "images")}} for p, r in results.items()}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000, 4000], help="training images an epoch")
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 32, 64], help="first-stage widths w: [w, 2w]")
    parser.add_argument("--epochs", type=int, default=2, help="epochs a run (the first is warm-up)")
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--base-width", type=int, default=32, help="w of the data sweep (the default widths [32, 64])")
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own choice)")
    parser.add_argument("overrides", nargs="*", help="more Hydra overrides, as for train.py")
    args = parser.parse_args(argv)
    base_width = args.base_width
    set_torch_defaults()
    set_threads(args.threads)
    sizes, widths = sorted(args.sizes), sorted(args.widths)
    full = max(sizes)
    data_points = [(n, base_width) for n in sizes]
    width_points = [(full, w) for w in widths]
    points = list(dict.fromkeys(data_points + width_points))
    r = measure(points, args)

    print(
        f"epoch time of train.py's code path ({' '.join(args.overrides) or 'default config'}), batch {args.batch}; "
        f"torch {torch.__version__}, threads: {torch.get_num_threads()}; median of {args.repeats} run(s) x "
        f"{max(1, args.epochs - 1)} epoch(s) a point\n"
    )
    print(f"data (widths [{base_width}, {2 * base_width}]):\n")
    print(
        "| training images | epoch s | training part s | per 1k images (training) | "
        "ratio to previous: images | epoch | training part |"
    )
    print("|---|---|---|---|---|---|---|")
    prev = None
    for p in data_points:
        q = r[p]
        cells = ["", "", ""]
        if prev is not None:
            cells = [
                f"{q['n'] / prev['n']:.2f}",
                f"{q['epoch'] / prev['epoch']:.2f}",
                f"{q['train'] / prev['train']:.2f}",
            ]
        print(
            f"| {q['n']} | {q['epoch']:.2f} | {q['train']:.2f} | {q['train'] / q['n'] * 1e3:.2f} | "
            + " | ".join(cells)
            + " |"
        )
        prev = q
    if len(data_points) >= 2:
        ns = [r[p]["n"] for p in data_points]
        a, b, r2 = fit_line(ns, [r[p]["epoch"] for p in data_points])
        at, bt, r2t = fit_line(ns, [r[p]["train"] for p in data_points])
        print(
            f"\nlinear fit, epoch: t = {a:.2f} s + {b * 1e3:.2f} ms x images (R^2 = {r2:.4f}); "
            f"training part: t = {at:.2f} s + {bt * 1e3:.2f} ms x images (R^2 = {r2t:.4f})"
        )
        worst = max(abs(r[p]["epoch"] - a - b * r[p]["n"]) / r[p]["epoch"] for p in data_points)
        print(f"largest deviation of a point from the line: {worst:.1%}")

    print(f"\nwidth ({full} training images):\n")
    print(
        "| widths | parameters | epoch s | training part s | images/s (training) | ratio to widths "
        f"[{base_width}, {2 * base_width}] |"
    )
    print("|---|---|---|---|---|---|")
    from swwae.model import SWWAE

    base = r.get((full, base_width))
    for p in width_points:
        q = r[p]
        params = sum(t.numel() for t in SWWAE(widths=[p[1], 2 * p[1]]).parameters())
        ratio = f"{q['epoch'] / base['epoch']:.2f}" if base else ""
        print(
            f"| [{p[1]}, {2 * p[1]}] | {params:,} | {q['epoch']:.2f} | {q['train']:.2f} | "
            f"{q['n'] / q['train']:.0f} | {ratio} |"
        )

    if base:
        print(
            f"\ndefault run (widths [{base_width}, {2 * base_width}], {base['n']} training images): "
            f"{base['n'] / base['epoch']:.0f} training images/s over whole epochs (validation, images and "
            f"checkpoints included), {base['n'] / base['train']:.0f} in the training part; reconstruction "
            f"images {base['images'] * 1e3:.0f} ms an epoch ({base['images'] / base['epoch']:.1%})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
