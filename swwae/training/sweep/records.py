"""A sweep job's records as the study reports read them: data, checked, never evaluated.

A job's saved config (``.hydra/config.yaml``) is read as plain YAML (``swwae.files.read_yaml``),
never through OmegaConf: resolving it would run what the file says (``${oc.env:HOME}`` read and
printed, a chain of interpolations that doubles at every level filling the memory). A value
that is still an interpolation is not a value: reading it is ``Unreadable``. The one
interpolation the shipped configs write, ``data.seed: ${seed}``, is resolved here by hand from
the config's own top-level ``seed``.

Every check raises ``Unreadable`` with a few words saying why; a report marks that job in one
line (``bad_job``) and goes on with the others.
"""

from __future__ import annotations

import math
import os
import re

from swwae.errors import ConfigError, Unreadable, plural, shortened
from swwae.files import read_yaml
from swwae.stored import is_int, kind
from swwae.training.sweep.jobs import Job, reason, sweeps_inside

SEED_INTERPOLATION = "${seed}"  # data.seed, as every shipped config writes it
INTEGER = re.compile(r"[+-]?[0-9]{1,18}")  # an override's seed, as typed

# helpers


def is_interpolation(value) -> bool:
    return isinstance(value, str) and "${" in value


def bad_job(job: Job, why) -> str:
    """The one line that marks a job a report leaves out: ``<job folder>: unreadable: <why>``."""
    return f"{job.folder}: unreadable: {shortened(' '.join(str(why).split()))}"  # a file's key may be long


def not_ok(jobs: list[Job]) -> tuple[list[Job], list[str]]:
    """Of ``jobs`` that are not ok: those that failed (the run raised, or never finished), and
    the lines of those whose records are unreadable."""
    unreadable = [j for j in jobs if not j.ok and j.record.get("status") == "unreadable"]
    return [j for j in jobs if not j.ok and j not in unreadable], [bad_job(j, j.record["error"]) for j in unreadable]


def none_left(what: str, folders, bad: list[str]) -> ConfigError:
    """The one ``error:`` line of a report with no job left to report: the first bad job's
    line says why, and how many more there were; or, given one folder without any job
    (``multirun/``), the sweeps inside it."""
    inside = sweeps_inside(folders[0]) if len(folders) == 1 and not bad else ""
    return ConfigError(f"no {what} in {', '.join(map(str, folders))}{left_out(bad)}{inside}")


def left_out(lines: list[str]) -> str:
    """The end of an ``error:`` line that a report could not make from the jobs it kept: the
    first job it left out, and how many more."""
    if not lines:
        return ""
    more = f" (and {plural(len(lines) - 1, 'more job')} left out)" if len(lines) > 1 else ""
    return f"; {lines[0]}{more}"


def check_distinct(folders) -> None:
    """``ConfigError`` when one sweep folder is given twice (``sw ./sw``): each of its runs would
    meet itself as a second run of its arm and seed, and the report would name one job twice."""
    seen = {}
    for folder in folders:
        key = os.path.realpath(folder)
        if key in seen:
            same = seen[key]
            twice = str(folder) if str(folder) == str(same) else f"{same} (as {folder})"
            raise ConfigError(f"sweep folder {twice} is given twice; give each sweep once")
        seen[key] = folder


def interpolation_in(value, where: str) -> str | None:
    """The dotted key of the first interpolation left in ``value`` (a section), or None."""
    stack = [(where, value)]
    while stack:
        key, node = stack.pop()
        if is_interpolation(node):
            return key
        if isinstance(node, dict):
            stack += [(f"{key}.{k}", v) for k, v in node.items()]
        elif isinstance(node, list):
            stack += [(f"{key}[{i}]", v) for i, v in enumerate(node)]
    return None


# reading


def saved_config(job: Job, required: bool = True) -> dict | None:
    """The job's saved config as plain data, ``data.seed: ${seed}`` resolved from its ``seed``;
    None when there is none and it is not ``required``."""
    path = job.folder / ".hydra" / "config.yaml"
    if not required and not (path.exists() or path.is_symlink()):
        return None
    try:
        config = read_yaml(path, "saved config")
    except Unreadable as err:
        raise Unreadable(reason(err, path, job.folder)) from None
    if not isinstance(config, dict):
        raise Unreadable(f".hydra/config.yaml is {kind(config)}, not a mapping")
    data = config.get("data")
    if isinstance(data, dict) and data.get("seed") == SEED_INTERPOLATION:
        seed = config.get("seed")
        if not is_int(seed):
            found = " has no seed" if seed is None else f"'s seed is {kind(seed)}, not an integer"
            raise Unreadable(f"data.seed is {SEED_INTERPOLATION}, and the config{found}")
        config["data"] = data | {"seed": seed}
    return config


def section(config: dict, name: str) -> dict:
    """A section of a saved config (``data``), every value in it a value (no interpolation)."""
    value = config.get(name)
    if not isinstance(value, dict):
        raise Unreadable(f"{name} is {kind(value)}, not a mapping")
    left = interpolation_in(value, name)
    if left is not None:
        raise Unreadable(f"{left} is an interpolation, not a value")
    return value


def setting(config: dict, key: str):
    """The value at the dotted ``key`` (``model.lambda_rec``), None when it is absent;
    ``Unreadable`` when a section on the way is not a mapping or the value is an interpolation."""
    value, walked = config, []
    for part in key.split("."):
        if value is None:
            return None
        if not isinstance(value, dict):
            raise Unreadable(f"{'.'.join(walked)} is {kind(value)}, not a mapping")
        value, walked = value.get(part), [*walked, part]
    if is_interpolation(value):
        raise Unreadable(f"{key} is an interpolation, not a value")
    return value


def count(value, what: str, minimum: int = 1) -> int:
    """An integer of at least ``minimum`` (a number of labels), or ``Unreadable``."""
    if not is_int(value) or value < minimum:
        raise Unreadable(f"{what} is {kind(value)}, not an integer >= {minimum}")
    return value


def seed_of(job: Job) -> int:
    """The job's seed (its metrics.json's, else its override's) as an integer."""
    seed = job.seed
    if is_int(seed):
        return seed
    if isinstance(seed, str) and INTEGER.fullmatch(seed.strip()):
        return int(seed)
    raise Unreadable("seed is null, not an integer" if seed is None else f"seed is {kind(seed)}, not an integer")


def accuracy_of(job: Job, metric: str = "test/acc") -> float:
    """An accuracy the job measured, a number in [0, 1] (read_job has checked it is finite)."""
    value = job.metrics[metric]
    if not 0.0 <= value <= 1.0:
        raise Unreadable(f"metric {metric} is {value}, not an accuracy in [0, 1]")
    return value


def trains_reconstruction(config: dict | None) -> bool:
    """Whether the run trained its decoder (``model.lambda_rec`` > 0): else its reconstruction
    MSE measures an untrained decoder. No config, or no such setting: True (its MSE is reported,
    as the run measured it)."""
    value = setting(config, "model.lambda_rec") if config is not None else None
    if value is None:
        return True
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise Unreadable(f"model.lambda_rec is {kind(value)}, not a number")
    return value > 0
