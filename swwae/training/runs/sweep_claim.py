"""Jobs of one sweep never write into one run folder.

A run's identity leaves out what a run may change and still be the same run (``max_epochs``),
and a sweep may repeat a job (``seed=0,0``): two jobs of one sweep can then map to one run
folder, and the second would continue or report the first's run as its own, leaving the first
job's ``metrics.json`` naming weights that are no longer there. So, in a multirun, each job
claims its run folder in the sweep folder (``<sweep dir>/.run_folder.<hash>.json``, one hidden
file per run folder, created exclusively: safe for jobs launched in parallel on one file system) before it reads or
writes anything there; a job whose folder another job of the sweep claimed fails alone, in one
line, and the sweep ends with status 1 listing it. A grid sweep (Hydra's basic sweeper) knows
its jobs up front: ``DistinctRunFolders``, a Hydra callback, refuses it before its first job
when two of them map to one run folder. A job run again under the same sweep folder
(a repeated sweep command with a fixed ``hydra.sweep.dir``) finds its own claim.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import shutil
import sys
from collections.abc import Mapping
from pathlib import Path

from hydra.experimental.callback import Callback

from swwae.errors import ConfigError


def claim(folder: Path, sweep: Path, job: int) -> None:
    """Claim ``folder`` for ``job`` of ``sweep``, or ConfigError naming the job that has it."""
    where = str(folder.absolute())
    path = sweep / f".run_folder.{hashlib.sha256(where.encode()).hexdigest()[:16]}.json"
    sweep.mkdir(parents=True, exist_ok=True)
    try:
        with open(path, "x") as file:
            json.dump({"job": job, "folder": where}, file)
        return
    except FileExistsError:
        pass
    try:
        owner = json.loads(path.read_text()).get("job")
    except (OSError, ValueError, AttributeError):
        owner = "?"
    if owner == job:
        return
    raise ConfigError(
        f"{folder} is the run folder of sweep job {owner} too: the jobs of one sweep never share a "
        f"run folder (this one would continue or report job {owner}'s run as its own); give each job "
        f"its own run_name, e.g. with the swept key in it: run_name=<name>_${{trainer.max_epochs}}"
    )


# before the first job: Hydra's basic sweeper (a grid) knows every job up front


def job_overrides(params: Mapping | None, task: list[str]) -> list[list[str]]:
    """The overrides of each job of a grid sweep, in the basic sweeper's order: the product of
    every swept key's values (the sweeper's ``params``, then the command line's ``task``
    overrides), the first key outermost (as ``BasicSweeper.split_arguments``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    swept = [f"{k}={v}" for k, v in dict(params or {}).items()]
    choices: dict[str, list[str]] = {}
    for override in OverridesParser.create().parse_overrides([*swept, *task]):
        key = override.get_key_element()
        if override.is_sweep_override():
            if not override.is_discrete_sweep():
                return []  # a range or interval: the basic sweeper refuses it itself
            choices[key] = [f"{key}={value}" for value in override.sweep_string_iterator()]
        else:
            choices[key] = [f"{key}={override.get_value_element_as_str()}"]
    return [list(job) for job in itertools.product(*choices.values())]


def first_clash(jobs: list[list[str]], run_folder_of) -> tuple[int, int, Path, list[str]] | None:
    """(i, j, folder, what job j sets differently) of the first two ``jobs`` (their overrides)
    that map to one run folder (``run_folder_of(overrides)``: None when a job does not compose)."""
    seen: dict[Path, int] = {}
    for number, overrides in enumerate(jobs):
        folder = run_folder_of(overrides)
        if folder in seen:
            first = seen[folder]
            return first, number, folder, [o for o in overrides if o not in jobs[first]]
        if folder is not None:
            seen[folder] = number
    return None


def clash_line(first: int, second: int, folder: Path, differing: list[str]) -> str:
    shown = os.path.relpath(folder) if folder.is_relative_to(Path.cwd()) else str(folder)
    line = f"sweep jobs {first} and {second} would both run in {shown}"
    if not differing:
        return f"{line}: job {second} repeats job {first}; drop the repeated value"
    keys = [o.partition("=")[0].lstrip("+~") for o in differing]
    return (
        f"{line} ({', '.join(differing)} is not part of the run name), and the second would continue or report "
        f"the first's run as its own: put it in the run name, e.g. run_name=<name>_${{{keys[0]}}}"
    )


class DistinctRunFolders(Callback):
    """Hydra callback: a grid sweep (the basic sweeper) in which two jobs would run in one run
    folder is refused before its first job, in one line, exit status 2. Other sweepers (Optuna)
    choose their jobs as they go: each job's claim (``claim``, by the job) guards those."""

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf

        if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
            return

        def written(node) -> list | dict:  # as typed: an interpolation in an override is the job's to resolve
            return OmegaConf.to_container(node, resolve=False) if node is not None else []

        def run_folder_of(overrides: list[str]) -> Path | None:
            """One job's run folder, its config composed as Hydra will compose it; None when it
            does not compose or resolve: the job then fails by itself, in its own words."""
            try:
                job = GlobalHydra.instance().config_loader().load_sweep_config(config, overrides)
                HydraConfig.instance().set_config(job)
                return (Path(str(job.paths.checkpoint_dir)) / str(job.run_name)).absolute()
            except Exception:
                return None

        jobs = job_overrides(written(config.hydra.sweeper.get("params")), written(config.hydra.overrides.task))
        try:
            clash = first_clash(jobs, run_folder_of)
        finally:
            HydraConfig.instance().set_config(config)
        if clash is None:
            return
        print(f"error: {clash_line(*clash)}", file=sys.stderr)
        remove_if_empty(Path(str(config.hydra.sweep.dir)).absolute())
        raise SystemExit(2)


def remove_if_empty(folder: Path) -> None:
    """A sweep refused before its first job leaves no folder that is empty or holds only
    Hydra's ``multirun.yaml`` (nor an emptied ``multirun/`` in the launch folder)."""
    if not folder.is_dir() or not {p.name for p in folder.iterdir()} <= {"multirun.yaml"}:
        return
    shutil.rmtree(folder, ignore_errors=True)
    launch = Path.cwd()
    for parent in folder.parents:
        if launch not in parent.parents or any(parent.iterdir()):
            break
        parent.rmdir()
