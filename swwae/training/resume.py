"""Where a run starts: fresh, or from a checkpoint of its own folder (``resume``).

* ``resume=auto`` (the default): continue when ``checkpoints/<run>/`` holds a run of the same
  model and data config (a requeued or repeated command), start fresh otherwise; one line says
  which. A finished run is reported again, not retrained.
* ``resume=true``: continue, or fail in one line if the folder's run does not fit this config.
* ``resume=false``: start fresh.

A fresh start moves an old run's folder aside (``<run>.previous-<time>``), never deletes it; the
job does that only under the run's lock (``swwae.training.ownership``) and after every check.
"""

from __future__ import annotations

import logging
import shlex
import shutil
import time
from pathlib import Path
from typing import NamedTuple

from omegaconf import DictConfig

from swwae.errors import CheckpointError, ConfigError
from swwae.training.building import task_overrides
from swwae.training.checkpoints import check_resumable, newest_readable, pick_resume_checkpoint
from swwae.training.preemption import mid_epoch_position

log = logging.getLogger(__name__)

RESUME_MODES = ("auto", "true", "false")


class Start(NamedTuple):
    """Where the run starts: ``path``/``checkpoint`` to continue from (None: fresh), and
    whether that checkpoint's run already trained as far as this config asks."""

    path: Path | None = None
    checkpoint: dict | None = None
    finished: bool = False


# helpers


def run_folder(cfg: DictConfig) -> Path:
    return Path(cfg.paths.checkpoint_dir) / cfg.run_name


def resume_mode(cfg: DictConfig) -> str:
    """``cfg.resume`` as one of RESUME_MODES (the command line gives booleans or ``auto``)."""
    value = cfg.get("resume", "auto")
    mode = {True: "true", False: "false"}.get(value, str(value).lower()) if isinstance(value, bool) else str(value)
    if mode not in RESUME_MODES:
        raise ConfigError(f"resume={value!r} is unknown; choose one of {', '.join(RESUME_MODES)}")
    return mode


def has_finished(checkpoint: dict, cfg: DictConfig) -> bool:
    """Whether the run that saved ``checkpoint`` already trained as far as ``cfg.trainer``
    asks (``checkpoint["epoch"]`` is the epoch it was saved at the end of, unless it was
    saved mid-epoch by a pre-emption)."""
    if mid_epoch_position(checkpoint) is not None:
        return False
    max_epochs, max_steps = cfg.trainer.get("max_epochs"), cfg.trainer.get("max_steps")
    if max_steps is not None and max_steps >= 0 and checkpoint.get("global_step", 0) >= max_steps:
        return True
    return max_epochs is not None and max_epochs >= 0 and checkpoint.get("epoch", -1) + 1 >= max_epochs


def warn_about_schedule(path: Path, checkpoint: dict, cfg: DictConfig) -> None:
    for scheduler in checkpoint.get("lr_schedulers") or []:
        if scheduler.get("T_max") not in (None, cfg.trainer.get("max_epochs")):
            log.warning("%s holds a cosine schedule over %s epochs; this run has trainer.max_epochs=%s: the "
                        "learning rate keeps the old schedule (0 at epoch %s, rising after)", path,
                        scheduler["T_max"], cfg.trainer.get("max_epochs"), scheduler["T_max"])


def continue_command(cfg: DictConfig) -> str:
    """The command line that continues this run: its own overrides, plus resume=true."""
    kept = [o for o in task_overrides() if o.split("=", 1)[0].lstrip("+~") != "resume"]
    return " ".join(["python train.py", *map(shlex.quote, kept), "resume=true"])


def kept_checkpoint(cfg: DictConfig) -> str:
    """What a run that stopped on an error leaves to resume from, in words."""
    path, checkpoint, _ = newest_readable(run_folder(cfg))
    if path is None:
        return "no checkpoint was saved"
    return f"{path} (epoch {checkpoint.get('epoch')}, step {checkpoint.get('global_step')}) is kept"


def move_old_run_aside(folder: Path) -> None:
    """A fresh run moves an old run's checkpoints aside (nothing already saved is lost)
    rather than overwrite them. Only under the run's lock."""
    if folder.is_dir() and any(folder.glob("*.ckpt")):
        aside = folder.with_name(f"{folder.name}.previous-{time.strftime('%Y%m%d-%H%M%S')}")
        shutil.move(str(folder), str(aside))
        log.warning("%s held an earlier run: moved it to %s", folder, aside)


# the choice


def choose_start(cfg: DictConfig, module, datamodule) -> Start:
    """Where this run starts (see the module docstring), said in one line when it continues;
    CheckpointError (one line) where ``resume=true`` cannot continue."""
    mode, folder = resume_mode(cfg), run_folder(cfg)
    if mode == "false":
        return Start()
    try:
        found = pick_resume_checkpoint(folder)
        if found is not None:
            check_resumable(*found, module, datamodule, advice="" if mode == "auto" else None)
    except CheckpointError as err:
        if mode == "true":
            raise
        log.warning("resume=auto: starting a fresh run, the old one moved aside: %s", err)
        return Start()
    if found is None:
        if mode == "true":
            log.warning("resume=true but %s holds no checkpoint: starting a fresh run", folder)
        return Start()
    path, checkpoint = found
    warn_about_schedule(path, checkpoint, cfg)
    start = Start(path, checkpoint, has_finished(checkpoint, cfg))
    if not start.finished:
        position = mid_epoch_position(checkpoint)
        where = f"epoch {position[0]}, after {position[1]} batches" if position else f"end of epoch {checkpoint['epoch']}"
        log.info("resume=%s: continuing the unfinished run of this config from %s (%s, step %s)", mode, path, where,
                 checkpoint.get("global_step"))
    return start
