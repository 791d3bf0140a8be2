"""The pooling modes: one table, one entry a mode, read by everything that needs to know a mode
(the config checks, the model, the model card, the tests). Plain Python, no torch: the table is
read before torch is imported (bad input answers in a second), so an entry names its class as
``"module:Class"``, imported when a pool is built, or holds the class itself (a mode defined
outside the package, a test's toy). A mode's facts are stated here, once:

    from swwae.pooling.modes import POOL_MODES, PoolMode, Setting

    POOL_MODES.register(PoolMode("mine", MyPool, "no where: my pooling (gamma = {gamma:g})",
                                 settings={"gamma": Setting(0.5, "my pooling's exponent", gt=0)}))

A mode's ``settings`` are what it reads besides its geometry: each is a model setting
(``model.gamma=0.7`` on the command line, typed and checked from its declaration here) and a
keyword of the class's constructor, which ``swwae.pooling.make_pool`` passes on.
"""

from __future__ import annotations

import importlib
import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from swwae.pooling.registry import Table

WHERES = ("hard", "soft", "none")  # what a pool records for its unpooling


@dataclass(frozen=True)
class Setting:
    """A setting a pooling mode reads: its default (whose type is the setting's type: a float
    setting takes ints too), one line of help, and the bounds or choices it must keep."""

    default: Any
    help: str
    gt: float | None = None  # greater than
    ge: float | None = None  # at least
    le: float | None = None  # at most
    choices: tuple | None = None  # one of these

    def check(self, name: str, value: Any) -> Any:
        """``value``, or TypeError (a wrong type) or ValueError, one line naming ``name`` and what
        it must be: of the default's type (a float setting takes ints too, and must be finite; no
        bool passes for a number; a None default takes anything), within the bounds, one of the
        choices."""
        kind, what = self.value_type()
        if kind is not None and (not isinstance(value, kind) or isinstance(value, bool) != (kind is bool)):
            raise TypeError(f"{name} must be {what}, got {value!r}")
        if kind is numbers.Real and not math.isfinite(value):
            raise ValueError(f"{name} must be a finite number, got {value!r}")
        if self.gt is not None and not value > self.gt:
            raise ValueError(f"{name} must be > {self.gt:g}, got {value!r}")
        if self.ge is not None and not value >= self.ge:
            raise ValueError(f"{name} must be >= {self.ge:g}, got {value!r}")
        if self.le is not None and not value <= self.le:
            raise ValueError(f"{name} must be <= {self.le:g}, got {value!r}")
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{name} must be one of {', '.join(map(str, self.choices))}, got {value!r}")
        return value

    def value_type(self) -> tuple[type | None, str]:
        """The type its values must have (None: any), in words."""
        default = self.default
        if default is None:
            return None, "anything"
        if isinstance(default, bool):
            return bool, "true or false"
        if isinstance(default, numbers.Integral):
            return numbers.Integral, "an integer"
        if isinstance(default, numbers.Real):
            return numbers.Real, "a number"
        return type(default), f"a {type(default).__name__}"


@dataclass(frozen=True)
class PoolMode:
    """One pooling mode, as ``model.pool_mode`` names it."""

    name: str  # the config's name (model.pool_mode=<name>)
    cls: str | type  # the Pool subclass: "module:Class" (imported on use) or the class itself
    description: str  # the model card's words; {setting} fields are filled from the network's settings
    where: str = "none"  # what it records for the decoder: "hard" (switches), "soft" (soft argmax) or "none"
    ceil: bool = False  # pads odd sizes: a stage's output is ceil(size / P), not floor (the arch check's rule)
    settings: Mapping[str, Setting] = field(default_factory=dict)  # what it reads besides its geometry
    # its ops run on (N, H, W, C) memory as they are (torch's pooling, upsampling, convolutions), so
    # channels_last=auto may lay a network out so on the CPU; False: it computes on each channel's
    # (H, W) planes and converts (swwae.pooling.layout), and auto leaves the network plain
    channels_last: bool = False

    def __post_init__(self):
        if self.where not in WHERES:
            raise ValueError(f"pooling mode {self.name!r}: where must be one of {WHERES}, got {self.where!r}")
        if isinstance(self.cls, str) and ":" not in self.cls:
            raise ValueError(f"pooling mode {self.name!r}: cls must be 'module:Class', got {self.cls!r}")

    @property
    def keeps_where(self) -> bool:
        return self.where != "none"

    @property
    def parameters(self) -> tuple[str, ...]:
        """The names of its settings."""
        return tuple(self.settings)

    def load(self) -> type:
        """The class (imported if the entry names it)."""
        if not isinstance(self.cls, str):
            return self.cls
        module, _, name = self.cls.partition(":")
        return getattr(importlib.import_module(module), name)

    def values(self, given: Mapping) -> dict:
        """Its settings' values: those ``given`` holds, defaults for the rest."""
        return {name: given.get(name, s.default) for name, s in self.settings.items()}

    def checked(self, given: Mapping) -> dict:
        """``values(given)``, each checked against its declaration (``Setting.check``: TypeError
        or ValueError, one line)."""
        return {name: self.settings[name].check(name, value) for name, value in self.values(given).items()}

    def describe(self, settings: Mapping) -> str:
        """What the card says of a network's pooling, from its settings."""
        return self.description.format(**self.values(settings))


_POOLS = "swwae.pooling.pools"
POOL_MODES: Table[PoolMode] = Table(
    "pooling mode",
    "model.pool_mode",
    (
        PoolMode(
            "hard",
            f"{_POOLS}:WhatWherePool",
            "hard where (max-pooling switches, the gradient-of-sum trick)",
            where="hard",
            channels_last=True,
        ),
        PoolMode(
            "soft",
            f"{_POOLS}:WhatWherePool",
            "soft where (soft argmax, beta = {beta:g})",
            where="soft",
            # beta must be a number of the run's precision (float16 holds at most 65504)
            settings={"beta": Setting(100.0, "soft argmax temperature (soft only)", gt=0, le=1e4)},
        ),
        PoolMode(
            "upsample", f"{_POOLS}:MaxUpsamplePool", "no where: max pooling, nearest upsampling", channels_last=True
        ),
        PoolMode("avg", f"{_POOLS}:AvgPool", "no where: average pooling, nearest upsampling", channels_last=True),
        PoolMode(
            "strided",
            f"{_POOLS}:StridedConvPool",
            "no where: strided convolution down, transposed convolution up",
            channels_last=True,
        ),
        PoolMode(
            "wavelet",
            f"{_POOLS}:WaveletPool",
            "no where: wavelet ({wavelet}) low-pass band down, inverse transform up",
            ceil=True,
            settings={"wavelet": Setting("haar", "PyWavelets wavelet name (wavelet only): haar, db2, sym4, ...")},
        ),
    ),
)  # the shipped modes in the order the configs list them; registered ones follow


def where_modes() -> tuple[str, ...]:
    return tuple(name for name, mode in POOL_MODES.items() if mode.keeps_where)
