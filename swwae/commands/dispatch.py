"""``swwae <subcommand> [arguments]``: one installed command for every job of the package.

Each subcommand is a module of ``swwae.commands`` with ``main(argv) -> exit status``, imported
only when it runs; ``train.py`` and ``scripts/<job>.py`` of a clone are shims over the same
modules, so the two ways of calling a job cannot drift apart. Nothing heavy is imported before a
subcommand runs: ``swwae --help`` and an unknown subcommand (one ``error:`` line, exit status 2)
answer without torch. A new subcommand is one module and one line of ``SUBCOMMANDS``.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from dataclasses import dataclass

from swwae.cli import one_line_errors
from swwae.commands import completion
from swwae.plugins import load_plugins
from swwae.version import __version__

PROG = "swwae"


@dataclass(frozen=True)
class Subcommand:
    module: str  # swwae.commands.<module>, whose main(argv) runs it
    summary: str  # one line in ``swwae --help``
    # main finds sys.argv as the process was started (``swwae <name> ...``): the command line that
    # Lightning's DDP runs again for its other processes (train)
    keeps_command_line: bool = False

    def run(self, name: str, args: list[str]) -> int:
        """``main(args)`` of its module; usage lines say ``swwae <name>`` (argparse's prog is
        ``sys.argv[0]``, put back afterwards: the tests run subcommands in their own process)."""
        saved = sys.argv
        if not self.keeps_command_line:
            sys.argv = [f"{PROG} {name}", *args]
        try:
            return importlib.import_module(f"swwae.commands.{self.module}").main(args)
        finally:
            sys.argv = saved


SUBCOMMANDS = {
    "train": Subcommand(
        "train", "train a model: Hydra overrides such as model=swwae_hard (-m sweeps; --help)", keeps_command_line=True
    ),
    "evaluate": Subcommand("evaluate", "test metrics and a reconstruction PNG of a checkpoint"),
    "export": Subcommand("export", "a model folder (safetensors) and/or an ONNX file of a network"),
    "probe": Subcommand("probe", "linear and k-NN probes of frozen features, with controls"),
    "project": Subcommand("project", "deconvnet projections of a stage's strongest activations"),
    "compare": Subcommand("compare", "a sweep folder's summary table and plot, again"),
    "runs": Subcommand("runs", "the runs under checkpoints/: finished or not, epochs, the best monitored value"),
    "feature-study": Subcommand("feature_study", "the feature study's report: which where gives the best what"),
    "semi-map": Subcommand("semi_map", "the semi-supervised map's report: the gain over labels-only, by labels"),
    "where-report": Subcommand("where_report", "arms paired by seed: models (the where study), or a setting's values"),
    "device-check": Subcommand("device_check", "on a GPU: the package's CUDA training paths, in minutes"),
}


def exit_status(code) -> int:
    """A ``SystemExit`` code as the exit status Python would give it."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


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
        "python -m swwae is the same command; tab completion (bash, zsh):",
        f'eval "$({PROG} -sc install=bash)" (fish: {PROG} -sc install=fish | source).',
        f"example: {PROG} train model=swwae_hard, then {PROG} runs",
    ]
    return "\n".join(lines)


def unknown(name: str) -> str:
    close = difflib.get_close_matches(name, SUBCOMMANDS, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"unknown subcommand {name!r}: {hint}choose one of {', '.join(SUBCOMMANDS)} ({PROG} --help)"


@one_line_errors  # the jobs report their own bad input, this is the last guard; and a reader gone (| head)
def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if not args or args[0] in ("-h", "--help"):
        print(overview())
        return 0
    if args[0] == "--version":
        print(f"{PROG} {__version__}")
        return 0
    name, rest = args[0], args[1:]
    completing = completion.asks_for_completion([name]) or (name == "train" and completion.asks_for_completion(rest))
    if name not in SUBCOMMANDS and not completing:
        print(f"error: {unknown(name)}", file=sys.stderr)
        return 2
    try:
        if completing:  # Hydra's tab completion, of the command swwae
            train = importlib.import_module(f"swwae.commands.{SUBCOMMANDS['train'].module}")
            return completion.main(rest if name == "train" else args, PROG, SUBCOMMANDS, train.main)
        load_plugins()  # a lab's own parts, in every subcommand (swwae.plugins)
        return SUBCOMMANDS[name].run(name, rest)
    except SystemExit as done:  # sys.exit in the job (argparse's --help, train's errors)
        return exit_status(done.code)
