"""The override grammar's errors for common mistakes, as one line: Hydra reads the command line
before the job runs, and answers an unknown key, a look-alike character or a ``+`` too many with
four to seven lines of its own, whose advice (``+trainer.max_epoch=3``) may lead to a second
error. ``run_with_one_line_errors(main)`` runs a ``@hydra.main`` function and turns those into
one ``error:`` line naming the key and what to write instead (exit status 2); any other error of
Hydra's is printed as Hydra prints it (exit status 1), and an error of the job is the job's.
"""

from __future__ import annotations

import os
import re
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

from hydra.errors import CompactHydraException, ConfigCompositionException, OverrideParseException

from swwae.training.runs.sweep_claim import remove_if_empty

FULL_ERROR = "HYDRA_FULL_ERROR"  # Hydra raises instead of printing its own report
NOT_IN_CONFIG = re.compile(r"Could not override '([^']+)'")
ALREADY_THERE = re.compile(r"Could not append to config\. An item is already at '([^']+)'")

# helpers


def override_of(key: str, argv: list[str]) -> str:
    """The command-line override that sets ``key`` (as typed), or ``key=...``."""
    for arg in argv:
        name, sep, _ = arg.partition("=")
        if sep and name.lstrip("+~") == key:
            return arg
    return f"{key}=..."


def unreadable(argv: list[str]) -> tuple[str, str] | None:
    """(override, why) of the first override Hydra's grammar cannot read."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    parser = OverridesParser.create()
    for arg in argv:
        if arg.startswith("-"):  # -m, --multirun, --config-dir ...: Hydra's own flags
            continue
        try:
            parser.parse_overrides([arg])
        except OverrideParseException as err:
            return arg, str(err).splitlines()[0]
    return None


def foreign_character(text: str) -> str | None:
    """The first character outside ASCII, described: a look-alike of a Latin letter (a Cyrillic
    ``ѕ``) reads as the letter to a person and as something else to the parser."""
    for char in text:
        if ord(char) > 127:
            name = unicodedata.name(char, "an unnamed character")
            return f"{char!r} (U+{ord(char):04X} {name}) is not a plain ASCII character"
    return None


def grammar_line(argv: list[str]) -> str:
    found = unreadable(argv)
    if found is None:
        return ""
    arg, why = found
    foreign = foreign_character(arg)
    if foreign:
        return f"{arg}: {foreign}: type it again with plain letters"
    return f"cannot read {arg!r} as an override: {why} (quote a value with spaces or brackets: 'key=[1, 2]')"


def unknown_key_line(key: str, argv: list[str]) -> str:
    """'trainer.max_epoch is not a setting; did you mean trainer.max_epochs?', or how to add a
    setting that the schema knows but the config does not list (a Lightning Trainer argument)."""
    from swwae.settings import unknown_key
    from swwae.training.spec import setting_names

    section, _, name = key.rpartition(".")
    known = setting_names(section)
    if name in known:
        value = override_of(key, argv).partition("=")[2]
        return f"{key} is not in the {section or 'top-level'} config: add it with +{key}={value}"
    if not known:
        return f"{key} is not in the config: add it with +{override_of(key, argv).lstrip('+')} if it should be"
    return unknown_key(key, known)


def line_for(err: Exception, argv: list[str]) -> str:
    """The one line for an override error of Hydra's, or "" when it is not one of those."""
    text = str(err)
    if isinstance(err, OverrideParseException) or isinstance(err.__cause__, OverrideParseException):
        return grammar_line(argv)
    if not isinstance(err, ConfigCompositionException):
        return ""
    if match := NOT_IN_CONFIG.search(text):
        return unknown_key_line(match[1], argv)
    if match := ALREADY_THERE.search(text):
        key = match[1]
        return f"{override_of(key, argv)}: {key} is already in the config: drop the + ({key}=...)"
    return ""


# the entry


def run_with_one_line_errors(main: Callable[[], object], argv: list[str] | None = None) -> None:
    """``main()`` (a ``@hydra.main`` function), with the override errors above as one line."""
    argv = sys.argv[1:] if argv is None else argv
    asked = os.environ.get(FULL_ERROR)
    os.environ[FULL_ERROR] = "1"
    try:
        main()
    except Exception as err:
        restore(asked)
        line = line_for(err, argv)
        if line:
            print(f"error: {line}", file=sys.stderr)
            remove_empty_sweep_folder()
            sys.exit(2)
        if isinstance(err, CompactHydraException) and asked != "1":  # as Hydra prints it
            print(err, file=sys.stderr)
            sys.exit(1)
        raise
    finally:
        restore(asked)


def remove_empty_sweep_folder() -> None:
    """The sweep folder of a sweep refused before its first job, removed if it holds nothing
    (``runs.sweep_claim.remove_if_empty``)."""
    from hydra.core.hydra_config import HydraConfig

    try:
        folder = Path(HydraConfig.get().sweep.dir).absolute()
    except Exception:  # not a sweep, or Hydra had not got as far
        return
    remove_if_empty(folder)


def restore(asked: str | None) -> None:
    if asked is None:
        os.environ.pop(FULL_ERROR, None)
    else:
        os.environ[FULL_ERROR] = asked
