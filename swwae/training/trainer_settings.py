"""The run spec's trainer section: the arguments of Lightning's ``Trainer``.

Lightning owns its arguments. The section takes every keyword that the installed Lightning's
``Trainer`` takes, read from Lightning's source at run time (``swwae.training.lightning_api``),
so that a Lightning release that adds one needs nothing here and a user passing one is never
refused; a key it does not take is one line with the nearest one that it does. swwae checks
the values it relies on as the job uses them: the run's length, the batches of an epoch,
validation and logging intervals, precision, gradient clipping and accumulation, determinism,
the devices. Types and ranges are checked with the rest of the spec, before torch loads; the
counts of batches against the data (``check_epoch``), once the data are loaded, before
anything is written. Every other argument is passed on as written, for Lightning to judge when
the job builds its Trainer (``swwae.training.checkpoints.build_trainer``).

The devices a run asks for, against those the machine has (``check_devices``): one line
before any data is read. Lightning finds out late, and says it in its own words
(``MisconfigurationException('No supported gpu backend found!')`` for ``trainer=gpu`` without
a GPU); the spec calls :func:`check_devices` with its other checks, so the user reads what
was asked and what is there, and how to ask for what is. Only what can be known from torch is
checked: a CUDA GPU (``gpu``, ``cuda``) or Apple's MPS asked for, and how many. ``auto`` takes
what there is; a CPU run may ask for several processes, as many as the CPUs it may run on (64 on
2 CPUs were killed for memory, without a word); other accelerators are Lightning's to judge.
Several machines (``num_nodes``) only where something starts this process as one of them (a
SLURM job, torchrun, LSF, MPI, or ``NODE_RANK``/``MASTER_ADDR`` set by hand): elsewhere its
processes waited for the other machines' forever, deaf to SIGTERM.

Plain Python: no Lightning, and torch only to count the GPUs that a run asks for.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, create_model, field_validator, model_validator

from swwae.errors import ConfigError, excerpt, plural
from swwae.install import command
from swwae.settings import whole
from swwae.threads import affinity_cpus
from swwae.training.lightning_api import precision_values, takes_time_intervals, trainer_arguments

Count = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[int, Field(strict=True, ge=1)]
DURATION = re.compile(r"\d+:\d+:\d+:\d+")  # Lightning's "DD:HH:MM:SS"
DURATION_WORDS = "a duration ('DD:HH:MM:SS', or {minutes: 30}: datetime.timedelta's arguments)"

# helpers


def fails(key: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"{key}={excerpt(repr(value))} is not allowed: {allowed}")


def batch_setting(key: str, value, smallest: int = 0):
    """Lightning's "a count of batches, or a fraction of them" settings."""
    if value is None or (whole(value) and value >= smallest):
        return value
    if isinstance(value, float) and math.isfinite(value) and (0 < value <= 1 or (smallest == 0 and value == 0)):
        return value
    raise fails(key, value, f"an integer >= {smallest} (batches) or a fraction in (0, 1] (of the batches)")


def is_duration(value) -> bool:
    """A time span as Lightning takes one (``max_time``, a time-based ``val_check_interval``)."""
    if isinstance(value, str):
        return DURATION.fullmatch(value.strip()) is not None
    if isinstance(value, Mapping):
        try:
            return timedelta(**value).total_seconds() > 0
        except (TypeError, ValueError, OverflowError):
            return False
    return False


# devices (module docstring)

CUDA = ("gpu", "cuda")
EVERY = (-1, "-1", "auto", None)  # Lightning's "every device there is"


def cuda_count() -> int:
    import torch  # only when a GPU is asked for: a CPU run's checks load no torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def wanted_indices(devices) -> list[int] | None:
    """The device indices that ``devices`` names (``[0, 2]``, ``"0,2"``), or None if it is a
    count or "every device"."""
    if isinstance(devices, str) and "," in devices:
        return [int(part) for part in devices.split(",") if part.strip()]
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return [int(d) for d in devices]
    return None


def wanted_count(devices) -> int | None:
    """How many devices ``devices`` asks for, or None for "every device" (or a form Lightning judges)."""
    if devices in EVERY or isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return devices
    if isinstance(devices, str) and devices.strip().isdigit():
        return int(devices)
    return None


def check_cuda(devices) -> None:
    have = cuda_count()
    if have == 0:
        raise ConfigError(
            "trainer.accelerator=gpu asks for a CUDA GPU, and this machine has none "
            "(torch.cuda.is_available() is False): train on the CPU with trainer=default "
            "(or trainer.accelerator=auto, which uses a GPU where there is one)"
        )
    indices = wanted_indices(devices)
    if indices is not None:
        missing = [i for i in indices if not 0 <= i < have]
        if missing:
            raise ConfigError(
                f"trainer.devices={devices} names GPU {', '.join(map(str, missing))}, and this machine "
                f"has {plural(have, 'CUDA GPU')} (indices 0..{have - 1})"
            )
        return
    count = wanted_count(devices)
    if count is not None and count > have:
        raise ConfigError(
            f"trainer.devices={devices} asks for {plural(count, 'CUDA GPU')}, and this machine has "
            f"{have}: trainer.devices={have} (or -1: every GPU there is)"
        )


def cpu_processes_line(devices, cpus: int | None) -> str | None:
    """What is wrong with ``devices`` as Lightning's count of CPU processes (a whole number >= 1,
    or ``auto``: one), on a machine where this process may run on ``cpus`` CPUs (None: not known
    here, as in a process a cluster started, which has its own share); None if nothing."""
    if devices in ("auto", None):
        return None
    count = wanted_count(devices)
    if count is None or count < 1:
        return (
            f"trainer.devices={excerpt(str(devices))} on the CPU: there it is a number of processes, 1 or more "
            "(trainer=ddp trainer.devices=2 trains in two)"
        )
    if cpus is not None and count > cpus:
        return (
            f"trainer.devices={count} asks for {count} CPU processes, and this process may run on "
            f"{plural(cpus, 'CPU')}: each process holds its own copy of the model and the data, so give "
            f"trainer.devices={cpus} or fewer"
        )
    return None


# what starts a process as one of several machines': Lightning's cluster environments (which start
# a run's processes themselves, each with its own share of the CPUs), and its own (every machine
# started by hand with NODE_RANK and MASTER_ADDR)
LAUNCHER_VARIABLES = (
    "SLURM_NTASKS",  # a SLURM job
    "TORCHELASTIC_RUN_ID",  # torchrun
    "LSB_JOBID",  # LSF
    "OMPI_COMM_WORLD_SIZE",  # Open MPI's mpirun
    "PMI_SIZE",  # MPICH's, Intel MPI's
)
CLUSTER_VARIABLES = (*LAUNCHER_VARIABLES, "NODE_RANK", "GROUP_RANK", "MASTER_ADDR")


def cpus_here(environ: Mapping[str, str] = os.environ) -> int | None:
    """The CPUs this process may run on, for a count of CPU processes; None in a process a cluster
    launcher started (its share is the task's, and the count of processes the cluster's)."""
    return None if any(name in environ for name in LAUNCHER_VARIABLES) else affinity_cpus()


def check_nodes(trainer_cfg: Mapping, environ: Mapping[str, str] = os.environ) -> None:
    """Several machines asked for (``num_nodes``) in a process that nothing started as one of
    them: its processes would wait for the other machines' forever. A ``plugins`` setting may
    name a cluster environment of its own: Lightning's to judge."""
    nodes = trainer_cfg.get("num_nodes", 1)
    if not isinstance(nodes, int) or nodes <= 1 or trainer_cfg.get("plugins"):
        return
    if any(name in environ for name in CLUSTER_VARIABLES):
        return
    raise ConfigError(
        f"trainer.num_nodes={nodes} asks for {nodes} machines, and nothing started this process as one of "
        "them (a SLURM job's srun, torchrun, LSF, MPI, or NODE_RANK and MASTER_ADDR set by hand): its processes "
        "would wait for the others forever; on one machine leave trainer.num_nodes=1 (trainer.devices=N trains "
        "in N processes), on a cluster start the command on each machine with srun or torchrun"
    )


FLOAT16_AUTOCAST = ("16-mixed", "16", 16)  # Lightning's names for it


def on_the_cpu(accelerator: str) -> bool:
    """Whether Lightning trains on the CPU: asked for, or ``auto`` on a machine without a GPU."""
    return accelerator == "cpu" or (accelerator == "auto" and cuda_count() == 0 and not mps_available())


def check_devices(trainer_cfg: Mapping) -> None:
    """A ``ConfigError`` naming what ``trainer`` asks for and what the machine has, if the
    machine has less; nothing otherwise."""
    accelerator = str(trainer_cfg.get("accelerator") or "auto").lower()
    devices = trainer_cfg.get("devices", "auto")
    precision = trainer_cfg.get("precision")
    if not isinstance(precision, bool) and precision in FLOAT16_AUTOCAST and on_the_cpu(accelerator):
        raise ConfigError(  # Lightning says so in a warning and trains in bf16-mixed: another run than asked
            f"trainer.precision={precision} is float16 autocast, which takes a GPU: on the CPU Lightning would "
            f"train in bf16-mixed instead, while the run records {precision}; on the CPU ask for "
            "trainer.precision=bf16-mixed (or 32-true), or train on a GPU with trainer=gpu"
        )
    check_nodes(trainer_cfg)
    if accelerator in CUDA:
        check_cuda(devices)
    elif accelerator in ("cpu", "auto") and (line := cpu_processes_line(devices, cpus_here())):
        if on_the_cpu(accelerator):  # (auto: torch asked only where the CPU would refuse them)
            raise ConfigError(line)
    elif accelerator == "mps" and not mps_available():
        cuda = cuda_count()
        instead = f"trainer=gpu (this machine has {plural(cuda, 'CUDA GPU')})" if cuda else "trainer=default (the CPU)"
        raise ConfigError(
            "trainer.accelerator=mps asks for Apple's MPS GPU, and this machine has none "
            f"(torch.backends.mps.is_available() is False; MPS is macOS on Apple silicon): "
            f"train with {instead}"
        )


# the section


class CheckedTrainer(BaseModel):
    """The Trainer arguments swwae relies on, with the values it accepts (Lightning's
    defaults); ``TrainerSpec`` adds the others, as written."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    target: StrictStr = Field(alias="_target_")
    accelerator: Any = "auto"  # and devices: check_devices (the command line's)
    devices: Any = "auto"
    num_nodes: Positive = 1
    precision: Any = None
    fast_dev_run: Any = False
    max_epochs: Any = None
    max_steps: Any = -1
    max_time: Any = None
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    overfit_batches: Any = 0.0
    val_check_interval: Any = None
    check_val_every_n_epoch: Positive | None = 1
    log_every_n_steps: Count | None = None
    accumulate_grad_batches: Positive = 1
    gradient_clip_val: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] | None = None
    gradient_clip_algorithm: Literal["norm", "value"] | None = None
    deterministic: StrictBool | Literal["warn"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _names_a_trainer(cls, values):
        if isinstance(values, Mapping) and "_target_" not in values and "target" not in values:
            raise ConfigError(
                "trainer._target_ is missing: the trainer section names no Trainer (~trainer removes "
                "the trainer config): choose one with trainer=default, gpu or ddp"
            )
        return values

    @field_validator("max_epochs")
    @classmethod
    def _epochs(cls, value):
        if value is None or (whole(value) and value >= 0):  # 0: _length says why not
            return value
        raise fails("trainer.max_epochs", value, "a whole number of epochs >= 1 (a run that never ends never finishes)")

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, value):
        if whole(value) and value >= -1:  # -1: no limit; 0: _length says why not
            return value
        raise fails("trainer.max_steps", value, "a whole number of steps >= 1, or -1 for no limit")

    @field_validator("max_time")
    @classmethod
    def _time(cls, value):
        if value is None or is_duration(value):
            return value
        raise fails("trainer.max_time", value, DURATION_WORDS)

    @field_validator("limit_train_batches", "limit_val_batches", "limit_test_batches")
    @classmethod
    def _limits(cls, value, info):
        return batch_setting(f"trainer.{info.field_name}", value, smallest=0)

    @field_validator("overfit_batches")
    @classmethod
    def _overfit(cls, value):
        if value in (0, 0.0) and not isinstance(value, bool):  # 0: off, as Lightning has it
            return value
        raise fails(
            "trainer.overfit_batches",
            value,
            "swwae's loaders hand out whole batches, which Lightning's overfit_batches takes apart "
            "(it puts a sampler of single images in their place); trainer.limit_train_batches=N "
            "trains on N batches an epoch",
        )

    @field_validator("val_check_interval")
    @classmethod
    def _val_interval(cls, value):
        if is_duration(value):
            if not takes_time_intervals():
                raise fails(
                    "trainer.val_check_interval",
                    value,
                    "a time span takes Lightning 2.6.5 or later; give an integer >= 1 (batches) or a fraction "
                    "in (0, 1] (of the epoch), or upgrade lightning",
                )
            return value
        try:
            return batch_setting("trainer.val_check_interval", value, smallest=1)
        except ConfigError:
            raise fails(
                "trainer.val_check_interval",
                value,
                f"an integer >= 1 (batches), a fraction in (0, 1] (of the epoch) or {DURATION_WORDS}",
            ) from None

    @field_validator("fast_dev_run")
    @classmethod
    def _fast_dev_run(cls, value):
        if isinstance(value, bool) or (whole(value) and value >= 0):
            return value
        raise fails("trainer.fast_dev_run", value, "true, false or a number of batches >= 0")

    @field_validator("precision")
    @classmethod
    def _precision(cls, value):
        allowed = precision_values()
        if value is None or allowed is None or (not isinstance(value, bool) and value in allowed):
            return value
        raise fails("trainer.precision", value, f"one of {', '.join(dict.fromkeys(map(str, allowed)))}")

    @model_validator(mode="after")
    def _length(self):
        """A run that trains nothing, never validates (validation picks best.ckpt and gives the
        monitored metric) or is Lightning's one-batch smoke test would report a model it did not
        make: one line before anything is written."""
        for key in ("max_epochs", "max_steps", "limit_train_batches"):
            if getattr(self, key) == 0:
                raise ConfigError(
                    f"trainer.{key}=0 trains nothing: give it at least 1 (to evaluate a checkpoint "
                    f"without training, use {command('evaluate')} <checkpoint>)"
                )
        if self.limit_val_batches == 0:
            raise ConfigError(
                "trainer.limit_val_batches=0 never validates, and validation picks best.ckpt and gives "
                "the metric a run reports: give at least 1 (batches) or a fraction"
            )
        every, epochs = self.check_val_every_n_epoch, self.max_epochs
        if every is not None and epochs is not None and every > epochs:  # max_steps only shortens a run
            raise ConfigError(
                f"trainer.check_val_every_n_epoch={every} never validates in a run of "
                f"trainer.max_epochs={epochs}, and validation picks best.ckpt and gives the metric a run "
                f"reports: validate every {'epoch' if epochs == 1 else f'{epochs} epochs or fewer'}"
            )
        if self.fast_dev_run not in (False, 0):
            raise ConfigError(
                f"trainer.fast_dev_run={self.fast_dev_run} is Lightning's smoke test: a batch or two, no "
                f"checkpoint, nothing a run could report; for a check in seconds that trains, saves and "
                f"reports, use debug=quick"
            )
        return self

    @model_validator(mode="after")
    def _lightning_takes_it(self):
        taken = trainer_arguments()
        for name in self.model_fields_set - {"target"}:
            if name not in taken:  # a Lightning release without an argument swwae checks
                raise ConfigError(f"trainer.{name} is not an argument of the installed Lightning's Trainer")
        return self


TrainerSpec = create_model(
    "TrainerSpec",
    __base__=CheckedTrainer,
    __module__=__name__,
    **{name: (Any, None) for name in trainer_arguments() if name not in CheckedTrainer.model_fields},
)
TrainerSpec.__doc__ = (  # set here: create_model takes __doc__ only from pydantic 2.5 on
    "The trainer section: ``CheckedTrainer``'s settings, and every other argument of the "
    "installed Lightning's ``Trainer``, passed on as written (None: not given, Lightning's default)."
)


# against the data


def limited(count: int, limit) -> int:
    """The batches Lightning runs of ``count``, under ``limit_*_batches`` (its rule)."""
    if limit is None:
        return count
    return min(count, limit) if whole(limit) else int(count * limit)


def check_epoch(settings: CheckedTrainer, datamodule, world_size: int = 1) -> None:
    """The batch settings against the data, as Lightning counts them (per process) when fit
    starts: one line here, before the run's folder is touched, instead of a traceback then.
    A loader without a length (a data module of your own) is Lightning's to count."""
    if settings.fast_dev_run:  # Lightning's own limits
        return
    if world_size > 1 and is_duration(settings.val_check_interval):
        raise ConfigError(
            f"trainer.val_check_interval={settings.val_check_interval!r}: a time span under DDP lets each process "
            "validate by its own clock, at a batch the others may not, and the run hangs: give a number of "
            "batches or a fraction of the epoch"
        )
    shared = world_size if getattr(settings, "use_distributed_sampler", None) is not False else 1
    each = " per process" if shared > 1 else ""

    def batches(split: str) -> int | None:
        try:
            return math.ceil(len(getattr(datamodule, f"{split}_dataloader")()) / shared)
        except Exception:  # no length, or no such loader: Lightning counts it (and says so) when fit starts
            return None

    for split, words in (("train", "training"), ("val", "validation"), ("test", "test")):
        limit = getattr(settings, f"limit_{split}_batches")
        if isinstance(limit, float) and 0 < limit < 1 and (count := batches(split)) and limited(count, limit) == 0:
            raise ConfigError(
                f"trainer.limit_{split}_batches={limit} leaves no {words} batch: {limit} of the {count} "
                f"{words} batches{each} is less than one (give at least {1 / count:.2g}, or a number of batches)"
            )
    count = batches("train")
    if not count:
        return
    epoch = limited(count, settings.limit_train_batches)
    interval = settings.val_check_interval
    if whole(interval) and settings.check_val_every_n_epoch is not None and interval > epoch:
        raise ConfigError(
            f"trainer.val_check_interval={interval} is more than the {epoch} training batches of an "
            f"epoch{each}: validate every {epoch} batches or fewer, or a fraction of the epoch (0.5), "
            f"or count batches across epochs with trainer.check_val_every_n_epoch=null"
        )
    check_first_validation(settings, epoch)


def steps_an_epoch(batches: int, accumulate: int) -> int:
    """The optimiser steps of an epoch of ``batches`` training batches whose gradients add up
    ``accumulate`` at a time (``accumulate_grad_batches``): Lightning steps after every
    ``accumulate``-th batch, and after the epoch's last one whatever its count."""
    return math.ceil(batches / accumulate)


def first_validation(settings: CheckedTrainer, epoch: int) -> tuple[int, int] | None:
    """(training batches, optimiser steps) before the run first validates, as Lightning counts
    them for an epoch of ``epoch`` batches; None when it depends on the clock."""
    interval, every = settings.val_check_interval, settings.check_val_every_n_epoch
    accumulate = settings.accumulate_grad_batches
    per_epoch = steps_an_epoch(epoch, accumulate)
    if every is None:  # every `interval` batches, counted across epochs
        if not whole(interval):
            return None
        done_epochs, within = divmod(interval, epoch)
    else:
        if interval is None or (isinstance(interval, float) and interval == 1.0):
            within = epoch
        elif whole(interval):
            within = interval
        elif isinstance(interval, float):
            within = max(1, int(epoch * interval))
        else:  # a time: the clock decides
            return None
        done_epochs = every - 1
    steps = done_epochs * per_epoch + (per_epoch if within >= epoch else within // accumulate)
    return done_epochs * epoch + within, steps


def validates_at_step(settings: CheckedTrainer, epoch: int, step: int) -> bool:
    """Whether a run that ``trainer.max_steps`` ends at ``step`` validates there: the job asks
    Lightning to stop at that step (``SWWAEModule.on_train_batch_end``), and Lightning validates
    a run asked to stop in an epoch that validates (``check_val_every_n_epoch``)."""
    every = settings.check_val_every_n_epoch
    if every is None:
        return True
    return ((step - 1) // steps_an_epoch(epoch, settings.accumulate_grad_batches) + 1) % every == 0


def check_first_validation(settings: CheckedTrainer, epoch: int) -> None:
    """A step budget that ends the run before it validates once: the run would have no best
    checkpoint and no metric to report."""
    first = first_validation(settings, epoch)
    if first is None or settings.max_steps in (None, -1) or settings.max_steps >= first[1]:
        return
    if validates_at_step(settings, epoch, settings.max_steps):
        return
    batches, steps = first
    raise ConfigError(
        f"trainer.max_steps={settings.max_steps} ends the run before it first validates (after {batches} "
        f"training batches, step {steps}), and validation picks best.ckpt and gives the metric a run "
        f"reports: give at least trainer.max_steps={steps}, or validate sooner (trainer.val_check_interval)"
    )
