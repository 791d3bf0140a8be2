"""The pooling modes: one table, one entry a mode, read by everything that needs to know a mode
(the config checks, the model, the training job's checks, the model card, the tests). Plain
Python: the table is read before torch is imported (bad input answers in a second), so an
entry names its class as ``"module:Class"``, imported when a pool is built, or holds the class
itself (a mode defined outside the package, a test's toy)::

    from swwae.pool_modes import PoolMode, register

    register(PoolMode("mine", MyPool, "no where: my pooling, nearest upsampling"))

``swwae.pooling.make_pool`` builds a mode's class with the settings its constructor names
(``inspect.signature``): a new setting is a new constructor parameter (and a model setting,
``SWWAE``'s signature and the config's section), never a change to the factory.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from swwae.errors import ConfigError

WHERES = ("hard", "soft", "none")  # what a pool records for its unpooling


@dataclass(frozen=True)
class PoolMode:
    """One pooling mode, as ``model.pool_mode`` names it."""

    name: str  # the config's name (model.pool_mode=<name>)
    cls: str | type  # the Pool subclass: "module:Class" (imported on use) or the class itself
    description: str  # the model card's words; {setting} fields are filled from the network's settings
    where: str = "none"  # what it records for the decoder: "hard" (switches), "soft" (soft argmax) or "none"
    ceil: bool = False  # pads odd sizes: a stage's output is ceil(size / P), not floor (the arch check's rule)
    parameters: tuple[str, ...] = ()  # the model settings it reads besides its geometry (its description's fields)

    def __post_init__(self):
        if self.where not in WHERES:
            raise ValueError(f"pooling mode {self.name!r}: where must be one of {WHERES}, got {self.where!r}")
        if isinstance(self.cls, str) and ":" not in self.cls:
            raise ValueError(f"pooling mode {self.name!r}: cls must be 'module:Class', got {self.cls!r}")

    @property
    def keeps_where(self) -> bool:
        return self.where != "none"

    def load(self) -> type:
        """The class (imported if the entry names it)."""
        if not isinstance(self.cls, str):
            return self.cls
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name)

    def describe(self, settings: Mapping) -> str:
        """What the card says of a network's pooling, from its settings."""
        return self.description.format(**{name: settings.get(name) for name in self.parameters})


_POOLS = "swwae.pooling.pools"
_MODES: dict[str, PoolMode] = {
    mode.name: mode
    for mode in (
        PoolMode(
            "hard",
            f"{_POOLS}:WhatWherePool",
            "hard where (max-pooling switches, the gradient-of-sum trick)",
            where="hard",
        ),
        PoolMode(
            "soft",
            f"{_POOLS}:WhatWherePool",
            "soft where (soft argmax, beta = {beta:g})",
            where="soft",
            parameters=("beta",),
        ),
        PoolMode("upsample", f"{_POOLS}:MaxUpsamplePool", "no where: max pooling, nearest upsampling"),
        PoolMode("avg", f"{_POOLS}:AvgPool", "no where: average pooling, nearest upsampling"),
        PoolMode(
            "strided",
            f"{_POOLS}:StridedConvPool",
            "no where: strided convolution down, transposed convolution up",
        ),
        PoolMode(
            "wavelet",
            f"{_POOLS}:WaveletPool",
            "no where: wavelet ({wavelet}) low-pass band down, inverse transform up",
            ceil=True,
            parameters=("wavelet",),
        ),
    )
}
SHIPPED = tuple(_MODES)  # the modes the package ships, in the order the configs list them
TABLE: Mapping[str, PoolMode] = MappingProxyType(_MODES)  # read-only, live: registered modes show


def names() -> tuple[str, ...]:
    """Every mode's name, the shipped ones first."""
    return tuple(_MODES)


def where_modes() -> tuple[str, ...]:
    return tuple(name for name, mode in _MODES.items() if mode.keeps_where)


def mode_of(name: object, what: str = "model.pool_mode") -> PoolMode:
    """The entry of ``name``, or ConfigError (one line) naming the choices."""
    if not isinstance(name, str) or name not in _MODES:
        raise ConfigError(f"{what}={name!r} is unknown; choose one of {', '.join(_MODES)}")
    return _MODES[name]


def register(mode: PoolMode) -> PoolMode:
    """Add ``mode`` to the table (ValueError if its name is taken)."""
    if mode.name in _MODES:
        raise ValueError(f"pooling mode {mode.name!r} is already registered")
    _MODES[mode.name] = mode
    return mode


def unregister(name: str) -> None:
    """Take a registered mode out again (the shipped ones stay)."""
    if name in SHIPPED:
        raise ValueError(f"pooling mode {name!r} is shipped: it cannot be unregistered")
    _MODES.pop(name, None)


@contextlib.contextmanager
def registered(mode: PoolMode) -> Iterator[PoolMode]:
    """``with registered(PoolMode(...)):`` the mode is in the table for the block only."""
    register(mode)
    try:
        yield mode
    finally:
        unregister(mode.name)
