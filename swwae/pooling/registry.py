"""A table of what users add (pooling modes, data sets, loss terms): name -> entry, the shipped
entries first, read live by everything that needs it, and open to entries registered from outside
the package (a lab's own mode, a test's toy). Plain Python, no torch and nothing of swwae outside
this package: the tables are read before torch loads, and ``swwae.pooling`` stands alone.

One class for every table, so that each offers the same verbs:

    POOL_MODES.register(PoolMode("mine", MyPool, "no where: my pooling"))
    with DATA_SETS.registered(DataSet.of(MyDataModule)):  # in the table for the block only
        ...
"""

from __future__ import annotations

import contextlib
import re
import reprlib
from collections.abc import Iterable, Iterator, Mapping
from typing import Generic, TypeVar

SHORT = reprlib.Repr()  # a name as an error line quotes it: a long one cut in its middle
SHORT.maxstring = 100


Entry = TypeVar("Entry")


NAME = re.compile(r"[a-z][a-z0-9_]*", re.ASCII)  # what an entry may be called


class Table(Mapping[str, Entry], Generic[Entry]):
    """Entries by their ``name``; ``shipped`` names the package's own, which stay. ``error``:
    what an unknown name raises (swwae's tables raise its one-line ``ConfigError``)."""

    error: type[Exception] = ValueError

    def __init__(self, kind: str, setting: str, entries: Iterable[Entry]):
        self.kind, self.setting = kind, setting  # "pooling mode", "model.pool_mode"
        self._entries: dict[str, Entry] = {}
        for entry in entries:
            self.register(entry)
        self.shipped: tuple[str, ...] = tuple(self._entries)

    def __getitem__(self, name: str) -> Entry:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(tuple(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Table({self.kind}: {', '.join(self._entries)})"

    def names(self) -> tuple[str, ...]:
        """Every entry's name, the shipped ones first."""
        return tuple(self._entries)

    def entry(self, name: object, setting: str | None = None) -> Entry:
        """The entry of ``name``, or ConfigError (one line) naming the choices."""
        if not isinstance(name, str) or name not in self._entries:
            choices = ", ".join(self._entries)
            raise self.error(f"{setting or self.setting}={SHORT.repr(name)} is unknown; choose one of {choices}")
        return self._entries[name]

    def clash(self, entry: Entry) -> str | None:
        """Why ``entry`` cannot join the table (a subclass adds its own reasons), or None. A name
        is a lower-case identifier, unique ignoring case (``model.pool_mode=Hard`` is no second
        mode beside ``hard``)."""
        name = entry.name
        if not isinstance(name, str) or not NAME.fullmatch(name):
            return f"{self.kind} {name!r}: a name is lower-case letters, digits and _, starting with a letter"
        if any(name.lower() == other.lower() for other in self._entries):
            return f"{self.kind} {name!r} is already registered"
        return None

    def register(self, entry: Entry) -> Entry:
        """Add ``entry`` (ValueError if it clashes with one there)."""
        if (problem := self.clash(entry)) is not None:
            raise ValueError(problem)
        self._entries[entry.name] = entry
        return entry

    def unregister(self, name: str) -> None:
        """Take a registered entry out again (the shipped ones stay)."""
        if name in self.shipped:
            raise ValueError(f"{self.kind} {name!r} is shipped: it cannot be unregistered")
        self._entries.pop(name, None)

    @contextlib.contextmanager
    def registered(self, entry: Entry) -> Iterator[Entry]:
        """``with table.registered(entry):`` the entry is in the table for the block only."""
        self.register(entry)
        try:
            yield entry
        finally:
            self.unregister(entry.name)
