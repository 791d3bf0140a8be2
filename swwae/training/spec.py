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
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from importlib.util import find_spec
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictStr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from swwae.arch import check_fits
from swwae.errors import CheckpointError, ConfigError, UserError
from swwae.loss_terms import TERMS
from swwae.settings import check_data, check_network, check_training, network_spec, pool_mode_of, trains_classifier
from swwae.training.composing import check_mode
from swwae.training.registry import DATA_MODULES, DATASETS, MODEL_MODULES, MODELS, shipped
from swwae.training.runs.decision import resume_mode
from swwae.training.runs.identity import check_run_name
from swwae.training.trainer_settings import TrainerSpec, check_devices

Int = Annotated[int, Field(strict=True)]
# the data settings that swwae.settings.check_data checks (the rest are each data set's own)
CHECKED_DATA_KEYS = (
    "batch_size",
    "num_labels",
    "seed",
    "num_workers",
    "split_seed",
    "labelled_per_batch",
    "num_unlabelled",
)
# loggers and callbacks are instantiated as written (their classes check them); their
# interpolations may need resolvers of modules that import Lightning
AS_WRITTEN = ("logger", "callbacks")

# helpers


def finite(value):
    """A finite number, kept as written (an int stays an int: ``got -1``, as the user typed)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value
    raise ValueError("must be a finite number")


Number = Annotated[Any, AfterValidator(finite)]


def whole(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def unknown_key(key: str, known) -> str:
    """'x.y is not a setting; did you mean x.z?' (difflib), or the settings there are."""
    section, _, name = key.rpartition(".")
    prefix = f"{section}." if section else ""
    near = difflib.get_close_matches(name, [str(k) for k in known], n=1, cutoff=0.6)
    if near:
        return f"{key} is not a setting; did you mean {prefix}{near[0]}?"
    shown = ", ".join(sorted(map(str, known)))
    return f"{key} is not a setting{f' of {section}' if section else ''}; the settings are: {shown}"


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


class ModelSpec(Section):
    """``SWWAEModule``'s settings (``configs/model/*.yaml``): the network, the loss, the optimiser."""

    arch: StrictStr | None = None
    widths: tuple[Int, ...] = (32, 64)
    kernel_size: Int = 3
    pool_size: Int = 2
    nonlinearity: StrictStr = "relu"
    batch_norm: StrictBool = False
    dropout: Number = 0.0
    pool_mode: StrictStr = "hard"
    pool_stride: Int | None = None
    pool_padding: Int = 0
    beta: Number = 100.0
    wavelet: StrictStr = "haar"
    classifier_dropout: Number = 0.0
    lambda_rec: Number = 1.0
    lambda_m: Number = 0.1
    lambda_nll: Number = 1.0
    input_noise: Number = 0.0
    nll_warmup_epochs: Number = 0.0
    clean_middle_targets: StrictBool = False
    lr: Number = 2e-3
    weight_decay: Number = 0.0
    scheduler: StrictStr = "cosine"


class DataSpec(Section):
    """The settings every shipped data set takes (``swwae.training.data.base``)."""

    batch_size: Int = 128
    num_labels: Int | None = None
    labelled_per_batch: Int | None = None
    num_unlabelled: Int | None = None
    seed: Int = 0
    split_seed: Int = 0
    num_workers: Int = 0
    augment: StrictBool = False


class SampleDataSpec(DataSpec):
    val_size: Int = 500
    test_size: Int = 500


class FolderDataSpec(DataSpec):
    """A torchvision data set under ``root``."""

    root: StrictStr = "./data"
    download: StrictBool = False
    val_size: Int = 5000


class SVHNDataSpec(FolderDataSpec):
    extra: StrictBool = False


class STL10DataSpec(FolderDataSpec):
    fold: Int | None = None
    unlabelled: StrictBool = True
    val_size: Int = 500


DATA_SPECS: dict[str, type[DataSpec]] = {
    "MNISTSampleDataModule": SampleDataSpec,
    "MNISTDataModule": FolderDataSpec,
    "CIFAR10DataModule": FolderDataSpec,
    "CIFAR100DataModule": FolderDataSpec,
    "SVHNDataModule": SVHNDataSpec,
    "STL10DataModule": STL10DataSpec,
}


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
    trainer: TrainerSpec
    data: DataSpec | OwnClass
    model: ModelSpec | OwnClass
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
        if isinstance(data, DataSpec):  # as the data module will check them
            shipped_data = DATASETS[data.target.rpartition(".")[2]]
            check_data(shipped_data.name, shipped_data.num_classes, **{k: getattr(data, k) for k in CHECKED_DATA_KEYS})
        return data

    @field_validator("model", mode="before")
    @classmethod
    def _model(cls, value, info: ValidationInfo):
        return section_of(value, "model", class_spec("model", value, stored(info)))

    @model_validator(mode="after")
    def _model_on_its_data(self):
        """A shipped model's network on the images of a data set of the data-set table (shipped
        or registered: ``swwae.datasets``), as their classes check it."""
        if not isinstance(self.model, ModelSpec) or not isinstance(self.data, Section):
            return self
        data = table_entry(self.data.target)
        if data is None:  # the user's own class: it checks its images itself
            return self
        m = self.model
        check_network(m.kernel_size, m.pool_mode, m.beta, m.nonlinearity, m.dropout, data.image_shape)
        classes = data.num_classes if trains_classifier(m.model_dump()) else None
        arch = network_spec(m.arch, list(m.widths), m.kernel_size, m.pool_size, classes)
        check_fits(arch, data.image_shape, m.pool_stride, m.pool_padding, ceil=pool_mode_of(m.pool_mode).ceil)
        check_training(
            {t.weight: getattr(m, t.weight) for t in TERMS},
            input_noise=m.input_noise,
            nll_warmup_epochs=m.nll_warmup_epochs,
            lr=m.lr,
            scheduler=m.scheduler,
            arch=m.arch,
        )
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


def first_problem(err: ValidationError, section: str = "") -> UserError:
    """The first problem of a validation, as the one line a user reads."""
    first = err.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, UserError):
        return cause  # the project's own check said it (an ArchError keeps its caret)
    loc = [str(p) for p in first["loc"] if not str(p).startswith("function-")]
    key = ".".join([section, *loc] if section else loc)
    if first["type"] == "extra_forbidden":
        return ConfigError(unknown_key(key, known_keys(section, err.title)))
    if first["type"] == "missing":
        return ConfigError(f"{key} is missing: the config must set it")
    message = first["msg"].replace("Input should be", "must be").replace("Value error, ", "")
    return ConfigError(f"{key}={first['input']!r} is not allowed: {message}")


def names_of(spec: type[Frozen]) -> list[str]:
    return [field.alias or name for name, field in spec.model_fields.items()]


def setting_names(section: str) -> list[str]:
    """The keys a section may hold ("" for the top level; every shipped data set's for
    ``data``); [] for a section of classes' own arguments (loggers, callbacks)."""
    if section == "data":
        return sorted({name for spec in DATA_SPECS.values() for name in names_of(spec)})
    spec = {"model": ModelSpec, "trainer": TrainerSpec, "paths": PathsSpec, "": RunSpec}.get(section)
    return names_of(spec) if spec else []


def known_keys(section: str, title: str) -> list[str]:
    """The keys of the schema that refused a key (``title``: its class name)."""
    spec = next((s for s in DATA_SPECS.values() if s.__name__ == title), None)
    return names_of(spec) if spec else setting_names(section)


def section_of(values, section: str, spec: type[Frozen]) -> Frozen:
    """One section by its schema; its first problem as a UserError (pydantic passes it on)."""
    if isinstance(values, Frozen):
        return values
    if not isinstance(values, Mapping):
        raise ConfigError(f"{section} must be a mapping of settings, got {type(values).__name__}")
    try:
        return spec.model_validate(dict(values))
    except ValidationError as err:
        raise first_problem(err, section) from None


def class_spec(section: str, values, source: str | None) -> type[Section]:
    """The section's schema, by the class its ``_target_`` names. On the command line a class
    swwae does not ship is the user's own (``OwnClass``); a stored config may name only a shipped
    class, under any module path it has had."""
    if not isinstance(values, Mapping):
        return OwnClass  # section_of says it is no mapping
    target = values.get("_target_")
    if section == "model":
        table, modules, specs = MODELS, MODEL_MODULES, {"SWWAEModule": ModelSpec}
    else:
        table, modules, specs = DATASETS, DATA_MODULES, DATA_SPECS
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
        raise first_problem(err) from None
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
            raise first_problem(err) from None
    except CheckpointError:
        raise
    except UserError as err:
        raise CheckpointError(f"{source} holds a run config that does not parse: {err}") from None
