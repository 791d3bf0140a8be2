"""The override grammar's errors for common mistakes, as one line: Hydra reads the command line
before the job runs, and answers an unknown key, a look-alike character or a ``+`` too many with
four to seven lines of its own, whose advice (``+trainer.max_epoch=3``) may lead to a second
error, a value it cannot merge with no reason at all, a config group's option that no folder
holds with a dozen lines (its choices and the search path), a group set to null with a
traceback, and a config file that is not YAML (a preset of the user's own) with a hundred lines
of traceback. ``run_with_one_line_errors(main)`` runs a ``@hydra.main`` function and turns those
into one ``error:`` line naming the key and what to write instead (the nearest choice, or the
choices), or the file, line and column (exit status 2); any other error of Hydra's
is printed as Hydra prints it (exit status 1), and an error of the job is the job's.
"""

from __future__ import annotations

import difflib
import os
import re
import sys
import unicodedata
from collections.abc import Callable
from pathlib import Path

import yaml
from hydra.errors import (
    CompactHydraException,
    ConfigCompositionException,
    MissingConfigException,
    OverrideParseException,
    SearchPathException,
)
from omegaconf.errors import InterpolationKeyError, InterpolationResolutionError

from swwae.errors import excerpt
from swwae.training.runs.sweep_claim import remove_if_empty

FULL_ERROR = "HYDRA_FULL_ERROR"  # Hydra raises instead of printing its own report
NOT_IN_CONFIG = re.compile(r"Could not override '([^']+)'")
ALREADY_THERE = re.compile(r"Could not append to config\. An item is already at '([^']+)'")
NOT_MERGED = re.compile(r"Error merging override (.+)", re.DOTALL)
SWEEP_WITHOUT_M = re.compile(
    r"(?:Ambiguous value for argument|Sweep parameters) '([^\n]+?)'(?: requires --multirun)?(?:\n|$)"
)
NO_CONFIG_DIR = re.compile(r"Additional config directory '(.+)' not found")
GROUP_OVERRIDE = "Config group override must be a string or a list. Got "  # ... NoneType: group=null
GROUP_SET_TO_NULL = f"{GROUP_OVERRIDE}NoneType"
MISSING_KEY = re.compile(r"Interpolation key '([^']+)' not found")
IN_CONFIG = re.compile(r"In '([^']+)': Could not find")  # Hydra: the config whose defaults name it
PRIMARY = "train"  # the primary config, whose defaults list a preset's overrides change
WHY_LIMIT = 200  # characters of a parser's or Hydra's reason (it may quote the input)

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
            lines = str(err).splitlines() or [""]
            reasons = [line for line in lines if not line.startswith("Error parsing override")]  # the override again
            return arg, (reasons or lines)[0]
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
        return f"{excerpt(arg)}: {foreign}: type it again with plain letters"
    return (
        f"cannot read {excerpt(repr(arg))} as an override: {excerpt(why, WHY_LIMIT)} "
        "(quote a value with spaces or brackets: 'key=[1, 2]')"
    )


def unknown_key_line(key: str, argv: list[str]) -> str:
    """'trainer.max_epoch is not a setting; did you mean trainer.max_epochs?', or how to add a
    setting that the schema knows but the config does not list (a Lightning Trainer argument), or
    which data sets take a data setting that the one named does not."""
    from swwae.settings import unknown_key
    from swwae.training.spec import own_key_typo, setting_names

    section, _, name = key.rpartition(".")
    known = setting_names(section)
    if name in known:
        if line := other_data_sets_line(key, argv):
            return line
        value = override_of(key, argv).partition("=")[2]
        return f"{key} is not in the {section or 'top-level'} config: add it with +{key}={excerpt(value)}"
    written = excerpt(override_of(key, argv).lstrip("+"))
    if not known:
        return f"{excerpt(key)} is not in the config: add it with +{written} if it should be"
    if not section and own_key_typo(key) is None:  # no setting's look-alike: a key of the user's own
        return f"{excerpt(key)} is not in the config: add a key of your own with +{written}"
    return unknown_key(key, known)


def other_data_sets_line(key: str, argv: list[str]) -> str:
    """'data.test_size is not a setting of data=mnist (only of mnist_sample, image_folder)': a
    setting of other data sets than the shipped one named on the command line, whose config holds
    every setting it takes (so ``+data.test_size`` would lead to a second error); "" otherwise."""
    from swwae.datasets import DATA_SETS
    from swwae.training.spec import data_spec, names_of

    section, _, name = key.rpartition(".")
    chosen = override_of("data", argv).partition("=")[2]
    if section != "data" or chosen not in DATA_SETS or name in names_of(data_spec(DATA_SETS[chosen])):
        return ""
    takers = [entry.name for entry in DATA_SETS.values() if name in names_of(data_spec(entry))]
    return f"{key} is not a setting of data={chosen} (only of {', '.join(takers)})"


def already_there_line(key: str, argv: list[str]) -> str:
    return f"{excerpt(override_of(key, argv))}: {key} is already in the config: drop the + ({key}=...)"


def merge_line(override: str, cause: BaseException | None, argv: list[str]) -> str:
    """An override Hydra could not merge, and why (Hydra says only that it could not): a ``+``
    on a key the config holds as an interpolation (Hydra resolves it to see whether it is
    there, and fails on ``${hydra:...}`` before the job), or the value's own problem (a word
    where the config's schema wants a number: ``hydra.sweeper.n_trials=abc``)."""
    key = override.partition("=")[0]
    if key.startswith("+") and not key.startswith("++") and isinstance(cause, InterpolationResolutionError):
        return already_there_line(key.lstrip("+"), argv)
    why = str(cause).strip().splitlines()[0] if cause is not None and str(cause).strip() else "Hydra could not merge it"
    return f"{excerpt(override)}: {excerpt(why, WHY_LIMIT)}"


def missing_choice_line(err: MissingConfigException, argv: list[str]) -> str:
    """'model=swwae_hrad: there is no model config swwae_hrad; did you mean swwae_hard?' (or the
    choices there are) for a config group's option on the command line that no config folder
    holds; "" for another missing config (Hydra's own report names it)."""
    for arg in argv:
        key, sep, value = arg.partition("=")
        group = key.lstrip("+~").partition("@")[0]
        name = (err.missing_cfg_file or "").removeprefix(f"{group}/")
        if sep and name in value.split(","):  # one option, or one of a sweep's
            break
    else:
        return missing_in_config_line(err)
    return with_choices(f"{excerpt(arg)}: there is no {group} config {name}", name, err.options)


def missing_in_config_line(err: MissingConfigException) -> str:
    """'model/gian (named in the defaults of experiment/bad) is no model config; did you mean
    gain?' for a group's option that a config file names (a preset of the user's own, most often),
    where Hydra answers with its choices and the search path, a dozen lines; "" for a config that is
    no group's option (Hydra's own report names it)."""
    group, _, name = (err.missing_cfg_file or "").rpartition("/")
    if not group or err.options is None:
        return ""
    named_in = IN_CONFIG.match(str(err))
    where = (
        f"in the defaults of {named_in[1]}"
        if named_in and named_in[1] != PRIMARY
        else f"by a config's override /{group}"
    )
    return with_choices(f"{excerpt(group + '/' + name)} (named {where}) is no {group} config", name, err.options)


def with_choices(line: str, name: str, options: list[str] | None) -> str:
    """``line`` with the nearest of a group's ``options`` to ``name``, or the choices there are."""
    if "/" in name or not options:  # a subfolder's option: Hydra lists the group's top level only
        return line
    near = difflib.get_close_matches(name, options, n=1, cutoff=0.6)
    if near:
        return f"{line}; did you mean {near[0]}?"
    return f"{line}; the choices are: {', '.join(sorted(options))}"


def null_group_line(argv: list[str]) -> str:
    """A config group set to null (``logger=null``), which Hydra refuses with a traceback."""
    group = next((arg.partition("=")[0] for arg in argv if arg.endswith("=null") and "." not in arg), "")
    shown = group.lstrip("+~") or "a config group"
    return f"{excerpt(group or shown)}=null: {shown} takes the name of a config; to run without one: ~{shown}"


def removed_section_line(text: str, argv: list[str]) -> str:
    """'~model: ...' where a section removed on the command line is one the config reads (the
    run name and folders read ``model.arch``); "" for another missing key."""
    match = MISSING_KEY.search(text)
    if match is None:
        return ""
    section = match[1].partition(".")[0]
    removed = next((arg for arg in argv if arg.partition("=")[0] == f"~{section}"), "")
    if not removed:
        return ""
    return (
        f"{excerpt(removed)}: a run needs its {section} section (the config reads {match[1]}): choose another with "
        f"{section}=<name> instead"
    )


def yaml_line(err: BaseException) -> str:
    """A config file that is not YAML (a preset of the user's own, most often): the file, the
    line and column of the problem and what it is; "" when ``err`` is no YAML error."""
    found = next((e for e in causes(err) if isinstance(e, yaml.YAMLError)), None)
    if found is None:
        return ""
    mark = getattr(found, "problem_mark", None) or getattr(found, "context_mark", None)
    if mark is None:
        return f"a config file is not valid YAML: {excerpt(' '.join(str(found).split()), WHY_LIMIT)}"
    where = f"{shown_path(mark.name)}, line {mark.line + 1}, column {mark.column + 1}"
    problem = found.problem or found.context or "cannot be read"
    context = getattr(found, "context_mark", None)
    if found.problem and found.context and context is not None and context.line != mark.line:
        problem += f" ({found.context}, from line {context.line + 1}, column {context.column + 1})"
    return f"{where}: not valid YAML: {excerpt(problem, WHY_LIMIT)}"


def causes(err: BaseException) -> list[BaseException]:
    """``err`` and the exceptions it was raised from or during, innermost last."""
    chain: list[BaseException] = []
    while err is not None and err not in chain:
        chain.append(err)
        err = err.__cause__ or err.__context__
    return chain


def shown_path(name: str) -> str:
    """A file's path as a user reads it: relative to where they stand, if it is there."""
    path = Path(name)
    try:
        return str(path.absolute().relative_to(Path.cwd()))
    except ValueError:
        return name


def line_for(err: Exception, argv: list[str]) -> str:
    """The one line for an override error of Hydra's or a config file that is not YAML, or ""
    when it is not one of those."""
    text = str(err)
    if isinstance(err, OverrideParseException) or isinstance(err.__cause__, OverrideParseException):
        return grammar_line(argv)
    if isinstance(err, ValueError) and text == GROUP_SET_TO_NULL:
        return null_group_line(argv)
    if isinstance(err, ValueError) and text.startswith(GROUP_OVERRIDE):  # =3, +=3: Hydra took "" for a group
        keyless = next((arg for arg in argv if "=" in arg and not arg.partition("=")[0].lstrip("+~")), "")
        if keyless:
            return f"{excerpt(keyless)}: an override names a key before its '=' (key=value)"
    if isinstance(err, InterpolationKeyError) and (line := removed_section_line(text, argv)):
        return line
    if isinstance(err, MissingConfigException):
        return missing_choice_line(err, argv)
    if isinstance(err, SearchPathException) and (match := NO_CONFIG_DIR.fullmatch(text)):
        return f"--config-dir: there is no folder {match[1]}: name the folder that holds your own configs"
    if not isinstance(err, ConfigCompositionException):
        return yaml_line(err)
    if match := SWEEP_WITHOUT_M.match(text):
        return (
            f"{excerpt(match[1])}: these are a sweep's values: add -m to run a job for each (a list is key=[a,b], "
            "a string with a comma key='a,b')"
        )
    if match := NOT_IN_CONFIG.search(text):
        return unknown_key_line(match[1], argv)
    if match := ALREADY_THERE.search(text):
        return already_there_line(match[1], argv)
    if match := NOT_MERGED.match(text):
        return merge_line(match[1], err.__cause__, argv)
    return yaml_line(err)


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
