"""What the scripts under ``scripts/`` share: argparse that reports a usage error as one line."""

from __future__ import annotations

import argparse
import functools
import os
import sys
from pathlib import Path

from swwae.errors import ConfigError, UserError
from swwae.install import as_installed


class OneLineParser(argparse.ArgumentParser):
    """argparse whose usage errors are a ``ConfigError``: a script prints them as its one
    ``error:`` line (exit status 2) like any other bad input, not as usage plus error."""

    def error(self, message):
        raise ConfigError(message)


def script_parser(doc: str | None) -> OneLineParser:
    """A script's parser: its module docstring, kept as written (in a clone's words, put in
    this install's by ``swwae.install.as_installed``), is its ``--help``."""
    return OneLineParser(description=doc and as_installed(doc), formatter_class=argparse.RawDescriptionHelpFormatter)


def count(text: str) -> int:
    """argparse's type for a number of things to show: a whole number, at least 1 (0 has
    nothing to draw, and a negative count would slice images off the end instead)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def add_checkpoint_folders(parser: argparse.ArgumentParser, reader: str) -> None:
    """``--checkpoints DIR`` (repeatable; default ``checkpoints``): where ``reader`` may open a
    checkpoint that a sweep's record names, besides the sweep folder (a record never decides)."""
    parser.add_argument(
        "--checkpoints",
        type=Path,
        action="append",
        default=None,
        metavar="DIR",
        help=f"a folder {reader} may read checkpoints from, beside the sweep folder (repeatable; default: checkpoints)",
    )


def one_line_errors(main):
    """A script's ``main(argv)``: bad input (a ``UserError``) is one ``error:`` line on stderr
    and exit status 2, whatever the script was doing."""

    @functools.wraps(main)
    def guarded(argv=None) -> int:
        try:
            status = main(argv)
            sys.stdout.flush()  # here, where a reader gone is caught, not in Python's exit
            return status
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        except BrokenPipeError:
            return reader_gone()

    return guarded


def reader_gone() -> int:
    """The exit status of a command whose output's reader stopped reading (``swwae runs | head``):
    as a Unix tool's, killed by SIGPIPE, without a traceback. What is still buffered goes nowhere
    (Python's recipe: stdout onto the null device), or Python's exit would fail on it again."""
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, sys.stdout.fileno())
    os.close(null)
    return 141  # 128 + SIGPIPE (13), as the shell reports it; signal.SIGPIPE is not on Windows
