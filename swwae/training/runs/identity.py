"""A run's identity: every setting that decides what the run reports, and nothing else.

Two configs with the same identity train the same network the same way, as far, and measure it
the same way: the same command (or a requeued job) finds its own run and continues or reports
it. Two configs whose identities differ are different runs and never share a checkpoint folder:
a command asking for 1 epoch never reports a 20-epoch run as its own, and a run is never
extended past the length it was started with (its learning-rate schedule spans that length);
the refusal says how to start over.

In: the model (the settings that made its weights: ``swwae.settings.own_settings``, which
``folder.identity_of`` applies) and the data (where the data live and how they are read excepted:
``root``, ``download``, ``num_workers``, ``on_device``, a folder scan's bounds), the seed, the
trainer settings that change the updates, the length, the batches measured or the number of
processes (``TRAINER``) and the monitor that picks ``best.ckpt``. Out: loggers, callbacks, paths, the
accelerator and strategy, ``compile``, ``channels_last``, ``test``: how and where a run is
computed and shown, not what it reports.

Plain Python over plain dicts (``swwae.stored.plain``: tuples as lists): the job passes its
resolved config, a checkpoint its stored one. A setting that one side predates (added to the
project since) counts as its default.

A run's name is a name: one path component, so that ``checkpoints/<run name>/`` is a folder
inside ``checkpoints/`` and nowhere else (``check_run_name``, checked before anything is
written; ``${swwae.arch_tag:}``, registered on import, names a network written out, and
``${swwae.labels_tag:}`` the labels of a semi-supervised run).
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Mapping
from pathlib import Path, PurePath

from swwae.errors import ConfigError
from swwae.stored import plain

# the trainer settings that decide what a run reports, with Lightning's defaults: the updates,
# the length, the batches trained and measured, when it validates (which picks best.ckpt), and
# the processes (each takes its own share of every batch)
TRAINER = {
    "gradient_clip_val": None,
    "gradient_clip_algorithm": None,
    "accumulate_grad_batches": 1,
    "precision": "32-true",
    "deterministic": False,
    "max_epochs": None,
    "max_steps": -1,
    "max_time": None,
    "min_epochs": None,
    "min_steps": None,
    "limit_train_batches": None,
    "limit_val_batches": None,
    "limit_test_batches": None,
    "overfit_batches": 0.0,
    "val_check_interval": None,
    "check_val_every_n_epoch": 1,
    "devices": "auto",
    "num_nodes": 1,
}
ALL_BATCHES = ("limit_train_batches", "limit_val_batches", "limit_test_batches", "val_check_interval")
# where the files are, how they are read (and the bounds of the scan of a folder of images)
FREE_DATA_KEYS = ("root", "download", "num_workers", "on_device", "max_entries", "max_folders", "max_depth")
PRECISION_NAMES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true"}
IDENTITY_KEY = "swwae_run_identity"  # in every checkpoint: {"identity": {...}, "digest": "..."}

# helpers


def trainer_setting(key: str, value):
    if key == "precision" and value is not None:
        return PRECISION_NAMES.get(str(value), str(value))
    if key in ALL_BATCHES and isinstance(value, float) and value == 1.0:  # every batch, as None says
        return None
    if key == "overfit_batches" and value in (0, 0.0):
        return 0.0
    return value


def section(values: Mapping | None, defaults: Mapping, free=()) -> dict:
    values = dict(values or {})
    return plain({k: v for k, v in (dict(defaults) | values).items() if k not in free})


# the identity


def run_identity(
    model: Mapping | None,
    data: Mapping | None,
    trainer: Mapping | None,
    seed: int | None,
    optimized_metric: str | None,
    optimized_mode: str | None,
    callbacks: Mapping | None = None,
    *,
    defaults: Mapping[str, Mapping] | None = None,
    target_names=None,
) -> dict:
    """The identity of a run of these resolved sections and values. ``defaults`` (``{"model":
    {...}, "data": {...}}``) fill the settings a section does not name; ``target_names(section,
    target)`` gives a class's registry name, so that a class stored under an old module path is
    the same class. ``callbacks``: the run's, read only for a monitor a callback measures
    (``monitor_measure``)."""
    defaults = defaults or {}
    identity = {}
    for name, given in (("model", model), ("data", data)):
        values = dict(given or {})
        target = values.pop("_target_", None)
        values["class"] = target_names(name, target) if target_names and target else target
        identity[name] = section(values, defaults.get(name, {}), FREE_DATA_KEYS if name == "data" else ())
    trainer = dict(trainer or {})
    identity["trainer"] = {k: trainer_setting(k, trainer.get(k, default)) for k, default in TRAINER.items()}
    identity["seed"] = seed
    identity["monitor"] = {"metric": optimized_metric, "mode": optimized_mode}
    identity["monitor"] |= monitor_measure(optimized_metric, callbacks)
    return identity


def monitor_measure(metric: str | None, callbacks: Mapping | None) -> dict:
    """What measures a monitor that a callback logs: for ``val/knn_acc`` the k-NN monitor's
    ``k`` and ``max_train_images`` (another vote picks another best.ckpt), under
    ``callbacks.knn_accuracy``; nothing for the model's own metrics, so that their runs' identities
    stay what they were."""
    from swwae.training.callback_settings import CALLBACKS, KNN_METRIC, callback_nodes

    if metric != KNN_METRIC:
        return {}
    knn = CALLBACKS["knn_accuracy"]
    nodes = callback_nodes(callbacks, knn.name)
    values = dict(nodes[0][1]) if nodes else {}
    defaults = knn.settings()
    return {
        f"callbacks.{knn.name}": {key: values.get(key, getattr(defaults, key)) for key in ("k", "max_train_images")}
    }


def digest(identity: Mapping) -> str:
    """A short fingerprint of an identity (16 hex digits of its SHA-256), for names and files."""
    text = json.dumps(plain(identity), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def differences(saved: Mapping, current: Mapping, prefix: str = "") -> list[str]:
    """``key: <saved> -> <current>`` for every setting that differs, nested keys dotted
    (``model.lr: 0.002 -> 0.001``), the monitor and the seed as themselves. Where the pooling mode
    differs, the settings of one mode alone (a soft run's ``beta``) go with it unsaid."""
    from swwae.settings import pool_settings

    lines = []
    other_mode = "pool_mode" in saved and "pool_mode" in current and saved["pool_mode"] != current["pool_mode"]
    for key in sorted(set(saved) | set(current)):
        if other_mode and (key in saved) != (key in current) and key in pool_settings():
            continue
        a, b = saved.get(key, "<unset>"), current.get(key, "<unset>")
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            lines += differences(a, b, "" if name == "monitor" else f"{name}.")
        elif a != b:
            shown = {"metric": "optimized_metric", "mode": "optimized_mode"}.get(name, name)
            lines.append(f"{shown}: {a} -> {b}")
    return lines


# the run's name
NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", re.ASCII)
RESERVED = {"quick": "debug=quick's runs have their own root, checkpoints/quick/"}
MAX_LENGTH = 200  # with ".previous-<time>" and ".owner.json" added, within a file system's 255 bytes
ASIDE_STAMP = "%Y%m%d-%H%M%S"  # the <time> of a moved-aside run's name
MOVED_ASIDE = re.compile(r"\.previous-(?P<stamp>\d{8}-\d{6})(?:-(?P<number>\d+))?$")  # the names aside_name gives


def arch_tag(arch) -> str:
    """The default run name's part for ``model.arch``: nothing without one, else the network as
    a name (``(16)5c-(32)3c-2p`` -> ``_16x5c-32x3c-2p``), so that a network written out gets a
    folder of its own instead of meeting the shorthand's run in one (configs/train.yaml)."""
    if arch is None or str(arch) in ("", "None"):
        return ""
    text = re.sub(r"\(([0-9]+)\)", r"\1x", str(arch))
    return "_" + re.sub(r"[^A-Za-z0-9._-]", "", text)


NAMED = {"model", "data", "seed", "model.arch"}  # the default run name says these already
SWEPT_MAX = 100  # characters of the swept part; longer: cut, with a digest of the whole
UNSAFE = re.compile(r"[^A-Za-z0-9._-]+", re.ASCII)


def in_identity(key: str) -> bool:
    """Whether an override's key sets a setting of the run's identity (``run_identity``)."""
    section, _, name = key.partition(".")
    if section == "model":
        return bool(name)
    if section == "data":
        return bool(name) and name not in FREE_DATA_KEYS
    if section == "trainer":
        return name in TRAINER
    return key in ("seed", "optimized_metric", "optimized_mode")


def name_of_value(value: str) -> str:
    """A swept value as part of a run name: ``[8, 16]`` -> ``8-16``; a leading minus kept, so
    that ``-m trainer.max_steps=-1,1`` are two runs (``max_steps-1``, ``max_steps1``), not one."""
    return ("-" if value.startswith("-") else "") + UNSAFE.sub("-", value).strip("-")


def swept_values(mode, overrides, unnamed=()) -> dict[str, str]:
    """The settings of the run's identity that a job of a multirun sets beyond what the name says
    already (model, data, arch, seed), by key, each value made a name (``name_of_value``): what
    ``sweep_tag`` names. Nothing in a single run, or for a setting outside the identity (a logger).
    ``mode``, ``overrides``, ``unnamed``: as ``sweep_tag`` takes them."""
    if getattr(mode, "name", mode) != "MULTIRUN":
        return {}
    skipped = NAMED | {str(key) for key in unnamed or ()}
    values = {}
    for override in overrides or ():
        key, sep, value = str(override).partition("=")
        key = key.lstrip("+")
        if sep and not key.startswith("~") and key not in skipped and in_identity(key):
            values[key] = name_of_value(value.strip("'\""))
    return values


def sweep_tag(mode, overrides, unnamed=()) -> str:
    """The default run name's part for a job of a multirun (``mode``: Hydra's; ``overrides``: the
    job's own, ``key=value`` each; ``unnamed``: the keys that do not name it, Hydra's
    ``hydra.job.config.override_dirname.exclude_keys``, which the sweep sets to the keys it does
    not sweep): ``_<setting><value>`` for each setting of the run's identity that it sets beyond
    what the name says already (model, data, arch, seed; ``swept_values``), sorted by key.
    ``-m model.lr=1e-3,1e-4`` runs ``..._lr0.001_seed0`` and ``..._lr0.0001_seed0`` (Hydra writes
    a swept number out), one run folder each. Nothing in a single run (its name stays what it
    was) or for a setting outside the identity (a logger)."""
    values = swept_values(mode, overrides, unnamed)
    tag = "".join(f"_{key.rpartition('.')[2]}{values[key]}" for key in sorted(values))
    if len(tag) > SWEPT_MAX:
        tag = f"{tag[: SWEPT_MAX - 17]}_{hashlib.sha256(tag.encode()).hexdigest()[:16]}"
    return tag


def labels_tag(num_labels, mode=None, overrides=(), unnamed=()) -> str:
    """The default run name's part for ``data.num_labels``: nothing for a fully supervised run
    (``None``), else ``_labels<N>`` (``data.num_labels=100``: ``swwae_hard_mnist_sample_labels100_seed0``,
    the form of the semi-supervised presets' names), so that a semi-supervised run and the fully
    supervised run of the same model, data and seed never meet in one folder or one TensorBoard
    run. Where a sweep sweeps ``data.num_labels``, its swept part names it already
    (``_num_labels100``, ``sweep_tag``): nothing here. ``mode``, ``overrides``, ``unnamed``: as
    ``sweep_tag`` takes them."""
    if num_labels is None or str(num_labels) in ("", "None"):
        return ""
    if "data.num_labels" in swept_values(mode, overrides, unnamed):
        return ""
    return f"_labels{name_of_value(str(num_labels))}"


LABELS_TAG = "${swwae.labels_tag:"  # how the default run name (configs/train.yaml) calls labels_tag


def without_labels_tag(template: str) -> str | None:
    """A run name's template (unresolved) without its ``${swwae.labels_tag:...}`` part: the default
    run name as it was before it said the number of labels (swwae 0.3.0 and earlier); None for a
    template without one (a name the user or a preset gives)."""
    start = template.find(LABELS_TAG)
    if start < 0:
        return None
    depth = 0
    for end in range(start, len(template)):
        depth += {"{": 1, "}": -1}.get(template[end], 0)
        if depth == 0 and template[end] == "}":
            return template[:start] + template[end + 1 :]
    return None


def aside_stamp() -> str:
    """The current local time as a moved-aside name's <time> (``20260101-120000``)."""
    return time.strftime(ASIDE_STAMP)


def aside_name(name: str, stamp: str, number: int = 1) -> str:
    """The folder name of run ``name`` moved aside at ``stamp`` (``aside_stamp()``) by a fresh
    start (``RunFolder.move_aside``; ``swwae runs`` recognises them); ``number`` > 1 for another
    one moved aside in the same second."""
    return f"{name}.previous-{stamp}" + (f"-{number}" if number > 1 else "")


def is_moved_aside(folder: str | PurePath) -> bool:
    """Whether a folder (its path or its name) is an old run moved aside (``aside_name``)."""
    return bool(MOVED_ASIDE.search(PurePath(folder).name))


def moved_aside(root: Path, name: str) -> list[Path]:
    """The folders of run ``name`` moved aside under ``root`` (``aside_name``), oldest first."""
    found = []
    for path in root.glob(f"{name}.previous-*"):  # a run name holds no glob character (check_run_name)
        if (when := MOVED_ASIDE.fullmatch(path.name, len(name))) and path.is_dir():
            found.append(((when["stamp"], int(when["number"] or 1)), path))
    return [path for _, path in sorted(found)]


def register_resolver() -> None:
    """``${swwae.arch_tag:${model.arch}}``, ``${swwae.labels_tag:...}`` and ``${swwae.sweep_tag:...}``
    for the configs' run name (on import: the Hydra callbacks and the job import this module before
    the run name is resolved)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("swwae.arch_tag", arch_tag, replace=True)
    OmegaConf.register_new_resolver("swwae.labels_tag", labels_tag, replace=True)
    OmegaConf.register_new_resolver("swwae.sweep_tag", sweep_tag, replace=True)


def check_run_name(name: object) -> str:
    """``name``, or ConfigError (one line) unless it is letters, digits and ``._-`` only, not
    starting with a dot (no ``..``, no hidden folder beside the locks), not empty, not reserved
    and not the name of a run moved aside (``aside_name``)."""
    text = "" if name is None else str(name)
    if not text:
        raise ConfigError("run_name is empty: give the run a name, e.g. run_name=my_run")
    if len(text) > MAX_LENGTH or not NAME.fullmatch(text):
        bad = next((c for c in text if not re.fullmatch(r"[A-Za-z0-9._-]", c, re.ASCII)), None)
        why = (
            f"{len(text)} characters, more than {MAX_LENGTH}"
            if len(text) > MAX_LENGTH
            else "it starts with a dot"
            if bad is None
            else f"{bad!r} is not allowed"
        )
        raise ConfigError(
            f"run_name={text[:80]!r} is not a name ({why}): use letters, digits and ._- only, "
            f"not starting with a dot; it names one folder under paths.checkpoint_dir"
        )
    if text in RESERVED:
        raise ConfigError(f"run_name={text} is reserved ({RESERVED[text]}): choose another name")
    if is_moved_aside(text):
        raise ConfigError(
            f"run_name={text} has the form of an old run moved aside (<run>.previous-<time>), which "
            "`swwae runs` lists apart and a fresh start may delete (keep_previous): choose another name"
        )
    return text


register_resolver()
