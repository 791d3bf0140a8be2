"""A sweep's folders: each sweep its own sweep folder, each job its own run folder, and none
written for a sweep that cannot run.

Each sweep its own folder: the default sweep folder, ``multirun/<time>/``, is named by the second
the sweep started, and two sweeps started in the same second would share it (their jobs' numbers,
summaries and claims mixed). So the default names it through ``${swwae.new_folder:...}``
(``configs/hydra/default.yaml``), which creates the folder as it names it (``mkdir``: atomic, one
winner) and fails over to ``<time>_2``, ``<time>_3``... when another sweep has it; resolved once
(OmegaConf caches it, as Hydra's ``now``), the jobs read the same name. ``hydra.sweep.dir=...``
replaces the default, and is used as given.

Each job its own run: the default run name of a sweep's job says the run settings swept
(``-m model.lr=1e-3,1e-4``: ``..._lr0.001_seed0``, ``..._lr0.0001_seed0``; ``identity.sweep_tag``).
A job is composed from its own overrides, swept and fixed alike, so the sweep tells its jobs which
keys it does not sweep (``unswept_keys``), through Hydra's own setting for the keys that name no
job (``hydra.job.config.override_dirname.exclude_keys``, which ``hydra.job.override_dirname``
reads too). Before any of it, a sweep that cannot run is refused (``sweep_checks.refusal``).

But a run's identity leaves out what a run may change and still be the same run (``max_epochs``),
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
from swwae.training.runs.identity import check_run_name
from swwae.training.runs.sweep_checks import refusal

NEW_FOLDER_TRIES = 1000  # <time>, <time>_2 ... <time>_1000: sweeps started in one second


def new_folder(path: str) -> str:
    """``path``, or ``path_2``, ``path_3``...: the first of them that this call creates, so that
    sweeps started at once never share a folder. Where none can be created (no permission, a
    read-only disk) ``path`` as it is: the sweep's folder check then says why, in one line."""
    folder = Path(path)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return path
    for number in range(1, NEW_FOLDER_TRIES + 1):
        candidate = folder if number == 1 else folder.with_name(f"{folder.name}_{number}")
        try:
            candidate.mkdir()
        except FileExistsError:
            continue
        except OSError:
            return path
        return str(candidate)
    return path


def register_resolver() -> None:
    """``${swwae.new_folder:<path>}`` for the sweep folder (on import: Hydra builds the sweep's
    callbacks, this module's among them, before it reads the sweep folder). Cached: resolved
    once per config, and jobs get their sweep's cache (Hydra copies it, as for ``now``)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("swwae.new_folder", new_folder, use_cache=True, replace=True)


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


# before the first job: what names the jobs' runs. Hydra composes each job from its own
# overrides, swept and fixed alike, so a job cannot tell them apart: the sweep tells it, through
# Hydra's own setting of the keys that do not name a job (override_dirname's exclude_keys)

UNNAMED = "hydra.job.config.override_dirname.exclude_keys"


def unswept_keys(params: Mapping | None, task: list[str]) -> list[str]:
    """The keys a sweep sets without sweeping them (the sweeper's ``params``, then the command
    line's ``task`` overrides; a key's last override decides): every job sets them alike, so
    they name no job (``identity.sweep_tag``, ``hydra.job.override_dirname``)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    swept = [f"{k}={v}" for k, v in dict(params or {}).items()]
    sweeps = {o.key_or_group: o.is_sweep_override() for o in OverridesParser.create().parse_overrides([*swept, *task])}
    return sorted(key for key, is_swept in sweeps.items() if not is_swept)


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


def clash_line(first: int, second: int, folder: Path, differing: list[str], groups=()) -> str:
    """The refusal of a grid whose jobs ``first`` and ``second`` map to ``folder``, with how to
    name the value they differ by (``differing``) in the run name: a key's value, or the option
    chosen in a config group (``groups``: ``logger=csv,tensorboard``; ``${logger}`` is the group's
    whole node, which made a run name of its settings, and the job failed in a traceback)."""
    shown = os.path.relpath(folder) if folder.is_relative_to(Path.cwd()) else str(folder)
    line = f"sweep jobs {first} and {second} would both run in {shown}"
    if not differing:
        return f"{line}: job {second} repeats job {first}; drop the repeated value"
    key = differing[0].partition("=")[0].lstrip("+~")
    value = f"hydra:runtime.choices.{key}" if key in groups else key
    return (
        f"{line} ({', '.join(differing)} is not part of the run name), and the second would continue or report "
        f"the first's run as its own: put it in the run name, e.g. run_name=<name>_${{{value}}}"
    )


# this process's sweep: its folder, for the command should the sweeper stop before the sweep's end

started: list[Path] = []


class DistinctRunFolders(Callback):
    """Hydra callback, before a sweep's first job (keep it before the sweep folder's check,
    ``configs/hydra/default.yaml``: a sweep refused here writes nothing). A sweep that cannot
    run (``sweep_checks.refusal``) is refused in one line, exit status 2; the keys the sweep does
    not sweep are set aside (``unswept_keys``), so that each job's default run name says the
    values swept; a grid sweep (the basic sweeper) in which two jobs would still run in one run
    folder is refused in one line, exit status 2. Other sweepers (Optuna) choose their jobs as they go:
    each job's claim (``claim``, by the job) guards those. Then the sweep's folder is named
    (claimed, by default: ``new_folder``) and recorded in ``started``."""

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.global_hydra import GlobalHydra
        from hydra.core.hydra_config import HydraConfig
        from omegaconf import OmegaConf, read_write

        refused = refusal(config)
        if refused:
            print(f"error: {refused}", file=sys.stderr)
            raise SystemExit(2)

        def written(node) -> list | dict:  # as typed: an interpolation in an override is the job's to resolve
            return OmegaConf.to_container(node, resolve=False) if node is not None else []

        params, task = written(config.hydra.sweeper.get("params")), written(config.hydra.overrides.task)
        unnamed = sorted({*written(OmegaConf.select(config, UNNAMED)), *unswept_keys(params, task)})
        if unnamed:  # each job is composed from the sweep's hydra overrides and its own
            with read_write(config.hydra.overrides):
                config.hydra.overrides.hydra.append(f"{UNNAMED}=[{','.join(repr(str(k)) for k in unnamed)}]")
        if str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):

            def run_folder_of(overrides: list[str]) -> Path | None:
                """One job's run folder, its config composed as Hydra will compose it; None when it
                does not compose or resolve: the job then fails by itself, in its own words. A
                run name that names no folder (``run_name=r_${logger}``: the group's settings, with
                slashes) is refused here: Hydra names the job's folder by it before the job runs,
                and the sweep stopped in a traceback."""
                try:
                    job = GlobalHydra.instance().config_loader().load_sweep_config(config, overrides)
                    HydraConfig.instance().set_config(job)
                    name = str(job.run_name)
                    folder = (Path(str(job.paths.checkpoint_dir)) / name).absolute()
                except Exception:
                    return None
                check_run_name(name)
                return folder

            jobs = job_overrides(params, task)
            try:
                clash = first_clash(jobs, run_folder_of)
            except ConfigError as err:
                print(f"error: {err}", file=sys.stderr)
                raise SystemExit(2) from None
            finally:
                HydraConfig.instance().set_config(config)
            if clash is not None:
                groups = set(config.hydra.runtime.get("choices") or {})
                print(f"error: {clash_line(*clash, groups=groups)}", file=sys.stderr)
                raise SystemExit(2)
        started.append(Path(str(config.hydra.sweep.dir)).absolute())  # named here: claimed, by default


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


register_resolver()
