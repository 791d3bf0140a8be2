"""The default run's epoch alone and beside busy processes, for each way of setting OpenMP's threads.

    python scripts/bench_neighbours.py [--rounds 3] [--epochs 3] [--train-batches 6] [overrides ...]
    python scripts/bench_neighbours.py --candidates default unset PASSIVE spin=10000
    python scripts/bench_neighbours.py --quick        # a smoke run, under a minute: no numbers to read

torch's OpenMP threads wait for work between parallel regions: spinning (fast alone, ruinous
when the cores are taken) or sleeping (fair, but a wake-up at every region). The settings are
read once, when torch loads, so every measurement is a fresh child process that starts with
the candidate's environment and runs train.py's own code path (``swwae.bench.epoch_clock``: the
default config plus the overrides given, ``test=false``) for ``--epochs`` epochs of
``--train-batches`` batches; its cost is the median epoch after the first (warm-up), each
epoch timed whole (training, validation, images, checkpoints).

Candidates (``--candidates``; by default ``default unset PASSIVE ACTIVE spin=1000
threads-fitted``, about 10 minutes on 2 idle cores; OpenMP's variables are cleared from every
child first):

* ``default``: what the job does, ``swwae.threads.choose_threads()`` in the child (one thread
  per usable CPU; ``PASSIVE`` if other threads were runnable as it started: the median of a
  few readings of ``/proc/loadavg`` over 8 ms);
* ``unset``: nothing set (libgomp spins about 3 ms, then sleeps; torch: one thread a CPU);
* ``PASSIVE``, ``ACTIVE``: ``OMP_WAIT_POLICY``;
* ``spin=N``: a bounded spin, ``GOMP_SPINCOUNT=N`` (libgomp, torch's runtime on Linux; about
  100,000 spins a millisecond);
* ``threads-fitted``: one thread per free CPU when the child started (at least one), the wait unset;
* ``passive-if-busy``: ``PASSIVE`` if other threads were runnable when the child started (the
  default without the cgroup quota: the same on most machines, so not run unless named);
* ``threads=N``: ``OMP_NUM_THREADS=N``.

Each round measures every candidate alone, then beside ``--neighbours`` busy processes (Python
busy loops, or torch matmul loops with ``--busy matmul``, started and stopped by the benchmark);
the order of the candidates rotates from round to round, so a load that drifts hits them alike.
Printed: a markdown table, each candidate's median and its paired ratio to the fastest (the
median over rounds of its time over the fastest's in the same round), and whether the
``default`` candidate meets the bars (within 1.05x of the fastest alone, 1.10x beside the busy
processes), and how often the readings each child started with changed within their window
(the first reading alone would then have decided the wait for a passing thread). Nothing is
written into the checkout: the runs go to a temporary folder.
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
CANDIDATES = ["default", "unset", "PASSIVE", "ACTIVE", "spin=1000", "threads-fitted"]
NAMED = [*CANDIDATES, "passive-if-busy"]
BARS = {"alone": 1.05, "busy": 1.10}
QUICK = ["model.widths=[4,8]", "data.batch_size=16", "++trainer.limit_val_batches=1", "+trainer.num_sanity_val_steps=0"]
SPIN = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n    pass\n"
MATMUL = (
    "import time, torch\nend = time.monotonic() + {seconds}\na = torch.randn(256, 256)\n"
    "while time.monotonic() < end:\n    a = torch.tanh(a @ a)\n"
)


def check_candidate(name: str) -> str:
    """argparse type: a known candidate, or one with a positive count."""
    kind, _, count = name.partition("=")
    if name in NAMED or (kind in ("spin", "threads") and count.isdigit() and int(count) > 0):
        return name
    raise argparse.ArgumentTypeError(f"unknown candidate {name!r}: {', '.join(NAMED)}, spin=N or threads=N")


def child_env(candidate: str) -> dict[str, str]:
    """A measured child's environment: OpenMP's variables cleared, then the candidate's."""
    from swwae.threads import THREAD_SETTINGS, WAIT_SETTINGS

    env = {k: v for k, v in os.environ.items() if k not in (*THREAD_SETTINGS, *WAIT_SETTINGS)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    kind, _, count = candidate.partition("=")
    if kind == "spin":
        env["GOMP_SPINCOUNT"] = count
        env["KMP_BLOCKTIME"] = str(max(1, int(count) // 100_000))  # Intel/LLVM OpenMP: milliseconds
    elif kind == "threads":
        env["OMP_NUM_THREADS"] = count
    elif candidate in ("PASSIVE", "ACTIVE"):
        env["OMP_WAIT_POLICY"] = candidate
    return env


def decide_in_child(candidate: str) -> dict:
    """Before torch loads: what the machine looked like, and the variables of the candidates
    that read it."""
    from swwae import threads

    machine = threads.read_machine()
    if candidate == "default":
        threads.choose_threads(machine=machine)
    elif candidate == "passive-if-busy" and machine.free_cpus < machine.usable_cpus:
        os.environ[threads.WAIT_POLICY] = "PASSIVE"
    elif candidate == "threads-fitted":
        os.environ[threads.THREADS] = str(max(1, min(machine.usable_cpus, machine.free_cpus)))
    return {"others_running": machine.others_running, "readings": list(machine.readings)}


def one_reading_differs(record: dict) -> bool:
    """Whether the wait decided from the child's first reading alone (the decision before it
    took several) differs from the one decided from all of them."""
    from swwae.threads import Machine, decide_threads

    cpus = record["threads"]
    readings = record.get("readings") or [record["others_running"]]
    waits = [
        decide_threads({}, Machine(cpus=cpus, others_running=n)).settings.get("OMP_WAIT_POLICY")
        for n in (readings[0], record["others_running"])
    ]
    return waits[0] != waits[1]


def child(candidate: str, epochs: int, overrides: list[str]) -> int:
    """One measured run: print the median epoch time (the first epoch left out) and what it ran with."""
    seen = decide_in_child(candidate)
    import torch

    from swwae.bench.epoch_clock import clock_epochs
    from swwae.training.process import set_torch_defaults

    set_torch_defaults()
    with tempfile.TemporaryDirectory(prefix="bench_neighbours_") as tmp:
        clock, wall = clock_epochs(
            [f"trainer.max_epochs={epochs}", "test=false", *overrides], Path(tmp), hand_loop=False
        )
    epochs_s = [r["epoch"] for r in clock.lightning]
    record = {"epoch_s": statistics.median(epochs_s[1:] or epochs_s), "epochs": epochs_s, "wall_s": wall}
    record |= {"threads": torch.get_num_threads(), "wait": os.environ.get("OMP_WAIT_POLICY", "")} | seen
    print(MARK + json.dumps(record))
    return 0


def measure(candidate: str, epochs: int, overrides: list[str], timeout: float) -> dict:
    """One child run in the candidate's environment: its record (``epoch_s`` and what it ran with)."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", candidate, "--epochs", str(epochs), *overrides]
    done = subprocess.run(cmd, env=child_env(candidate), capture_output=True, text=True, timeout=timeout, cwd=ROOT)
    for line in done.stdout.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK) :])
    raise RuntimeError(f"the {candidate} child failed (exit {done.returncode}): {done.stderr.strip()[-2000:]}")


class Neighbours:
    """``count`` busy processes for the time of a ``with`` block (and at most ``seconds``)."""

    def __init__(self, count: int, kind: str, seconds: float):
        self.code = (MATMUL if kind == "matmul" else SPIN).format(seconds=seconds)
        self.count, self.settle, self.processes = count, 2.0 if kind == "matmul" else 0.5, []

    def __enter__(self):
        env = child_env("unset")  # a neighbour as torch runs it by default
        self.processes = [subprocess.Popen([sys.executable, "-c", self.code], env=env) for _ in range(self.count)]
        if self.processes:
            time.sleep(self.settle)  # let them start (the matmul ones import torch)
        return self

    def __exit__(self, *exc):
        for p in self.processes:
            p.kill()
        for p in self.processes:
            p.wait()


def checkout_commit() -> str:
    """The checkout's commit, for the record; ``?`` without git."""
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    except OSError:
        return "?"
    return done.stdout.strip() or "?"


def paired_ratio(times: list[float], fastest: list[float]) -> float:
    return statistics.median(t / f for t, f in zip(times, fastest))


def report(records: dict, candidates: list[str], args, started: float, load: float) -> None:
    """The table, and whether the default meets the bars."""
    conditions = ("alone", "busy")
    median = {(c, k): statistics.median(r["epoch_s"] for r in records[c, k]) for c in conditions for k in candidates}
    fastest = {c: min(candidates, key=lambda k: median[c, k]) for c in conditions}
    ratio = {
        (c, k): paired_ratio([r["epoch_s"] for r in records[c, k]], [r["epoch_s"] for r in records[c, fastest[c]]])
        for c in conditions
        for k in candidates
    }
    print(
        f"\n{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, commit {checkout_commit()}: "
        f"epoch of the default run{' (' + ' '.join(args.overrides) + ')' if args.overrides else ''}: median over "
        f"{args.rounds} rounds of each child's median epoch ({args.epochs} epochs, the first left out), alone and "
        f"beside {args.neighbours} busy processes ({args.busy}); {os.cpu_count()} CPUs, load average at the "
        f"start {load:.2f}; {time.perf_counter() - started:.0f} s in all\n"
    )
    busy = f"beside {args.neighbours} busy"
    print(
        f"| candidate | alone s/epoch | x fastest | {busy} s/epoch | x fastest | threads alone / busy "
        "| others runnable at start, alone / busy |"
    )
    print("|---|---:|---:|---:|---:|---|---|")
    for k in candidates:
        first = [records[c, k][0] for c in conditions]
        threads = " / ".join(f"{r['threads']}{' P' if r['wait'] == 'PASSIVE' else ''}" for r in first)
        seen = " / ".join(",".join(str(r["others_running"]) for r in records[c, k]) for c in conditions)
        cells = " | ".join(f"{median[c, k]:.2f} | {ratio[c, k]:.3f}x" for c in conditions)
        print(f"| {k} | {cells} | {threads} | {seen} |")
    print(
        "\n(threads: torch's thread count in the first round, P: OMP_WAIT_POLICY=PASSIVE; others runnable: "
        "other processes' runnable threads as each child started, round by round: the median of "
        f"{len(records[conditions[0], candidates[0]][0].get('readings') or [0])} readings of /proc/loadavg)"
    )
    for c in conditions:
        children = [r for k in candidates for r in records[c, k]]
        differ = sum(one_reading_differs(r) for r in children)
        passing = sum(len(set(r.get("readings") or [])) > 1 for r in children)
        print(
            f"{c}: readings that changed within the window in {passing} of {len(children)} children; "
            f"the first reading alone would have chosen another wait in {differ}"
        )
    if "default" in candidates:
        verdict = [f"{ratio[c, 'default']:.3f}x the fastest {c} (bar {BARS[c]:.2f}x)" for c in conditions]
        meets = all(ratio[c, "default"] <= BARS[c] for c in conditions)
        print(f"default: {', '.join(verdict)}: {'meets the bars' if meets else 'MISSES a bar'}")


def parse(argv):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of every candidate, alone and busy")
    parser.add_argument("--epochs", type=int, default=3, help="epochs per measured run (the first is warm-up)")
    parser.add_argument(
        "--train-batches",
        type=int,
        default=6,
        help="training batches an epoch (trainer.limit_train_batches; the default run has 32; 0: all)",
    )
    parser.add_argument("--neighbours", type=int, default=2, help="busy processes beside the run")
    parser.add_argument("--busy", choices=("spin", "matmul"), default="spin", help="what a neighbour runs")
    parser.add_argument("--candidates", nargs="+", type=check_candidate)
    parser.add_argument("--timeout", type=float, default=300, help="seconds before a measured run is given up")
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: tiny net, 1 round, 2 epochs, default and unset unless named"
    )
    parser.add_argument("--child", type=check_candidate, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="Hydra overrides, as for train.py")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.epochs, args.train_batches = 1, 2, 2
        args.overrides = [*QUICK, *args.overrides]
    args.candidates = args.candidates or (["default", "unset"] if args.quick else CANDIDATES)
    return args


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        return child(args.child, args.epochs, args.overrides)
    if args.train_batches:
        args.overrides = [f"++trainer.limit_train_batches={args.train_batches}", *args.overrides]
    candidates = list(dict.fromkeys(args.candidates))
    records = {(c, k): [] for c in ("alone", "busy") for k in candidates}
    started, load = time.perf_counter(), os.getloadavg()[0]
    for round_ in range(args.rounds):
        shift = round_ % len(candidates)
        order = candidates[shift:] + candidates[:shift]
        for condition, count in (("alone", 0), ("busy", args.neighbours)):
            with Neighbours(count, args.busy, len(order) * (args.timeout + 5)):
                for candidate in order:
                    record = measure(candidate, args.epochs, args.overrides, args.timeout)
                    records[condition, candidate].append(record)
                    print(
                        f"round {round_ + 1}, {condition}, {candidate}: {record['epoch_s']:.2f} s an epoch "
                        f"({record['threads']} threads{', PASSIVE' if record['wait'] == 'PASSIVE' else ''})",
                        file=sys.stderr,
                        flush=True,
                    )
    report(records, candidates, args, started, load)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
