"""How long a command takes to answer bad input or --help, against ``python -c "import torch"``.

    python scripts/bench_first_line.py [--repeats 5]

The quality bar: an ``error:`` line in at most 1.5x the time torch takes to import. Each
repeat runs every command once, in a fresh process, in an order that rotates from repeat to
repeat (this machine's speed drifts: the commands are compared inside each repeat, never
against a number measured earlier). Printed: each command's median wall time and its paired
ratio to ``import torch`` (the median of the per-repeat ratios). The commands run in a
temporary folder, so nothing is written into the checkout.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = "import torch"
COMMANDS = {
    REFERENCE: [sys.executable, "-c", "import torch"],
    "train.py model=swwae_soft model.beta=0": [
        sys.executable,
        str(ROOT / "train.py"),
        "model=swwae_soft",
        "model.beta=0",
    ],
    "train.py model.kernel_size=41": [sys.executable, str(ROOT / "train.py"), "model.kernel_size=41"],
    "train.py run_name=../x": [sys.executable, str(ROOT / "train.py"), "run_name=../x"],
    "train.py --help": [sys.executable, str(ROOT / "train.py"), "--help"],
    "swwae train model.kernel_size=41": [sys.executable, "-m", "swwae", "train", "model.kernel_size=41"],
    "swwae --help": [sys.executable, "-m", "swwae", "--help"],
}


def seconds(command: list[str], folder: str) -> float:
    started = time.perf_counter()
    subprocess.run(command, cwd=folder, capture_output=True, check=False)
    return time.perf_counter() - started


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    names = list(COMMANDS)
    times: dict[str, list[float]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                times[name].append(seconds(COMMANDS[name], folder))
            print(f"repeat {repeat + 1}/{args.repeats} done", file=sys.stderr, flush=True)
    print(f"{'command':<42} {'median s':>9} {'x import torch (paired)':>24}")
    for name in names:
        ratio = statistics.median(t / r for t, r in zip(times[name], times[REFERENCE]))
        print(f"{name:<42} {statistics.median(times[name]):>9.2f} {ratio:>24.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
