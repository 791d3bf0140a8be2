"""A run's identity: the settings that made its weights, and nothing else.

Two configs with the same identity train the same network the same way: the same command (or a
requeued job, or one that asks for more epochs) finds its own run and continues it. Two configs
whose identities differ are different runs, and never share a checkpoint folder.

In: the model and the data (where the data live and how they are read excepted: ``root``,
``download``, ``num_workers``), the seed, the trainer settings that change the updates
(``TRAINER``) and the monitor that picks ``best.ckpt``. Out: ``max_epochs`` and ``max_steps``
(a run can be extended), loggers, callbacks, paths, devices and strategy, ``compile``, ``test``.

Plain Python over plain dicts (``swwae.stored.plain``: tuples as lists): the job passes its
resolved config, a checkpoint its stored one. A setting that one side predates (added to the
project since) counts as its default.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping

from swwae.stored import plain

# the trainer settings that change what the optimiser does, with Lightning's defaults
TRAINER = {
    "gradient_clip_val": None,
    "gradient_clip_algorithm": None,
    "accumulate_grad_batches": 1,
    "precision": "32-true",
    "limit_train_batches": None,
    "deterministic": False,
}
FREE_DATA_KEYS = ("root", "download", "num_workers")  # where the files are, how they are read
PRECISION_NAMES = {"32": "32-true", "16": "16-mixed", "bf16": "bf16-mixed", "64": "64-true"}
IDENTITY_KEY = "swwae_run_identity"  # in every checkpoint: {"identity": {...}, "digest": "..."}

# helpers


def trainer_setting(key: str, value):
    if key == "precision" and value is not None:
        return PRECISION_NAMES.get(str(value), str(value))
    if key == "limit_train_batches" and value in (1.0, None):  # every batch, said two ways
        return None
    return value


def section(values: Mapping | None, defaults: Mapping, free=()) -> dict:
    values = dict(values or {})
    return plain({k: v for k, v in (dict(defaults) | values).items() if k not in free})


# the identity


def run_identity(config: Mapping, defaults: Mapping[str, Mapping] | None = None, target_names=None) -> dict:
    """The identity of a resolved run config. ``defaults`` (``{"model": {...}, "data": {...}}``)
    fill the settings a config does not name; ``target_names(section, target)`` gives a class's
    registry name, so that a class stored under an old module path is the same class."""
    defaults = defaults or {}
    identity = {}
    for name in ("model", "data"):
        values = dict(config.get(name) or {})
        target = values.pop("_target_", None)
        values["class"] = target_names(name, target) if target_names and target else target
        identity[name] = section(values, defaults.get(name, {}), FREE_DATA_KEYS if name == "data" else ())
    trainer = dict(config.get("trainer") or {})
    identity["trainer"] = {k: trainer_setting(k, trainer.get(k, default)) for k, default in TRAINER.items()}
    identity["seed"] = config.get("seed")
    identity["monitor"] = {"metric": config.get("optimized_metric"), "mode": config.get("optimized_mode")}
    return identity


def digest(identity: Mapping) -> str:
    """A short fingerprint of an identity (16 hex digits of its SHA-256), for names and files."""
    text = json.dumps(plain(identity), sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def differences(saved: Mapping, current: Mapping, prefix: str = "") -> list[str]:
    """``key: <saved> -> <current>`` for every setting that differs, nested keys dotted
    (``model.lr: 0.002 -> 0.001``), the monitor and the seed as themselves."""
    lines = []
    for key in sorted(set(saved) | set(current)):
        a, b = saved.get(key, "<unset>"), current.get(key, "<unset>")
        name = f"{prefix}{key}"
        if isinstance(a, Mapping) and isinstance(b, Mapping):
            lines += differences(a, b, "" if name == "monitor" else f"{name}.")
        elif a != b:
            shown = {"metric": "optimized_metric", "mode": "optimized_mode"}.get(name, name)
            lines.append(f"{shown}: {a} -> {b}")
    return lines
