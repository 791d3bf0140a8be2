"""What a sweep needs before its first job, checked on the sweep's config: a sweep that cannot
run is refused in one line (``refusal``), before its folder is made. Without these, each
problem shows after the sweep folder is written: an Optuna search with no trial or a direction
Optuna does not know fails in Optuna's traceback; an ``optimized_mode`` that is neither min nor
max fails every job alike, one line each; a submitit job with no time is killed as it starts;
the Slurm launcher off a cluster fails in submitit's traceback (no ``sbatch``); the local
launcher given several tasks a job runs each job that many times at once.

The keys swept are not in the sweep's config (Hydra composes it without them), so a value
refused here is one every job would run with.
"""

from __future__ import annotations

import shutil

from swwae.errors import ConfigError, excerpt

OPTUNA_DIRECTIONS = ("minimize", "maximize")
SUBMITIT = "hydra_plugins.hydra_submitit_launcher."  # the launchers of hydra-submitit-launcher
UNRESOLVED = object()  # a config value that does not resolve: its own job says why


def refusal(config) -> str | None:
    """The one line that refuses the sweep of ``config`` (Hydra's, before the sweep), or None."""
    try:
        mode = config.get("optimized_mode")
    except Exception:
        mode = UNRESOLVED
    return search_line(config.hydra.sweeper, mode) or mode_line(mode) or launcher_line(config.hydra.get("launcher"))


def mode_line(mode) -> str | None:
    """``optimized_mode`` as the job checks it (``composing.check_mode``), for every sweeper."""
    from swwae.training.composing import check_mode

    if mode is UNRESOLVED:
        return None
    try:
        check_mode(mode)
    except ConfigError as err:
        return str(err)
    return None


def search_line(sweeper, optimized_mode) -> str | None:
    """An Optuna search with no trial to run, or a direction Optuna does not know
    (``${optimized_mode}imize``, as the shipped search says, from an ``optimized_mode`` that is
    neither min nor max); None for another sweeper or a search that can run."""
    from omegaconf import OmegaConf

    if not str(sweeper.get("_target_", "")).endswith("OptunaSweeper"):
        return None
    trials = sweeper.get("n_trials")
    if not isinstance(trials, int) or trials < 1:
        return f"hydra.sweeper.n_trials={trials}: an Optuna search runs at least one trial (n_trials=N, N >= 1)"
    written = OmegaConf.to_container(sweeper, resolve=False).get("direction")
    if "optimized_mode" in str(written) and (line := mode_line(optimized_mode)):
        return f"{line} (the Optuna search's direction follows it: {written})"
    try:
        direction = OmegaConf.to_container(sweeper, resolve=True).get("direction")
    except Exception as err:  # an interpolation that does not resolve: what it says
        return f"hydra.sweeper.direction does not resolve: {err}".splitlines()[0]
    directions = direction if isinstance(direction, list) else [direction]
    names = [getattr(d, "name", d) for d in directions]  # hydra_optuna_sweeper's Direction enum, or a string
    if not names or any(name not in OPTUNA_DIRECTIONS for name in names):
        shown = excerpt(",".join(map(str, names)))
        return (
            f"hydra.sweeper.direction={shown}: an Optuna search's direction is minimize or maximize "
            "(a list of them, one per objective)"
        )
    return None


def launcher_line(launcher) -> str | None:
    """A submitit launcher (``hydra/launcher=submitit_local`` or ``submitit_slurm``) whose jobs
    get no time (``timeout_min`` < 1: each is killed as it starts), the local one asked for several
    tasks a job (each ran the whole job: Lightning makes a DDP run of SLURM's tasks, not of
    submitit's local ones), or the Slurm one where Slurm is not (no ``sbatch`` to submit the jobs
    with); None otherwise."""
    target = str(launcher.get("_target_", "")) if launcher is not None else ""
    if not target.startswith(SUBMITIT):
        return None
    minutes = launcher.get("timeout_min")
    if not isinstance(minutes, int) or isinstance(minutes, bool) or minutes < 1:
        return (
            f"hydra.launcher.timeout_min={minutes}: each job of the sweep is given this many minutes "
            "before submitit stops it; give it at least 1 (timeout_min=60)"
        )
    tasks = launcher.get("tasks_per_node", 1)
    if target.endswith("LocalLauncher") and tasks != 1:
        return (
            f"hydra.launcher.tasks_per_node={tasks} runs each job {tasks} times at once under submitit_local "
            "(Lightning finds no cluster there to make them one DDP run, and the job's run is trained twice "
            "or refused): leave it at 1; trainer=ddp trainer.devices=N starts a job's N processes"
        )
    if target.endswith("SlurmLauncher") and shutil.which("sbatch") is None:
        return (
            "hydra/launcher=submitit_slurm submits each job with Slurm's sbatch, which is not on this "
            "machine's PATH: start the sweep on a Slurm cluster (its login node), or here with "
            "hydra/launcher=submitit_local"
        )
    return None
