"""Tab completion of ``swwae`` in bash, zsh and fish, by Hydra's own completion.

``eval "$(swwae train -sc install=bash)"`` (or ``swwae -sc install=bash``) prints Hydra's script for
the command ``swwae``. The shell then asks ``swwae -sc query=bash`` for candidates, with the line
typed so far in ``COMP_LINE``; ``main`` answers: the subcommands for the first word, Hydra's
candidates (groups, options, keys) after ``swwae train``, and nothing after the other subcommands,
whose arguments the shell completes as file names. ``python train.py`` is Hydra's own app and
needs none of this (its script registers ``python``).
"""

from __future__ import annotations

import os
import re
import sys

from swwae.errors import UserError

FLAGS = ("-sc", "--shell-completion")  # Hydra's flag that installs completion and answers its queries
ACTIONS = ("install", "uninstall", "query")  # what the flag takes, as <action>=<shell>
SHELLS = ("bash", "zsh", "fish")  # those Hydra's completion plugins serve
SEPARATORS = {"bash": " ", "fish": "\n"}  # how Hydra's plugins print their candidates, by shell


def asks_for_completion(args: list[str]) -> bool:
    """Whether ``args`` are Hydra's shell-completion flag's (install, uninstall or query)."""
    return any(arg in FLAGS for arg in args)


def request(args: list[str]) -> tuple[str, str]:
    """(action, shell) of the completion flag's ``<action>=<shell>`` in ``args``; UserError (one
    line, where Hydra raises a traceback and exits 0) unless there is one, of a shell it serves."""
    asked = [arg.partition("=") for arg in args if arg.partition("=")[0] in ACTIONS]
    if len(asked) != 1 or asked[0][2] not in SHELLS:
        choices = ", ".join(f"{action}=<{'|'.join(SHELLS)}>" for action in ACTIONS)
        given = " ".join(arg for arg in args if arg in FLAGS or "=" in arg)
        raise UserError(f"{given}: give one of {choices} (Hydra's tab completion)")
    return asked[0][0], asked[0][2]


def completing_subcommand(line: str) -> bool:
    """Whether the word being typed in ``line`` (a command line up to the cursor) is the subcommand."""
    words = line.split()
    return len(words) < 2 or (len(words) == 2 and not line[-1:].isspace())


def without_subcommand(line: str) -> str:
    """``line`` as Hydra's query reads a line of its own app: ``swwae train model=`` -> ``swwae model=``."""
    return re.sub(r"^(\s*\S+)\s+\S+", r"\1", line, count=1)


def main(args: list[str], prog: str, subcommands, train_main) -> int:
    """``<prog> -sc <install|uninstall|query>=<shell>`` (``args``: the flag and its value): the
    candidates among ``subcommands`` (names), or those of ``train_main`` (``swwae.commands.train``'s
    main, which imports this module; ``prog`` is the command Hydra's script registers, which Hydra
    reads from ``sys.argv[0]``): see the module's docstring."""
    try:
        action, shell = request(args)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if action != "query":  # install or uninstall: Hydra's script, for swwae
        return train_main(args, prog=prog)
    line = os.environ.get("COMP_LINE", "")
    words = line.split()
    if completing_subcommand(line):
        typed = words[1] if len(words) == 2 else ""
        print(SEPARATORS.get(shell, " ").join(name for name in subcommands if name.startswith(typed)))
        return 0
    if words[1] != "train":
        return 0  # the shell completes file names (Hydra's script: complete -o default)
    os.environ["COMP_LINE"] = without_subcommand(line)
    try:
        return train_main(args, prog=prog)
    finally:
        os.environ["COMP_LINE"] = line
