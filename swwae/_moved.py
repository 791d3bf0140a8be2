"""Old import paths of modules that moved into ``swwae.training`` and ``swwae.bench`` (0.2).

Checkpoints written before the move store their run config with ``_target_`` paths such as
``swwae.module.SWWAEModule`` and ``swwae.data.MNISTSampleDataModule``, and users' scripts
import ``swwae.checkpoints``; those names keep working. Nothing is imported until an old name
is: ``import swwae`` stays free of Lightning and Hydra.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys

MOVED = {
    "swwae.data.splits": "swwae.splits",  # before "swwae.data": the first match wins
    **{
        f"swwae.{name}": f"swwae.training.{name}"
        for name in (
            "module",
            "monitor",
            "run",
            "callbacks",
            "loggers",
            "checkpoints",
            "checkpoint_io",
            "host_memory",
            "data",
            "sweep",
        )
    },
    "swwae.benchmarking": "swwae.bench.harness",
    "swwae.epoch_clock": "swwae.bench.epoch_clock",
}


def new_name(name: str) -> str | None:
    """The module's current dotted path, or None if ``name`` did not move."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old) :]
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports an old name as the module at its new place (the same module object, so
    classes compare equal whichever name they were imported by)."""

    def find_spec(self, name, path=None, target=None):
        return importlib.util.spec_from_loader(name, self) if new_name(name) else None

    def create_module(self, spec):
        return None  # a placeholder, replaced in sys.modules by exec_module

    def exec_module(self, module) -> None:
        sys.modules[module.__name__] = importlib.import_module(new_name(module.__name__))


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
