"""The default run's epoch time on a quiet machine and beside busy neighbours, by OpenMP wait policy.

    python scripts/bench_neighbours.py [--repeats 2] [--epochs 3] [--train-batches 6] [--neighbours 2] [overrides ...]
    python scripts/bench_neighbours.py --variants unset PASSIVE threads=1

torch's OpenMP threads spin while they wait for work (``OMP_WAIT_POLICY`` unset: OpenMP's
default); with ``PASSIVE`` they sleep. The policy is read once, when torch loads, so every
measurement is a fresh process: a child runs train.py's own code path
(``swwae.bench.epoch_clock``, the default config plus the overrides given, ``test=false``)
for ``--epochs`` epochs of ``--train-batches`` batches (a quarter of the default run's
epoch, to keep the whole benchmark within minutes) and reports the median epoch time after the first (warm-up).

Each repeat runs every variant quiet, then every variant beside ``--neighbours`` busy
processes (each a bounded Python busy loop, ``--busy matmul``: a torch matmul loop at torch's
default threads and wait policy; all are killed when the block ends). The order of the
variants alternates from repeat to repeat, so a load that drifts hits them alike. Printed:
the medians over repeats, each variant's ratio to the first one (the paired ratio: the median
of the per-repeat ratios) and the slowdown beside the neighbours.

A variant is ``unset`` (OMP_WAIT_POLICY removed from the child's environment), a policy
(``PASSIVE``, ``ACTIVE``) or ``threads=N`` (OMP_NUM_THREADS=N, the policy unset). This script
does not set the policy itself (the children must start with the variant's environment).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MARK = "bench_neighbours:"
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
MATMUL = (
    "import time, torch\nend = time.monotonic() + {seconds}\na = torch.randn(256, 256)\n"
    "while time.monotonic() < end:\n    a = torch.tanh(a @ a)\n"
)


def child_env(variant: str) -> dict[str, str]:
    """The environment of a measured child: the variant's OpenMP settings, nothing else changed."""
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    if variant.startswith("threads="):
        env["OMP_NUM_THREADS"] = variant.partition("=")[2]
    elif variant != "unset":
        env["OMP_WAIT_POLICY"] = variant
    return env


def measure(variant: str, epochs: int, overrides: list[str], timeout: float) -> float:
    """Median epoch seconds (after the first) of one child run in the variant's environment."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--epochs", str(epochs), *overrides]
    done = subprocess.run(cmd, env=child_env(variant), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])["epoch_s"]
    raise RuntimeError(f"the {variant} child failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


class Neighbours:
    """``count`` busy processes for the time of a ``with`` block (and at most ``seconds``)."""

    def __init__(self, count: int, kind: str, seconds: float):
        self.code = (MATMUL if kind == "matmul" else SPIN).format(seconds=seconds)
        self.count, self.processes = count, []

    def __enter__(self):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}  # a neighbour as torch runs it
        self.processes = [subprocess.Popen([sys.executable, "-c", self.code], env=env) for _ in range(self.count)]
        time.sleep(1.0)  # let them start (the matmul ones import torch)
        return self

    def __exit__(self, *exc):
        for p in self.processes:
            p.kill()
        for p in self.processes:
            p.wait()


def child(epochs: int, overrides: list[str]) -> int:
    """One measured run: print the median epoch time (the first epoch left out)."""
    from swwae.bench.epoch_clock import run
    from swwae.training.run import set_torch_defaults

    set_torch_defaults()
    with tempfile.TemporaryDirectory(prefix="bench_neighbours_") as tmp:
        clock, wall = run([f"trainer.max_epochs={epochs}", "test=false", *overrides], Path(tmp), hand_loop=False)
    epochs_s = [r["epoch"] for r in clock.lightning]
    print(
        MARK + json.dumps({"epoch_s": statistics.median(epochs_s[1:] or epochs_s), "epochs": epochs_s, "wall_s": wall})
    )
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2, help="rounds of every variant, quiet and busy")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per measured run (the first is warm-up)")
    parser.add_argument(
        "--train-batches",
        type=int,
        default=6,
        help="training batches an epoch (trainer.limit_train_batches; the default run has 32; 0: all)",
    )
    parser.add_argument("--neighbours", type=int, default=2, help="busy processes beside the run")
    parser.add_argument(
        "--busy",
        choices=("spin", "matmul"),
        default="spin",
        help="what a neighbour runs: a Python busy loop, or a torch matmul loop",
    )
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["unset", "PASSIVE"],
        help="unset, an OMP_WAIT_POLICY value, or threads=N (the first is the baseline)",
    )
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a measured run is given up")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for train.py")
    args = parser.parse_args(argv)
    if args.child:
        return child(args.epochs, args.overrides)
    if args.train_batches:
        args.overrides = [f"++trainer.limit_train_batches={args.train_batches}", *args.overrides]

    conditions = ("quiet", f"{args.neighbours} busy")
    seconds = {(c, v): [] for c in conditions for v in args.variants}
    started, load = time.perf_counter(), os.getloadavg()[0]
    for repeat in range(args.repeats):
        order = args.variants if repeat % 2 == 0 else args.variants[::-1]
        for condition in conditions:
            busy = condition != "quiet" and args.neighbours > 0
            budget = len(order) * (args.timeout + 5)
            with Neighbours(args.neighbours if busy else 0, args.busy, budget):
                for variant in order:
                    s = measure(variant, args.epochs, args.overrides, args.timeout)
                    seconds[condition, variant].append(s)
                    print(
                        f"repeat {repeat + 1}, {condition}, {variant}: {s:.2f} s an epoch", file=sys.stderr, flush=True
                    )

    base = args.variants[0]
    print(
        f"\nepoch time of the default run{' (' + ' '.join(args.overrides) + ')' if args.overrides else ''}: "
        f"median over {args.repeats} repeats of each run's median epoch ({args.epochs} epochs, the first left "
        f"out), quiet and beside {args.neighbours} busy processes ({args.busy}); {os.cpu_count()} cores, "
        f"load average at the start {load:.1f}; {time.perf_counter() - started:.0f} s in all\n"
    )
    print(
        f"| variant | quiet s | beside {args.neighbours} busy s | slowdown busy/quiet | "
        f"quiet vs {base} | busy vs {base} |"
    )
    print("|---|---|---|---|---|---|")
    for v in args.variants:
        q, b = (statistics.median(seconds[c, v]) for c in conditions)
        paired = [statistics.median(x / y for x, y in zip(seconds[c, v], seconds[c, base])) for c in conditions]
        print(f"| {v} | {q:.2f} | {b:.2f} | {b / q:.2f}x | {paired[0]:.3f}x | {paired[1]:.3f}x |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
