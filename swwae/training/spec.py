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
import functools
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
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
from swwae.install import importable, install_extra
from swwae.loss_terms import loss_weights
from swwae.settings import (
    DataSettings,
    NetworkSettings,
    Settings,
    check_data,
    check_network,
    check_training,
    first_problem,
    model_settings,
    network_spec,
    pool_mode_of,
    trains_classifier,
    unknown_key,
)
from swwae.training.callback_settings import check_callbacks, check_knn_monitor, check_projector, own_callback
from swwae.training.composing import check_mode
from swwae.training.registry import DATA_MODULES, DATASETS, MODEL_MODULES, MODELS, shipped
from swwae.training.run_settings import PathSettings, RunSettings
from swwae.training.runs.identity import check_run_name
from swwae.training.trainer_settings import TrainerSpec, check_devices

# loggers and callbacks are instantiated as written (their classes check them; swwae's own
# callbacks are resolved and checked here too); their interpolations may need resolvers of
# modules that import Lightning
AS_WRITTEN = ("logger", "callbacks")

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

    @model_validator(mode="after")
    def _names_its_class(self):
        if not self.target:  # e.g. ~data: nothing would be built
            raise ConfigError("a model or data section names no class (_target_): choose one, e.g. data=mnist_sample")
        return self


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


class RunSpec(RunSettings):
    """A run's settings: the run itself (``RunSettings``, its name and monitor), then a section for
    each part of the job. A top-level key that is none of them is the user's own (``own_key_typo``)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    run_name: StrictStr
    optimized_metric: StrictStr | None = None
    optimized_mode: Literal["min", "max"] | None = None  # the checkpoint monitor's
    trainer: TrainerSpec
    data: Frozen  # a data set's section (data_spec) or OwnClass
    model: Frozen  # model_spec() or OwnClass
    logger: dict[str, Any] | None = None
    callbacks: dict[str, Any] | None = None
    paths: PathSettings = PathSettings()

    @model_validator(mode="before")
    @classmethod
    def _own_keys(cls, values):
        if isinstance(values, Mapping):
            for key in values:
                if typo := own_key_typo(str(key)):
                    raise ConfigError(typo)
        return values

    @field_validator("logger", "callbacks", mode="before")
    @classmethod
    def _classes(cls, value, info: ValidationInfo):
        """Each node names the class it builds, or is switched off (null); on the command line, a
        callback of ours by its settings (a stored config's are never built)."""
        for name, node in value.items() if isinstance(value, Mapping) else ():
            if node is not None and not (isinstance(node, Mapping) and node.get("_target_")):
                key = f"{info.field_name}.{name}"
                raise ConfigError(f"{key} names no class (_target_): give it one, or switch it off with {key}=null")
        if info.field_name == "callbacks" and isinstance(value, Mapping) and stored(info) is None:
            check_callbacks(value)
        return value

    @field_validator("run_name", mode="before")
    @classmethod
    def _name(cls, value):
        return check_run_name(value)

    @field_validator("optimized_mode", mode="before")
    @classmethod
    def _mode(cls, value):
        return value if value is None else check_mode(value)

    @model_validator(mode="after")
    def _monitor_direction(self, info: ValidationInfo):
        if self.optimized_metric is not None and self.optimized_mode is not None and stored(info) is None:
            check_mode(self.optimized_mode, self.optimized_metric)
        return self

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
            if stored(info) is None:
                shipped_data.check_files(data)  # a folder of images: scanned, bounded, before anything is written
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
        classes = num_classes if trains_classifier(values) else None
        arch = network_spec(m.arch, list(m.widths), m.kernel_size, m.pool_size, classes)
        check_fits(arch, image_shape, m.pool_stride, m.pool_padding, ceil=pool_mode_of(m.pool_mode).ceil)
        check_training(loss_weights(values), arch=m.arch)
        return self


# parsing

TYPO_CUTOFF = 0.8  # a top-level key this like a setting's name is taken for a typo of it (seeds, verbos)


def own_key_typo(key: str) -> str | None:
    """Why a top-level key cannot be the user's own, or None when it can. A key that is no
    setting is the user's (``tags: [dev]`` in a preset of theirs, for their own interpolations
    and records: kept in the run's config, unused by swwae; docs/configs.md), unless it is so
    like a setting's name that it reads as a typo of it: 'seeds is not a setting; did you mean
    seed?'."""
    known = names_of(RunSpec)
    if key in known or not difflib.get_close_matches(key, known, n=1, cutoff=TYPO_CUTOFF):
        return None
    return unknown_key(key, known)


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
    spec = {"trainer": TrainerSpec, "paths": PathSettings, "": RunSpec}.get(section)
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
        cfg = {key: plain_section(cfg, key) for key in cfg}
    if not isinstance(cfg, Mapping):
        raise ConfigError(f"a run config must be a mapping of settings, got {type(cfg).__name__}")
    try:
        spec = RunSpec.model_validate(dict(cfg), context={"source": None})
    except ValidationError as err:
        raise first_problem(err, "", names_of(RunSpec)) from None
    check_extras(spec.logger)  # the command's trackers only: a stored config's may be gone where it is read
    check_projector(spec.callbacks, spec.logger)
    check_knn_monitor(spec.optimized_metric, spec.callbacks, spec.trainer.check_val_every_n_epoch)
    return spec


def plain_section(cfg, key: str):
    """Section ``key`` of a DictConfig as plain values, resolved but for ``AS_WRITTEN``; there only
    swwae's own callbacks are resolved, for their check."""
    from omegaconf import OmegaConf

    if not OmegaConf.is_config(cfg._get_node(key)):
        return cfg[key]
    plain = OmegaConf.to_container(cfg[key], resolve=key not in AS_WRITTEN)
    if key == "callbacks":
        for name, node in plain.items():
            if isinstance(node, Mapping) and own_callback(node.get("_target_")):
                plain[name] = OmegaConf.to_container(cfg[key][name], resolve=True)
    return plain


# logger class -> (the package it needs, the extra of pyproject.toml that installs it)
EXTRAS = {"MLFlowLogger": ("mlflow", "mlflow"), "WandbLogger": ("wandb", "wandb")}


def check_extras(loggers: Mapping | None) -> None:
    """ConfigError (one line, before any training) for each logger of the config's ``logger``
    section whose package is missing: ``logger=mlflow needs mlflow: pip install -e ".[mlflow]"`` (in a
    clone; ``swwae.install`` words it for the install)."""
    for key, node in (loggers or {}).items():
        target = str(node.get("_target_", "")) if isinstance(node, Mapping) else ""
        needs = EXTRAS.get(target.rsplit(".", 1)[-1])
        if needs is None:
            continue
        package, extra = needs
        if not importable(package):
            raise ConfigError(f"logger={key} needs {package}: {install_extra(extra)}")


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
