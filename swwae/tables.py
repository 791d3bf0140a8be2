"""The project's tables of what users add (data sets, loss terms), on the pooling package's
generic table (``swwae.pooling.registry``): the same verbs, with a one-line ``ConfigError`` for
an unknown name."""

from __future__ import annotations

from typing import TypeVar

from swwae.errors import ConfigError
from swwae.pooling.registry import Table as Registry

Entry = TypeVar("Entry")


class Table(Registry[Entry]):
    error = ConfigError
