"""Jobs of one sweep never write into one run folder.

A run's identity leaves out what a run may change and still be the same run (``max_epochs``),
and a sweep may repeat a job (``seed=0,0``): two jobs of one sweep can then map to one run
folder, and the second would continue or report the first's run as its own, leaving the first
job's ``metrics.json`` naming weights that are no longer there. So, in a multirun, each job
claims its run folder in the sweep folder (``<sweep dir>/.run_folder.<hash>.json``, one hidden
file per run folder, created exclusively: safe for jobs launched in parallel on one file system) before it reads or
writes anything there; a job whose folder another job of the sweep claimed fails alone, in one
line, and the sweep ends with status 1 listing it. A job run again under the same sweep folder
(a repeated sweep command with a fixed ``hydra.sweep.dir``) finds its own claim.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from swwae.errors import ConfigError


def sweep_job() -> tuple[Path, int] | None:
    """(sweep folder, job number) of a multirun job; None for a single run."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized() or HydraConfig.get().mode != RunMode.MULTIRUN:
        return None
    hydra = HydraConfig.get()
    return Path(hydra.sweep.dir), int(hydra.job.num)


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


def claim_for_sweep_job(folder: Path) -> None:
    """In a multirun, claim the run's folder for this job (module docstring); else nothing."""
    job = sweep_job()
    if job is not None:
        claim(folder, *job)
