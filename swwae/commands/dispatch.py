"""``swwae <subcommand> [arguments]``: one installed command for the checkout's programs.

Each subcommand is the program it names, run in this process as its own command line would
run it, so there is one copy of each and the two ways of calling it cannot drift apart:

* ``train`` runs ``train.py`` as ``python train.py`` does (its ``__main__`` block: the
  ``model.arch`` quoting, then Hydra's command line: overrides, ``-m`` sweeps, ``--help``,
  the exit statuses);
* ``evaluate``, ``export``, ``probe``, ``project``, ``compare`` call the ``main(argv)`` of
  ``scripts/<name>.py``, loaded by its file path (the current folder plays no part);
* ``device-check`` runs ``bash scripts/device_check.sh`` with this interpreter as its Python;
* ``runs`` is ``swwae.commands.runs``.

Nothing heavy is imported before a subcommand runs: ``swwae --help`` and an unknown
subcommand (one ``error:`` line, exit status 2) answer without torch.
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import runpy
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from swwae.cli import OneLineParser
from swwae.commands.checkout import checkout_file
from swwae.errors import UserError
from swwae.version import __version__

PROG = "swwae"


@dataclass(frozen=True)
class Subcommand:
    summary: str  # one line in ``swwae --help``
    run: Callable[[str, list[str]], int]  # (its name, its arguments) -> exit status


# helpers


def command_line(name: str, args: list[str]) -> list[str]:
    """``sys.argv`` as the program sees it: usage lines say ``swwae <name>``."""
    return [f"{PROG} {name}", *args]


class ArgvAndPath:
    """``with ArgvAndPath(argv, folder):`` the block sees ``argv`` as ``sys.argv`` and
    ``folder`` first on ``sys.path``, as ``python <folder>/<program>.py`` would; both are put
    back afterwards (the tests run subcommands in their own process)."""

    def __init__(self, argv: list[str], folder: Path):
        self.argv, self.folder = argv, str(folder)

    def __enter__(self):
        self.saved = sys.argv, list(sys.path)
        sys.argv = self.argv
        sys.path.insert(0, self.folder)

    def __exit__(self, *exc):
        sys.argv, sys.path[:] = self.saved[0], self.saved[1]


def exit_status(code) -> int:
    """A ``SystemExit`` code as the exit status Python would give it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


# the subcommands


def train(name: str, args: list[str]) -> int:
    """``python train.py <args>``: train.py runs as ``__main__``, from its own file, so Hydra
    finds ``configs/`` beside it and names the job ``train``."""
    path = checkout_file("train.py", needs=("configs",))
    with ArgvAndPath([str(path), *args], path.parent):
        runpy.run_path(str(path), run_name="__main__")
    return 0


def script(file: str) -> Callable[[str, list[str]], int]:
    """The subcommand that calls ``main(argv)`` of ``scripts/<file>``."""

    def run(name: str, args: list[str]) -> int:
        path = checkout_file(f"scripts/{file}")
        spec = importlib.util.spec_from_file_location(f"swwae_script_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        with ArgvAndPath(command_line(name, args), path.parent):
            sys.modules[spec.name] = module  # as a script's own module is: pickles of its functions resolve
            spec.loader.exec_module(module)
            return module.main(args)

    return run


def device_check(name: str, args: list[str]) -> int:
    """``bash scripts/device_check.sh``, its Python this one (unless ``PYTHON`` names another),
    so the checks run where swwae is installed, not with whatever ``python`` is on PATH."""
    path = checkout_file("scripts/device_check.sh")
    parser = OneLineParser(
        prog=command_line(name, [])[0],
        description=script_header(path),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.parse_args(args)  # --help; it takes no arguments (anything else: one error line)
    env = dict(os.environ, PYTHON=os.environ.get("PYTHON", sys.executable))
    return subprocess.run(["bash", str(path)], env=env).returncode


def script_header(path: Path) -> str:
    """The comment block at the top of a shell script, without its ``#``s."""
    lines = []
    for line in path.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return "\n".join(lines).strip()


def runs(name: str, args: list[str]) -> int:
    from swwae.commands.runs import main  # torch: only when the subcommand runs

    return main(args)


SUBCOMMANDS = {
    "train": Subcommand("train a model: Hydra overrides as for python train.py (-m sweeps; --help lists them)", train),
    "evaluate": Subcommand(
        "test metrics and a reconstruction PNG of a checkpoint (scripts/evaluate.py)", script("evaluate.py")
    ),
    "export": Subcommand(
        "a model folder (safetensors) and/or an ONNX file of a network (scripts/export.py)", script("export.py")
    ),
    "probe": Subcommand(
        "linear and k-NN probes of frozen features, with controls (scripts/probe.py)", script("probe.py")
    ),
    "project": Subcommand(
        "deconvnet projections of a stage's strongest activations (scripts/project.py)", script("project.py")
    ),
    "compare": Subcommand(
        "a sweep folder's summary table and plot, again (scripts/compare_runs.py)", script("compare_runs.py")
    ),
    "runs": Subcommand("the runs under checkpoints/: finished or not, epochs, the best monitored value", runs),
    "device-check": Subcommand(
        "the CUDA tests and benchmarks on a GPU, in minutes (scripts/device_check.sh)", device_check
    ),
}


def overview() -> str:
    width = max(map(len, SUBCOMMANDS)) + 2
    lines = [
        f"usage: {PROG} <subcommand> [arguments]",
        "",
        f"Stacked What-Where Auto-encoders: train, evaluate, probe and share them (swwae {__version__}).",
        "",
        "subcommands:",
    ]
    lines += [f"  {name:<{width}}{sub.summary}" for name, sub in SUBCOMMANDS.items()]
    lines += [
        "",
        f"{PROG} <subcommand> --help shows a subcommand's own options; {PROG} --version the version;",
        "python -m swwae is the same command.",
        f"example: {PROG} train model=swwae_hard, then {PROG} runs",
    ]
    return "\n".join(lines)


def unknown(name: str) -> str:
    close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown subcommand {name!r}: {hint}choose one of {', '.join(SUBCOMMANDS)} ({PROG} --help)"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(overview())
        return 0
    if args[0] == "--version":
        print(f"{PROG} {__version__}")
        return 0
    name, rest = args[0], args[1:]
    if name not in SUBCOMMANDS:
        print(f"error: {unknown(name)}", file=sys.stderr)
        return 2
    try:
        return SUBCOMMANDS[name].run(name, rest)
    except SystemExit as done:  # sys.exit in the program (argparse's --help, train.py's errors)
        return exit_status(done.code)
    except UserError as err:  # no checkout (the programs report their own bad input as well)
        print(f"error: {err}", file=sys.stderr)
        return 2
