"""What the project ships, by name: the only classes a run's data or model is ever rebuilt as
from a file.

A checkpoint, a model folder, ``metrics.json`` or a sweep folder is data, even when its
checksum is right (anyone can compute a checksum). Their stored run config names its classes
as Hydra ``_target_`` strings; handing those to ``hydra.utils.instantiate`` would import and
call whatever the file names (``builtins.open``, ``torch.load`` of a pickle, ...). Here a
``_target_`` read from a file is only looked up: it must name a class of this table, under one
of the module paths the project has used for it, and the values beside it must be plain
(numbers, strings, booleans, None, lists of them); the class is then called with them as
keywords. Anything else is a ``CheckpointError`` (one line) naming what the file asked for.

Imports nothing heavy: the tables are plain strings, the class is imported when it is built.
The data sets are the data-set table's (``swwae.datasets``), registered ones too; each entry
says the module paths its class may be named by.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass

from swwae.datasets import BY_CLASS
from swwae.errors import CheckpointError
from swwae.plugins import ENVIRONMENT, GROUP


@dataclass(frozen=True)
class Shipped:
    """A model class the project ships: its config name (``model=<name>``), its class and
    module (the data sets are ``swwae.datasets.DataSet``s, which answer to the same names)."""

    name: str
    cls: str
    module: str

    @property
    def target(self) -> str:
        return f"{self.module}.{self.cls}"

    def load(self) -> type:
        return getattr(importlib.import_module(self.module), self.cls)


DATASETS = BY_CLASS  # class name -> its entry in the data-set table (swwae.datasets), a live view
MODELS = {s.cls: s for s in (Shipped("swwae", "SWWAEModule", "swwae.training.module"),)}
# the module paths a stored _target_ may name them by: today's, its submodules, and the paths
# before 0.2 moved them into swwae.training (checkpoints of then store those)
DATA_MODULES = ("swwae.training.data", "swwae.data")
MODEL_MODULES = ("swwae.training.module", "swwae.module")
PLAIN = (str, int, float, bool, type(None))
USER_KEYS = ("root", "download")  # where a data set lies and whether to fetch it: the user's, never a file's


def shipped(target: object, table: Mapping, modules: tuple[str, ...], what: str, source: str) -> Shipped:
    """The entry of ``table`` that ``target`` (a ``_target_`` string) names, or CheckpointError."""
    text = str(target)
    module, _, name = text.rpartition(".")
    entry = table.get(name) if isinstance(target, str) else None
    allowed = getattr(entry, "modules", modules)  # a data set's entry names its own
    known = entry is not None and any(module == m or module.startswith(m + ".") for m in allowed)
    if not known:
        choices = ", ".join(s.target for s in table.values())
        raise CheckpointError(
            f"{source} asks for {what} {text[:120]!r}, which is not one that swwae ships "
            f"({choices}): it is not built (a file's config is data, never code)"
        )
    return table[name]


def data_spec(target: object, source: str = "the config") -> Shipped:
    """The shipped or registered data set that a ``data._target_`` names (CheckpointError if none,
    saying how a lab's own set is registered: a run of one, read where its plugin is not loaded)."""
    try:
        return shipped(target, DATASETS, DATA_MODULES, "the data class", source)
    except CheckpointError as err:
        raise CheckpointError(
            f"{err}; a lab's own data set is found once its plugin is loaded ({ENVIRONMENT}=<module>, or its "
            f"package's {GROUP} entry point)"
        ) from None


def plain_settings(settings: Mapping, section: str, source: str) -> dict:
    """``settings`` without its ``_target_``, checked to hold plain values only."""
    values = {}
    for key, value in settings.items():
        if key == "_target_":
            continue
        items = value if isinstance(value, (list, tuple)) else [value]
        if not isinstance(key, str) or not all(isinstance(v, PLAIN) for v in items):
            raise CheckpointError(
                f"{source} holds {section}.{key} = {str(value)[:80]!r}, which is not a plain "
                f"value (a number, a string, a boolean or a list of them): it is not built"
            )
        values[key] = list(value) if isinstance(value, (list, tuple)) else value
    return values


def build_data(data: Mapping, source: str, **changes):
    """The data module that a stored ``data`` config describes, built only as a shipped class
    from plain values (``changes`` on top, e.g. ``root=``). The one way every script rebuilds
    "the data of the run this file came from"."""
    if not isinstance(data, Mapping):
        raise CheckpointError(f"{source} holds no data config (a mapping with _target_), but {type(data).__name__}")
    spec = data_spec(data.get("_target_"), source)
    settings = plain_settings(data, "data", source) | changes
    cls = spec.load()
    unknown = sorted(set(settings) - set(spec.settings.model_fields))
    if unknown:
        raise CheckpointError(f"{source} holds data.{unknown[0]}, which {spec.name} does not take: it is not built")
    return cls(**settings)


def data_of_run(
    data: Mapping | None,
    source: str,
    data_root: str | None = None,
    download: bool = False,
    fetch_hint: str = "--download",
    **changes,
):
    """The data module of a run from the ``data`` section of its stored run config (a
    checkpoint's ``swwae_config``, a model folder's ``run_config``, a sweep job's saved config),
    not yet set up; ``changes`` override settings.

    The file says which data (the class, its splits, seeds and label subsets); the user says
    where they lie and whether to fetch them (USER_KEYS): ``data_root`` (default: the data
    set's own default, ``./data``) and ``download`` (default: no; ``fetch_hint``: how the
    command that reads them asks for a download, for the missing-files error). A stored ``root`` or
    ``download`` is never used: a file never decides where to read or whether to go online."""
    if data is None:
        raise CheckpointError(f"{source} holds no run config with a data section: its data cannot be rebuilt")
    if not isinstance(data, Mapping):
        raise CheckpointError(f"{source} holds no data config (a mapping with _target_), but {type(data).__name__}")
    accepted = data_spec(data.get("_target_"), source).settings.model_fields
    user = {"root": data_root, "download": bool(download)}
    user = {k: v for k, v in user.items() if v is not None and k in accepted}
    datamodule = build_data({k: v for k, v in data.items() if k not in USER_KEYS}, source, **(user | changes))
    datamodule.fetch_hint, datamodule.root_hint = fetch_hint, "--data-root <folder>"
    return datamodule
