"""A lab's own parts (a data set, a pooling mode, a loss term), seen by every command.

A part joins swwae by registering itself in its table (``DATA_SETS``, ``POOL_MODES``, ``TERMS``)
when its module is imported. Every command imports the lab's modules first, before it composes a
config or reads a stored run, from two places:

* Python entry points in the group ``swwae.plugins``: a lab's package declares, in its own
  ``pyproject.toml``::

      [project.entry-points."swwae.plugins"]
      mylab = "mylab.swwae_parts"

  and ``pip install`` of that package makes its parts part of every ``swwae`` command;
* ``SWWAE_PLUGINS``: module names, comma-separated, for code that is not installed
  (``SWWAE_PLUGINS=my_parts swwae train data=mine``, with ``my_parts.py`` on ``PYTHONPATH``).

An entry point names a module (imported) or a function (imported and called). What a stored run
names is then looked up among the registered parts, never imported from the file's words. A
plugin that fails to import is one line naming it. Plain Python: nothing is imported here but
the lab's modules, which decide what they load (a table entry may name its class as
``"module:Class"``, imported when built, so that bad input still answers before torch loads).
"""

from __future__ import annotations

import importlib
import os
from importlib.metadata import entry_points

from swwae.errors import ConfigError, one_line

GROUP = "swwae.plugins"
ENVIRONMENT = "SWWAE_PLUGINS"
_loaded: set[str] = set()  # what this process has loaded already (loading is idempotent)


def named_in_environment() -> list[str]:
    return [name.strip() for name in os.environ.get(ENVIRONMENT, "").split(",") if name.strip()]


def load_plugins() -> list[str]:
    """Import every plugin of the entry-point group and of ``SWWAE_PLUGINS`` not loaded yet;
    their names. ConfigError (one line) for one that fails."""
    found = [(ep.name, ep.value, ep.load) for ep in entry_points(group=GROUP)]
    found += [(name, name, lambda name=name: importlib.import_module(name)) for name in named_in_environment()]
    loaded = []
    for name, value, load in found:
        if value in _loaded:
            continue
        _loaded.add(value)
        try:
            target = load()
            if callable(target):
                target()
        except Exception as err:  # a lab's code: whatever it raises is one line naming it
            _loaded.discard(value)
            where = f"{ENVIRONMENT}" if name == value else f"entry point {name!r} ({GROUP})"
            raise ConfigError(
                f"the swwae plugin {value} ({where}) failed to load: {one_line(err, limit=200)}"
            ) from None
        loaded.append(value)
    return loaded
