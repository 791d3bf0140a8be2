"""The device check's summary (``scripts/device_check.sh``): how each step ended, the tests'
tallies, and the lines of each benchmark's output that the tables of docs/performance.md ("On a
GPU") take, quoted as they are (each table with its header and rule, ready to paste).

    python -m swwae.bench.device_summary OUT SECONDS    # OUT/summary.md from the files in OUT, printed too

The check writes it as each step begins, with that step marked running (``running.txt`` holds its
name while it runs), and once more when it ends, stopped from outside (TERM) or not: a check killed
(KILL, which no process can answer) leaves the summary of the steps it finished and the one it was
in, marked cut short. It imports the standard library alone (no torch: a fraction of a second).

Why here and not in the script: the lines are picked by patterns of the benchmarks' own table
rows, and ``tests/test_benchmarks.py`` holds each pattern to what its benchmark prints, on any
machine. A pattern that had drifted from its table would leave the summary of a GPU run, the
rare few minutes one is lent, without its figures.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

RULE = r"\|(-+:?\|)+$"  # a Markdown table's rule, quoted with its header


@dataclass(frozen=True)
class Quote:
    """The lines of ``file`` (one benchmark's outputs, appended run after run) that match
    ``pattern`` at their start, under ``title``."""

    title: str
    file: str
    pattern: str

    def lines(self, text: str) -> list[str]:
        return [line for line in text.splitlines() if re.match(f"(?:{self.pattern}|{RULE})", line)]


QUOTES = (
    Quote(
        "pool + unpool, forward + backward, against native max (un)pooling, then each variant's kernels and"
        " their time (bench_pooling.md):",
        "bench_pooling.md",
        r"(input \(|\| (case|\d+x\d+ stride \d+ \| (hard|soft|soft \(reference\))) \||where each variant's pool"
        r"|\| (kernel|op) \(ms a call|\| [^|]+ \|( [\d.]* \|)+$)",
    ),
    Quote(
        "training step against the native twin (bench_training.md; 32-true with where each variant's step goes,"
        " then bf16-mixed with each variant in channels_last against plain):",
        "bench_training.md",
        r"(training step \(|\| (shapes|\w+ [\dx]+ \| (hard|soft)|loss check|watched|read every step) \|"
        r"|channels_last: each|where each variant|\| kind of work|\| [^|]+ \| [\d.]+ \| [\d.]+ \|)",
    ),
    Quote(
        "the paper's CIFAR-10 preset on the GPU (bench_presets.md; 32-true, bf16-mixed, + channels_last and where"
        " its step's time goes, + loader, + batch 512; + compile where run):",
        "bench_presets.md",
        r"(measured on |where a step of |\| [\w.-]+ \| |\| kind of work \||\| [^|]+ \| [\d.]+ \| [\d.]+% \|)",
    ),
    Quote(
        "an epoch through train.py against the hand-written loop on the GPU (bench_epoch.md; MNIST, CIFAR-shaped,"
        " then MNIST in bf16-mixed + channels_last, with its panels painted in the background, and compiled, where"
        " run):",
        "bench_epoch.md",
        r"(one epoch on|\| (loop|train.py|hand loop|part of an epoch|train|val[ |]|images|checkpoints|after validation)"
        r"|beyond the hand loop|target)",
    ),
    Quote(
        "the default MNIST run's metrics in 32-true and bf16-mixed on the GPU, 3 seeds each (train.py -m: its"
        " sweep's precision_sweep/summary.md, where run):",
        "precision_sweep/summary.md",
        r"(\d+ jobs, |\| )",
    ),
    Quote(
        "the same runs paired by seed (swwae where-report --by trainer.precision: precision_report.md, where run):",
        "precision_report.md",
        r"(\d+ runs, |\| |Test (error|reconstruction MSE), paired)",
    ),
)
# the test steps' outputs: (title, file, whether the failed tests are listed too)
TESTS = (
    ("CUDA tests", "cuda_tests.txt", True),
    ("fused kernels against the reference on the GPU", "fused_tests.txt", False),
)
RUNNING = "running.txt"  # the name of the step running, written as it begins and taken away as it ends
CLOSING = re.compile(r"=+ .*\b(passed|failed|error|errors|skipped|deselected)\b.* in [\d.]+s")


def set_apart(lines: list[str]) -> list[str]:
    """``lines`` with a blank line wherever a table starts or ends: in Markdown a line right under
    a table, or the next table's header, would be read as one more row of it."""
    out: list[str] = []
    for i, line in enumerate(lines):
        header = i + 1 < len(lines) and re.match(RULE, lines[i + 1])
        if out and (out[-1].startswith("|") != line.startswith("|") or header):
            out.append("")
        out.append(line)
    return out


def tally(text: str, failures: bool = True) -> list[str]:
    """pytest's closing line, or, for a run cut short, what its ``-v`` lines say; then (with
    ``failures``) the tests that failed, at most 20 lines. No output at all is a step that never
    ran (skipped for time, or its test stack missing): not a run cut short with nothing passed."""
    if not text.strip():
        return ["not run (no output)"]
    closing = [line for line in text.splitlines() if CLOSING.match(line)]
    if closing:
        lines = [closing[-1]]
        failed = [line for line in text.splitlines() if re.match(r"(FAILED|ERROR) ", line)]
    else:
        counts = {word: len(re.findall(rf" {word}\b", text)) for word in ("PASSED", "FAILED", "ERROR")}
        lines = [
            f"cut short: {counts['PASSED']} passed, {counts['FAILED']} failed, {counts['ERROR']} errors before its"
            " time ran out"
        ]
        # a -v line: "tests/x.py::t FAILED  [ 2%]" in one process, "[gw1] [ 2%] FAILED tests/x.py::t" in workers
        verdict = r" (FAILED|ERROR) +\[|^\[gw\d+\] \[ *\d+%\] (FAILED|ERROR) "
        failed = [line for line in text.splitlines() if re.search(verdict, line)]
    return lines + (failed[:20] if failures else [])


def read(out: Path, name: str) -> str:
    path = out / name
    return path.read_text(errors="replace") if path.is_file() else ""


def summary(out: Path, seconds: int) -> str:
    """The summary of the device check whose files are in ``out`` and which took ``seconds``; where
    a step is still marked running (``running.txt``), the summary of a check that had run
    ``seconds`` when that step began, and may have been killed in it."""
    env = read(out, "env.txt").strip().splitlines()
    running = read(out, RUNNING).strip()
    lines = [f"# device check, {time.strftime('%Y-%m-%d %H:%M')}, {env[-1] if env else 'no env.txt'}", ""]
    if running:
        lines += [
            f"Written as the step marked running began, {seconds} s in. The check writes this summary again"
            " as each step begins and when it ends: one left like this was killed from outside in that step,"
            " and the steps after it never ran.",
            "",
        ]
    steps = read(out, "steps.md").splitlines()
    if running:
        steps.append(f"| {running} | cut short: running when this summary was written | - |")
    lines += ["| step | status | seconds |", "|---|---|---:|", *steps, ""]
    for title, name, failures in TESTS:
        first, *rest = tally(read(out, name), failures)
        lines += [f"{title}: {first}", *rest, ""]
    for quote in QUOTES:
        lines += [*set_apart([quote.title, *quote.lines(read(out, quote.file))]), ""]
    lines.append(f"{seconds} s {'when this summary was written' if running else 'in all'}; every output in {out}/")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or not args[1].isdigit():
        print("usage: python -m swwae.bench.device_summary OUT SECONDS", file=sys.stderr)
        return 2
    out = Path(args[0])
    text = summary(out, int(args[1]))
    (out / "summary.md.tmp").write_text(text)  # then in place whole: a check killed as it writes keeps the last one
    os.replace(out / "summary.md.tmp", out / "summary.md")
    try:
        print(text, end="", flush=True)
    except BrokenPipeError:  # its reader gone (a check stopped from outside, with its tee): the file is written
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # and nothing left to flush at exit
    return 0


if __name__ == "__main__":
    sys.exit(main())
