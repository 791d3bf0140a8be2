"""The typed run spec: a run's settings, parsed once, into frozen sections.

One schema for the command line (``check_config``, on the resolved Hydra config, before torch
loads) and for every config a file stores (``parse_stored``, a checkpoint's ``swwae_config``):
types, ranges and the keys that may appear. A value that the job, Lightning or a data set
would reject later is rejected here, in one line naming the key, the value and what is
allowed, before anything is written.

The types are pydantic's (strict: ``2.5`` is no int, ``"3"`` no number; ``extra="forbid"``:
a misspelled key is named, with the nearest setting); what a value means is checked by the
project's own functions (``swwae.settings``, ``swwae.arch``, the run name, the resume mode,
the devices), the same ones the classes run when they are built, so the words are the same.
A model or data class that swwae does not ship keeps its section as written: it checks its
own settings when it is built. Plain Python: no torch, no Lightning.

The devices a run asks for, against those the machine has (``check_devices``, below): one
line before any data is read.

Lightning finds out late, and says it in its own words (``MisconfigurationException('No
supported gpu backend found!')`` for ``trainer=gpu`` without a GPU); the job calls
:func:`check_devices` with its other checks, so the user reads what was asked and what is
there, and how to ask for what is. Only what can be known from torch is checked: a CUDA GPU
(``gpu``, ``cuda``) or Apple's MPS asked for, and how many. ``auto`` takes what there is, and
CPU runs may ask for several processes; other accelerators are Lightning's to judge.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from importlib.util import find_spec
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    ValidationInfo,
    create_model,
    field_validator,
    model_validator,
)

from swwae.arch import check_fits
from swwae.datasets import DATA_SETS
from swwae.errors import CheckpointError, ConfigError, UserError
from swwae.loss_terms import loss_weights
from swwae.settings import (
    DataSettings,
    Int,
    NetworkSettings,
    Settings,
    check_data,
    check_network,
    check_pool_settings,
    check_training,
    first_problem,
    model_settings,
    network_spec,
    pool_mode_of,
    trains_classifier,
)
from swwae.training.composing import check_mode
from swwae.training.registry import DATA_MODULES, DATASETS, MODEL_MODULES, MODELS, shipped
from swwae.training.runs.decision import resume_mode
from swwae.training.runs.identity import check_run_name

Count = Annotated[int, Field(strict=True, ge=0)]
Positive = Annotated[int, Field(strict=True, ge=1)]
PRECISION_VALUES = (64, 32, 16, "64", "32", "16", "bf16", "16-true", "16-mixed", "bf16-true", "bf16-mixed", "32-true")
PRECISION_VALUES += ("64-true", "transformer-engine", "transformer-engine-float16")
# loggers and callbacks are instantiated as written (their classes check them); their
# interpolations may need resolvers of modules that import Lightning
AS_WRITTEN = ("logger", "callbacks")

# helpers


def fails(key: str, value, allowed: str) -> ConfigError:
    return ConfigError(f"{key}={value!r} is not allowed: {allowed}")


def whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def batch_setting(key: str, value, smallest: int = 0):
    """Lightning's "a count of batches, or a fraction of them" settings."""
    if value is None or (whole(value) and value >= smallest):
        return value
    if isinstance(value, float) and math.isfinite(value) and (0 < value <= 1 or (smallest == 0 and value == 0)):
        return value
    raise fails(key, value, f"an integer >= {smallest} (batches) or a fraction in (0, 1] (of the batches)")


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


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


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


def check_devices(trainer_cfg: Mapping) -> None:
    """A ``ConfigError`` naming what ``trainer`` asks for and what the machine has, if the
    machine has less; nothing otherwise."""
    accelerator = str(trainer_cfg.get("accelerator") or "auto").lower()
    devices = trainer_cfg.get("devices", "auto")
    if accelerator in CUDA:
        check_cuda(devices)
    elif accelerator == "mps" and not mps_available():
        cuda = cuda_count()
        instead = f"trainer=gpu (this machine has {plural(cuda, 'CUDA GPU')})" if cuda else "trainer=default (the CPU)"
        raise ConfigError(
            "trainer.accelerator=mps asks for Apple's MPS GPU, and this machine has none "
            f"(torch.backends.mps.is_available() is False; MPS is macOS on Apple silicon): "
            f"train with {instead}"
        )


# sections


class Frozen(BaseModel):
    """Typed and frozen: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


class Section(Frozen):
    """A section that names the class it is built as (Hydra's ``_target_``)."""

    target: StrictStr = Field("", alias="_target_")


class OwnClass(Section):
    """A model or data class the user brought: its settings as written (it checks them)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)


@functools.lru_cache(maxsize=32)
def with_target(schema: type[Settings]) -> type[Section]:
    """A section's schema (``swwae.settings``) with the ``_target_`` that names its class."""
    return create_model(
        f"{schema.__name__}Section", __base__=(Section, schema), target=(StrictStr, Field("", alias="_target_"))
    )


def model_spec() -> type[Section]:
    """``SWWAEModule``'s settings (``configs/model/*.yaml``): the network, the loss, the optimiser."""
    return with_target(model_settings())


def data_spec(entry) -> type[Section]:
    """A data set's settings (its entry's ``settings`` in ``swwae.datasets``)."""
    return with_target(entry.settings)


class TrainerSpec(Section):
    """``lightning.pytorch.Trainer``'s keyword arguments (2.x), with the values it accepts; the
    ones that may hold objects or Lightning's own mini-languages (devices, strategy, max_time)
    are Lightning's to judge."""

    accelerator: Any = "auto"
    strategy: Any = "auto"
    devices: Any = "auto"
    num_nodes: Positive = 1
    precision: Any = None
    logger: Any = None
    callbacks: Any = None
    fast_dev_run: Any = False
    max_epochs: Any = None
    min_epochs: Count | None = None
    max_steps: Any = -1
    min_steps: Count | None = None
    max_time: Any = None
    limit_train_batches: Any = None
    limit_val_batches: Any = None
    limit_test_batches: Any = None
    limit_predict_batches: Any = None
    overfit_batches: Any = 0.0
    val_check_interval: Any = None
    check_val_every_n_epoch: Positive | None = 1
    num_sanity_val_steps: Annotated[int, Field(strict=True, ge=-1)] | None = None
    log_every_n_steps: Count | None = None
    enable_checkpointing: StrictBool | None = None
    enable_progress_bar: StrictBool | None = None
    enable_model_summary: StrictBool | None = None
    accumulate_grad_batches: Positive = 1
    gradient_clip_val: Annotated[float, Field(strict=True, ge=0, allow_inf_nan=False)] | None = None
    gradient_clip_algorithm: Literal["norm", "value"] | None = None
    deterministic: StrictBool | Literal["warn"] | None = None
    benchmark: StrictBool | None = None
    inference_mode: StrictBool = True
    use_distributed_sampler: StrictBool = True
    profiler: Any = None
    detect_anomaly: StrictBool = False
    barebones: StrictBool = False
    plugins: Any = None
    sync_batchnorm: StrictBool = False
    reload_dataloaders_every_n_epochs: Count = 0
    default_root_dir: StrictStr | None = None
    enable_autolog_hparams: StrictBool = True
    model_registry: StrictStr | None = None

    @field_validator("max_epochs")
    @classmethod
    def _epochs(cls, value):
        if value is None or (whole(value) and value >= 0):  # 0: check_length says why not
            return value
        raise fails("trainer.max_epochs", value, "a whole number of epochs >= 1 (a run that never ends never finishes)")

    @field_validator("max_steps")
    @classmethod
    def _steps(cls, value):
        if whole(value) and value >= -1:  # -1: no limit; 0: check_length says why not
            return value
        raise fails("trainer.max_steps", value, "a whole number of steps >= 1, or -1 for no limit")

    @field_validator("limit_train_batches", "limit_val_batches", "limit_test_batches", "limit_predict_batches")
    @classmethod
    def _limits(cls, value, info):
        return batch_setting(f"trainer.{info.field_name}", value, smallest=0)

    @field_validator("overfit_batches")
    @classmethod
    def _overfit(cls, value):
        return batch_setting("trainer.overfit_batches", value, smallest=0)

    @field_validator("val_check_interval")
    @classmethod
    def _val_interval(cls, value):
        return batch_setting("trainer.val_check_interval", value, smallest=1)

    @field_validator("fast_dev_run")
    @classmethod
    def _fast_dev_run(cls, value):
        if isinstance(value, bool) or (whole(value) and value >= 0):
            return value
        raise fails("trainer.fast_dev_run", value, "true, false or a number of batches >= 0")

    @field_validator("precision")
    @classmethod
    def _precision(cls, value):
        if value is None or (not isinstance(value, bool) and value in PRECISION_VALUES):
            return value
        raise fails("trainer.precision", value, f"one of {', '.join(map(str, PRECISION_VALUES[4:]))}")

    @model_validator(mode="after")
    def _length(self):
        for key in ("max_epochs", "max_steps"):
            if getattr(self, key) == 0:  # a run that trains nothing would report an untrained model
                raise ConfigError(
                    f"trainer.{key}=0 trains nothing: give it at least 1 (to evaluate a checkpoint "
                    f"without training, use python scripts/evaluate.py <checkpoint>)"
                )
        return self


class PathsSpec(Frozen):
    """Where the run writes; more keys may be there for a config's own interpolations
    (``paths.data_dir``)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    log_dir: StrictStr = "logs"
    checkpoint_dir: StrictStr = "checkpoints"
    output_dir: StrictStr | None = None


class RunSpec(Frozen):
    """A run's settings: the run itself, then a section for each part of the job."""

    run_name: StrictStr
    seed: Int | None = 0
    resume: Literal["auto", "true", "false"] = "auto"
    test: StrictBool = True
    optimized_metric: StrictStr | None = None
    optimized_mode: Literal["min", "max"] | None = None  # the checkpoint monitor's
    keep_freed_memory: StrictBool = True
    flush_denormal: StrictBool = True
    compile: StrictBool | StrictStr = False
    verbose: StrictBool = False  # Lightning's own lines (banner, tips, restore lines) on the console
    trainer: TrainerSpec = TrainerSpec()
    data: Frozen  # a data set's section (data_spec) or OwnClass
    model: Frozen  # model_spec() or OwnClass
    logger: dict[str, Any] | None = None
    callbacks: dict[str, Any] | None = None
    paths: PathsSpec = PathsSpec()

    @field_validator("run_name", mode="before")
    @classmethod
    def _name(cls, value):
        return check_run_name(value)

    @field_validator("seed", mode="before")
    @classmethod
    def _seed(cls, value):
        if value is not None and (not whole(value) or not 0 <= value < 2**32):
            raise ConfigError(f"seed must be an integer in 0..{2**32 - 1} (or null), got {value!r}")
        return value

    @field_validator("optimized_mode", mode="before")
    @classmethod
    def _mode(cls, value):
        return value if value is None else check_mode(value)

    @field_validator("resume", mode="before")
    @classmethod
    def _resume(cls, value):
        return resume_mode(value)

    @field_validator("trainer", mode="before")
    @classmethod
    def _trainer(cls, value, info: ValidationInfo):
        trainer = section_of(value, "trainer", TrainerSpec)
        if not stored(info) and isinstance(value, Mapping):
            check_devices(value)  # a GPU asked for and not there: one line, before the data
        return trainer

    @field_validator("data", mode="before")
    @classmethod
    def _data(cls, value, info: ValidationInfo):
        data = section_of(value, "data", class_spec("data", value, stored(info)))
        if isinstance(data, DataSettings):  # as the data module will check them
            shipped_data = DATASETS[data.target.rpartition(".")[2]]
            # a stored config's folder is not looked at: where data is read from is the user's
            classes = shipped_data.classes_of(data) if stored(info) is None else shipped_data.num_classes
            check_data(shipped_data.name, classes, data)
        return data

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value, info: ValidationInfo):
        return section_of(value, "model", class_spec("model", value, stored(info)))

    @model_validator(mode="after")
    def _model_on_its_data(self, info: ValidationInfo):
        """A shipped model's network on the images of a data set of the data-set table (shipped
        or registered: ``swwae.datasets``), as their classes check it."""
        if not isinstance(self.model, NetworkSettings) or not isinstance(self.data, Section):
            return self
        data = table_entry(self.data.target)
        if data is None:  # the user's own class: it checks its images itself
            return self
        m = self.model
        values = m.model_dump()
        image_shape = data.shape_of(self.data)
        num_classes = data.classes_of(self.data) if stored(info) is None else data.num_classes
        check_network(m.kernel_size, m.pool_mode, m.nonlinearity, m.dropout, image_shape)
        check_pool_settings(pool_mode_of(m.pool_mode), values)
        classes = num_classes if trains_classifier(values) else None
        arch = network_spec(m.arch, list(m.widths), m.kernel_size, m.pool_size, classes)
        check_fits(arch, image_shape, m.pool_stride, m.pool_padding, ceil=pool_mode_of(m.pool_mode).ceil)
        check_training(loss_weights(values), arch=m.arch)
        return self


# parsing


def table_entry(target: str):
    """The data-set table's entry (``swwae.datasets``) that a ``data._target_`` names, under
    a module path the entry allows; None for a class the table does not hold."""
    try:
        return shipped(target, DATASETS, DATA_MODULES, "the data class", "the config")
    except CheckpointError:
        return None


def stored(info: ValidationInfo) -> str | None:
    """The file a stored config comes from; None on the command line."""
    return (info.context or {}).get("source")


def names_of(spec: type[BaseModel]) -> list[str]:
    return [field.alias or name for name, field in spec.model_fields.items()]


def setting_names(section: str) -> list[str]:
    """The keys a section may hold ("" for the top level; every data set's for ``data``); [] for
    a section of classes' own arguments (loggers, callbacks)."""
    if section == "data":
        return sorted({name for entry in DATA_SETS.values() for name in names_of(data_spec(entry))})
    if section == "model":
        return names_of(model_spec())
    spec = {"trainer": TrainerSpec, "paths": PathsSpec, "": RunSpec}.get(section)
    return names_of(spec) if spec else []


def section_of(values, section: str, spec: type[BaseModel]) -> BaseModel:
    """One section by its schema; its first problem as a UserError (pydantic passes it on)."""
    if isinstance(values, BaseModel):
        return values
    if not isinstance(values, Mapping):
        raise ConfigError(f"{section} must be a mapping of settings, got {type(values).__name__}")
    try:
        return spec.model_validate(dict(values))
    except ValidationError as err:
        raise first_problem(err, section, names_of(spec)) from None


def class_spec(section: str, values, source: str | None) -> type[Section]:
    """The section's schema, by the class its ``_target_`` names. On the command line a class
    swwae does not ship is the user's own (``OwnClass``); a stored config may name only a shipped
    class, under any module path it has had."""
    if not isinstance(values, Mapping):
        return OwnClass  # section_of says it is no mapping
    target = values.get("_target_")
    if section == "model":
        table, modules, specs = MODELS, MODEL_MODULES, {"SWWAEModule": model_spec()}
    else:
        table, modules = DATASETS, DATA_MODULES
        specs = {entry.cls: data_spec(entry) for entry in DATA_SETS.values()}
    if source is not None:
        return specs.get(shipped(target, table, modules, f"the {section} class", source).cls, OwnClass)
    module, _, name = str(target).rpartition(".")
    if name in specs and any(module == m or module.startswith(m + ".") for m in modules):
        return specs[name]
    return OwnClass


def check_config(cfg) -> RunSpec:
    """The run spec of a job config: the command line's (a DictConfig, resolved here: all but
    its loggers and callbacks, ``AS_WRITTEN``) or a resolved mapping of it. Every check that
    needs neither torch nor Lightning; ConfigError in one line. ``train.py`` runs it first."""
    from omegaconf import OmegaConf

    if OmegaConf.is_config(cfg):
        cfg = {
            key: OmegaConf.to_container(cfg[key], resolve=key not in AS_WRITTEN)
            if OmegaConf.is_config(cfg._get_node(key))
            else cfg[key]
            for key in cfg
        }
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"a run config must be a mapping of settings, got {type(cfg).__name__}")
    try:
        spec = RunSpec.model_validate(dict(cfg), context={"source": None})
    except ValidationError as err:
        raise first_problem(err, "", names_of(RunSpec)) from None
    check_extras(spec.logger)  # the command's trackers only: a stored config's may be gone where it is read
    return spec


# logger class -> (the package it needs, the extra of pyproject.toml that installs it)
EXTRAS = {"MLFlowLogger": ("mlflow", "mlflow"), "WandbLogger": ("wandb", "wandb")}


def check_extras(loggers: Mapping | None) -> None:
    """ConfigError (one line, before any training) for each logger of the config's ``logger``
    section whose package is missing: ``logger=mlflow needs mlflow: pip install -e ".[mlflow]"``."""
    for key, node in (loggers or {}).items():
        target = str(node.get("_target_", "")) if isinstance(node, Mapping) else ""
        needs = EXTRAS.get(target.rsplit(".", 1)[-1])
        if needs is None:
            continue
        package, extra = needs
        if find_spec(package) is None:
            raise ConfigError(f'logger={key} needs {package}: pip install -e ".[{extra}]"')


def parse_stored(config: Mapping, source: str) -> RunSpec:
    """The run spec of a config a file stores (a checkpoint's ``swwae_config``), by the same
    schema: keys it predates take their defaults; its model and data must be classes swwae
    ships; anything else is a CheckpointError naming ``source``, in one line."""
    try:
        if not isinstance(config, Mapping):
            raise ConfigError(f"a run config must be a mapping of settings, got {type(config).__name__}")
        try:
            return RunSpec.model_validate(dict(config), context={"source": source})
        except ValidationError as err:
            raise first_problem(err, "", names_of(RunSpec)) from None
    except CheckpointError:
        raise
    except UserError as err:
        raise CheckpointError(f"{source} holds a run config that does not parse: {err}") from None
