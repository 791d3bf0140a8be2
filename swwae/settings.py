"""Every model and data setting, declared once: its name, type, default, range and one line of
help. Plain Python (pydantic): the job checks a run's settings before torch is imported, so bad
input answers in a second; the classes (``SWWAE``, ``SWWAEModule``, the data modules) take their
defaults from here, and Hydra's config nodes are filled from here (``swwae.training.composing``),
so a preset holds only what it changes. ``docs/configs.md``'s tables are generated from it
(``scripts/settings_table.py``).

The model's settings are the network's (``NetworkSettings``), the training's
(``TrainingSettings``), the settings of every pooling mode (declared in its entry of
``swwae.pooling.modes``) and the weight of every loss term (``swwae.loss_terms``): a mode or a term
registered from outside adds its settings to ``model_settings()``; a run stores and is known by
those of the parts it uses only (``own_settings``). A data set's settings are its
entry's ``settings`` class (``swwae.datasets``), a subclass of ``DataSettings``.

Types are strict (``2.5`` is no int, ``"3"`` no number) and unknown keys are errors, named with
the nearest setting; what a value means across settings (the network fits the images, the
labelled share of a batch) is checked by the functions below, the same ones the classes run.
"""

from __future__ import annotations

import difflib
import functools
import math
import numbers
import os
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    PlainValidator,
    StrictBool,
    StrictStr,
    ValidationError,
    create_model,
)

from swwae.arch import Arch, shorthand
from swwae.arch import parse as parse_arch
from swwae.errors import ConfigError, excerpt
from swwae.loss_terms import TERMS, loss_weights, weight_of
from swwae.pooling.modes import POOL_MODES, PoolMode, Setting

# the nonlinearities: config name -> the torch.nn layer (swwae.model builds it)
NONLINEARITIES = {"relu": "ReLU", "leaky_relu": "LeakyReLU", "elu": "ELU", "gelu": "GELU", "tanh": "Tanh"}
SCHEDULERS = ("cosine", "none")
LABELLED_SHARE = 4  # without data.labelled_per_batch: a quarter of every batch is labelled

# types


def whole(value) -> bool:
    """An int, and not a bool (which Python counts as one)."""
    return isinstance(value, int) and not isinstance(value, bool)


def finite(value):
    """A finite number, kept as written (an int stays an int: ``got -1``, as the user typed)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value
    raise ValueError("must be a finite number")


def finite_number(gt=None, ge=None, lt=None, le=None):
    """The type of a finite number (ints welcome, kept as written) within bounds."""
    bounds = ((">", gt), (">=", ge), ("<", lt), ("<=", le))
    said = " and ".join(f"{word} {bound:g}" for word, bound in bounds if bound is not None)

    def check(value):
        value = finite(value)
        low = (gt is not None and not value > gt) or (ge is not None and not value >= ge)
        high = (lt is not None and not value < lt) or (le is not None and not value <= le)
        if low or high:
            raise ValueError(f"must be {said}")
        return value

    return Annotated[Any, AfterValidator(check)]


NAME_MAX = 255  # bytes in one folder or file name (ext4, APFS, NTFS, ...)
PATH_MAX = 4096  # bytes in a whole path (Linux)


def path_text(value: str) -> str:
    """A path the job will create or read, short enough for the file system: a longer one would
    pass every check and fail at its first write, "File name too long", after the run's output
    folder was made."""
    encoded = os.fsencode(value)
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if len(encoded) >= PATH_MAX or longest > NAME_MAX:
        raise ValueError(
            f"too long for a path ({len(encoded)} bytes, its longest name {longest}; "
            f"at most {PATH_MAX - 1} and {NAME_MAX})"
        )
    return value


def true_false_or_auto(value):
    """A boolean, or ``auto`` (the job decides, e.g. ``channels_last`` by the device)."""
    if isinstance(value, bool) or value == "auto":
        return value
    raise ValueError("write true, false or auto")


PathText = Annotated[StrictStr, AfterValidator(path_text)]
Int = Annotated[int, Field(strict=True)]
TrueFalseOrAuto = Annotated[bool | Literal["auto"], PlainValidator(true_false_or_auto)]
Number = finite_number()


def number(default: float, help: str) -> Any:
    return Field(default, description=help)


class Settings(BaseModel):
    """Typed and frozen: unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    @classmethod
    def help(cls) -> dict[str, str]:
        return {name: field.description or "" for name, field in cls.model_fields.items()}


def bounded(kind: type, **bounds):
    return Annotated[kind, Field(strict=True, **bounds)]


def unknown_key(key: str, known) -> str:
    """'x.y is not a setting; did you mean x.z?' (difflib), or the settings there are."""
    section, _, name = key.rpartition(".")
    prefix = f"{section}." if section else ""
    near = difflib.get_close_matches(name, [str(k) for k in known], n=1, cutoff=0.6)
    if near:
        return f"{excerpt(key)} is not a setting; did you mean {prefix}{near[0]}?"
    shown = ", ".join(sorted(map(str, known)))
    return f"{excerpt(key)} is not a setting{f' of {section}' if section else ''}; the settings are: {shown}"


WORDS_AS_SIGNS = (
    ("greater than or equal to", ">="),
    ("less than or equal to", "<="),
    ("greater than", ">"),
    ("less than", "<"),
)


def first_problem(err: ValidationError, section: str = "", known=()) -> Exception:
    """The first problem of a validation, as the one line a user reads (a ``UserError`` that a
    check raised inside it, as it is: an ArchError keeps its caret)."""
    from swwae.errors import UserError

    first = err.errors(include_url=False)[0]
    cause = (first.get("ctx") or {}).get("error")
    if isinstance(cause, UserError):
        return cause
    loc = [str(p) for p in first["loc"] if not str(p).startswith("function-")]
    key = ".".join([section, *loc] if section else loc)
    if first["type"] == "extra_forbidden":
        return ConfigError(unknown_key(key, known))
    if first["type"] == "missing":
        return ConfigError(f"{key} is missing: the config must set it")
    message = first["msg"].replace("Input should be", "must be").replace("Value error, ", "")
    for words, sign in WORDS_AS_SIGNS:
        message = message.replace(words, sign)
    return ConfigError(f"{key}={excerpt(repr(first['input']))} is not allowed: {message}")


def parse(schema: type[Settings], values: Mapping, section: str) -> Settings:
    """``values`` by ``schema``, or ConfigError: its first problem in one line, keys named as
    ``<section>.<key>``."""
    try:
        return schema.model_validate(dict(values))
    except ValidationError as err:
        raise first_problem(err, section, schema.model_fields) from None


# the model


class NetworkSettings(Settings):
    """The network (``swwae.model.SWWAE``): its layers, written out or as the shorthand, and its pooling."""

    arch: StrictStr | None = Field(
        None, description='the paper\'s notation, e.g. "(64)5c-2p-(64)3c-2p-10fc"; wins over the shorthand below'
    )
    widths: tuple[bounded(int, ge=1), ...] = Field((32, 64), description="channels of the encoder stages (shorthand)")
    kernel_size: bounded(int, ge=1) = Field(3, description="conv kernel, odd: same-size convolutions (shorthand)")
    pool_size: bounded(int, ge=1) = Field(2, description="PxP pooling closing each stage, stride P (shorthand)")
    nonlinearity: Literal[tuple(NONLINEARITIES)] = Field("relu", description="after every conv but the image's")
    batch_norm: StrictBool = Field(False, description="batch norm after every conv but the image's")
    dropout: finite_number(ge=0, lt=1) = number(0.0, "2-d dropout after every encoder conv")
    pool_mode: StrictStr = Field("hard", description="the pooling: a mode of swwae.pooling.modes")
    pool_stride: bounded(int, ge=1) | None = Field(None, description="null: equal to the pool size (every pool)")
    pool_padding: bounded(int, ge=0) = Field(0, description="zero padding of every pool")
    classifier_dropout: finite_number(ge=0, lt=1) = number(0.0, "dropout before the classifier head")


class TrainingSettings(Settings):
    """How the network trains (``swwae.training.module.SWWAEModule``), besides the loss weights."""

    input_noise: finite_number(ge=0) = number(0.0, "std of Gaussian noise on training inputs; the targets stay clean")
    nll_warmup_epochs: finite_number(ge=0) = number(0.0, "ramp lambda_nll up from 0 over this many epochs")
    clean_middle_targets: StrictBool = Field(
        False, description="middle reconstructions aim at the clean image's features (no noise, no dropout)"
    )
    lr: finite_number(gt=0) = number(2e-3, "Adam's learning rate")
    weight_decay: finite_number(ge=0) = number(0.0, "Adam's weight decay")
    scheduler: Literal[SCHEDULERS] = Field("cosine", description="cosine: annealed to 0 over max_epochs; none")


def pool_field(setting: Setting) -> tuple[Any, Any]:
    """A pooling mode's declared setting as a pydantic field: the type of its default."""
    default = setting.default
    if setting.choices is not None:
        kind = Literal[tuple(setting.choices)]
    elif isinstance(default, bool):
        kind = StrictBool
    elif isinstance(default, int):
        kind = Int
    elif isinstance(default, float):
        kind = Number
    elif isinstance(default, str):
        kind = StrictStr
    else:
        kind = Any
    if kind is Number:
        kind = finite_number(gt=setting.gt, ge=setting.ge, le=setting.le)
        return kind, Field(default, description=setting.help)
    bounds = {k: v for k, v in (("gt", setting.gt), ("ge", setting.ge), ("le", setting.le)) if v is not None}
    return kind, Field(default, description=setting.help, **bounds)


def pool_settings() -> dict[str, Setting]:
    """Every pooling mode's settings by name (a name two modes share is one setting)."""
    return {name: s for mode in POOL_MODES.values() for name, s in mode.settings.items()}


def check_model_names() -> None:
    """Every mode's setting and every term's weight is a key of its own in the model section:
    one named as a network or training setting (``lr``), as a term's weight, or as another mode's
    setting declared otherwise would replace that setting's type, default and bounds for every
    run, silently. ConfigError (one line) naming the registered part and whose the name is."""
    fixed = {**NetworkSettings.model_fields, **TrainingSettings.model_fields}
    owners: dict[str, tuple[str, Setting | None]] = {name: (f.description, None) for name, f in fixed.items()}
    claims = [
        (
            mode.name in POOL_MODES.shipped,
            f"pooling mode {mode.name!r}: its setting",
            name,
            setting,
            f"the setting of pooling mode {mode.name}",
        )
        for mode in POOL_MODES.values()
        for name, setting in mode.settings.items()
    ]
    claims += [
        (t.weight in TERMS.shipped, f"loss term {t.weight!r}: its weight", t.weight, None, "a loss term's weight")
        for t in TERMS.values()
    ]
    for _, part, name, setting, whose in sorted(claims, key=lambda claim: not claim[0]):  # shipped ones first
        owner, declared = owners.setdefault(name, (whose, setting))
        if owner != whose and (setting is None or declared != setting):
            raise ConfigError(f"{part} {name} is already model.{name} ({owner}): give it a name of its own")


def check_registered_terms() -> None:
    """A loss term registered from outside weighs 0 by default: off unless a run weighs it. One
    on by default would change what every run trains merely because its plugin is loaded, and a
    run stored before would count as trained with it (a setting a run predates counts as its
    default). ConfigError (one line) naming the term."""
    for name, term in TERMS.items():
        if name not in TERMS.shipped and term.default != 0:
            raise ConfigError(
                f"loss term {name!r}: its default weight is {term.default!r}, not 0: a term of one's own is off "
                f"unless a run weighs it (model.{name}=..., or {name}: in a preset), so that loading its plugin "
                "changes no other run"
            )


def own_settings(values: Mapping) -> dict:
    """A flat model config as a run stores it and is known by (its checkpoints' config and
    hyperparameters, its identity: ``swwae.training.runs``): the settings that made its weights.
    Those of the pooling mode it uses and of no other mode (not a hard run's ``beta``), and the
    weight of a term registered from outside only where the run weighs it (off its default, 0:
    ``check_registered_terms``); every other key as it is. So a run that uses none of a lab's parts
    holds none of them: it reads back without the lab's plugin, and loading the plugin leaves its
    identity as it was. A mode not registered here keeps every setting (its readers then name the
    plugin to load)."""
    mode = values.get("pool_mode", NetworkSettings.model_fields["pool_mode"].default)
    entry = POOL_MODES.get(mode) if isinstance(mode, str) else None
    dropped = set() if entry is None else set(pool_settings()) - set(entry.settings)
    dropped |= {
        name for name, t in TERMS.items() if name not in TERMS.shipped and values.get(name, t.default) == t.default
    }
    return {key: value for key, value in values.items() if key not in dropped}


def weight_field(term) -> tuple[Any, Any]:
    return finite_number(ge=0), number(term.default, f"weight of the {term.description}")


@functools.lru_cache(maxsize=8)
def _model_settings(tables: tuple) -> type[Settings]:
    check_model_names()
    check_registered_terms()
    fields = {name: pool_field(s) for name, s in pool_settings().items()}
    fields |= {t.weight: weight_field(t) for t in TERMS.values()}
    return create_model("ModelSettings", __base__=(TrainingSettings, NetworkSettings), **fields)


def model_settings() -> type[Settings]:
    """The model section's schema: the network, the training, every registered pooling mode's
    settings and every loss term's weight (rebuilt when a mode or a term is registered)."""
    return _model_settings(tuple((name, id(entry)) for table in (POOL_MODES, TERMS) for name, entry in table.items()))


def network_keys() -> tuple[str, ...]:
    """The model settings that make the network (``SWWAE``'s keywords)."""
    return (*NetworkSettings.model_fields, *pool_settings())


def pool_mode_of(name: object, setting: str = "model.pool_mode") -> PoolMode:
    """The mode table's entry of ``name``, or ConfigError (one line) naming the choices."""
    try:
        return POOL_MODES.entry(name, setting)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def trains_classifier(settings: Mapping) -> bool:
    """Whether a flat model config trains a classifier head: ``lambda_nll > 0`` and, when the
    network is written out (``arch``), an ``Nfc`` token in it. The one place this is decided:
    the network gets a head by it, the checkpoint monitor picks ``val/acc`` by it."""
    if not weight_of(settings, "lambda_nll") > 0:
        return False
    return settings.get("arch") is None or parse_arch(settings["arch"]).classes is not None


def check_network(kernel_size, pool_mode, nonlinearity, dropout, image_shape) -> None:
    """The network's settings that the schema's types do not say (a class built directly)."""
    if not isinstance(kernel_size, int) or kernel_size < 1 or kernel_size % 2 == 0:
        raise ConfigError(f"model.kernel_size must be a positive odd int (same-size convs), got {kernel_size}")
    pool_mode_of(pool_mode)
    if nonlinearity not in NONLINEARITIES:
        raise ConfigError(f"model.nonlinearity={nonlinearity!r} is unknown; choose one of {', '.join(NONLINEARITIES)}")
    if not 0 <= dropout < 1:
        raise ConfigError(f"model.dropout must be in [0, 1), got {dropout}")
    if len(image_shape) != 3 or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in image_shape):
        raise ConfigError(f"image_shape must be (channels, height, width), positive ints, got {image_shape}")


def check_pool_settings(mode: PoolMode, values: Mapping) -> dict:
    """A mode's settings (given ones, defaults for the rest), each of its declared type and
    bounds, by the same fields as the model section's (``pool_field``)."""
    fields = {name: pool_field(setting) for name, setting in mode.settings.items()}
    schema = create_model(f"{mode.name}_settings", __base__=Settings, **fields)
    return parse(schema, mode.values(values), "model").model_dump()


def network_spec(arch, widths, kernel_size, pool_size, num_classes) -> Arch:
    """The network's layers: ``arch`` in the paper's notation, or the widths shorthand."""
    if arch is None:
        widths = list(widths or [])
        if not widths or any(not isinstance(w, int) or isinstance(w, bool) or w < 1 for w in widths):
            raise ConfigError(f"model.widths must be a non-empty list of positive ints, got {widths}")
        if not isinstance(pool_size, int) or isinstance(pool_size, bool) or pool_size < 1:
            raise ConfigError(f"model.pool_size must be a positive int (PxP pools), got {pool_size}")
        return parse_arch(shorthand(widths, kernel_size, pool_size, num_classes))
    spec = parse_arch(arch)
    if spec.classes and num_classes and spec.classes != num_classes:
        raise ConfigError(
            f'model.arch="{excerpt(arch)}" ends with a classifier over {spec.classes} classes, but the '
            f"data have {num_classes}: write {num_classes}fc"
        )
    return spec


def check_training(weights: Mapping, *, arch) -> None:
    """The loss weights together (by name: every weight of ``swwae.loss_terms``, defaults where
    ``weights`` has none): not all 0, and a classifier written out is one that trains."""
    weights = loss_weights(weights)
    if min(weights.values()) < 0 or sum(weights.values()) == 0:
        *first, last = weights
        raise ConfigError(f"model.{', '.join(first)} and {last} must be >= 0 and not all 0")
    if arch is not None and parse_arch(arch).classes and weights.get("lambda_nll", 0) == 0:
        raise ConfigError(
            f'model.arch="{excerpt(arch)}" ends with a classifier that model.lambda_nll=0 never trains: '
            f"drop its fc token, or set model.lambda_nll > 0"
        )


# the data

SPLIT_NAMES = ("train", "val", "test")  # a data set's splits, as the data modules hold them


class DataSettings(Settings):
    """What every data set takes (``swwae.training.data.base.InMemoryDataModule``)."""

    batch_size: bounded(int, ge=1) = Field(128, description="images a training step")
    num_labels: bounded(int, ge=1) | None = Field(
        None, description="a class-balanced labelled subset, e.g. 100, 600, 1000, 3000; null: all labelled"
    )
    labelled_per_batch: bounded(int, ge=1) | None = Field(
        None, description="with hidden labels: labelled samples in every batch (null: a quarter of it)"
    )
    num_unlabelled: bounded(int, ge=1) | None = Field(
        None, description="with hidden labels: keep this many label-hidden training images (null: all)"
    )
    seed: bounded(int, ge=0) = Field(0, description="label subset, shuffling and augmentation (the run's seed)")
    split_seed: bounded(int, ge=0) = Field(
        0, description="train/val/test split: fixed, so every seed tests on the same images"
    )
    num_workers: bounded(int, ge=0) = Field(0, description="loader processes: tensors live in memory, rarely needed")
    on_device: TrueFalseOrAuto = Field(
        "auto",
        description="the images kept on the training device, batches gathered there (auto: on a CUDA device, "
        "when they take at most a quarter of its memory)",
    )
    augment: StrictBool = Field(
        False, description="random crops (and flips where the classes allow) of training batches"
    )


def check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ConfigError(f"data.{name}={value!r} must be an integer >= {minimum}")
    return int(value)


def choose_labelled_per_batch(k: int | None, batch_size: int, labels: int, what: str) -> int:
    """``data.labelled_per_batch`` (its default: a quarter of the batch, at most ``labels``),
    or a one-line error when it cannot work (a batch of one has no room for its default: the
    batch size is the setting to change, not the one the user never set)."""
    if k is None and batch_size < 2:
        raise ConfigError(
            f"data.batch_size={batch_size} leaves no room for unlabelled samples beside the labelled one "
            f"that every batch holds where labels are hidden ({what}): make it 2 or more"
        )
    if k is None:
        return max(1, min(batch_size // LABELLED_SHARE, labels))
    if k >= batch_size:
        raise ConfigError(
            f"data.labelled_per_batch={k} leaves no room for unlabelled samples "
            f"in batches of data.batch_size={batch_size}: make it smaller than the batch"
        )
    if k > labels:
        raise ConfigError(f"data.labelled_per_batch={k} is more than the {what}: a batch would repeat labels")
    return k


def check_data(name: str, num_classes: int | None, settings: DataSettings) -> dict:
    """The shared data settings together: labels for every class, and ``labelled_per_batch``
    decided when some labels are hidden. Returns the settings with it filled in."""
    values = settings.model_dump()
    if values["on_device"] is True and values["num_workers"]:
        raise ConfigError(
            f"data.on_device=true gathers batches on the device, in the training process: "
            f"data.num_workers={values['num_workers']} loader processes cannot; set one of them off"
        )
    labels = values["num_labels"]
    if labels is not None and num_classes and labels < num_classes:
        raise ConfigError(
            f"data.num_labels={labels} is fewer than the {num_classes} classes of "
            f"{name}: every class needs at least one labelled sample"
        )
    k = values["labelled_per_batch"]
    if labels is not None:
        k = choose_labelled_per_batch(k, values["batch_size"], labels, f"data.num_labels={labels} labelled samples")
    return values | {"labelled_per_batch": k}
