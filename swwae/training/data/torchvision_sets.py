"""Datasets read through torchvision under ``data.root``: MNIST, CIFAR-10, CIFAR-100, SVHN.

torchvision knows their files, downloads (``data.download=true``) and integrity checks; we
take its uint8 arrays as they are (no PIL). Validation images are carved out of the official
training set (stratified, seeded); test is the official test set. Any failure to read is one
:class:`swwae.errors.DataError` line that tells missing, undownloadable and corrupt files
apart and names the folder.
"""

from __future__ import annotations

import os
import pickle
import tarfile
import zlib
from contextlib import contextmanager

import numpy as np
import torch
from filelock import FileLock
from torch import Tensor

from swwae.errors import DataError, one_line
from swwae.training.data.base import OFFLINE_HINT, InMemoryDataModule, Splits

# Everything that reading half-written or foreign files can raise.
READ_ERRORS = (
    OSError, RuntimeError, EOFError, ValueError, TypeError, KeyError, IndexError,
    AssertionError, pickle.UnpicklingError, tarfile.TarError, zlib.error,
)  # fmt: skip


DOWNLOAD_LOCK = ".swwae-download.lock"  # in data.root: one process downloads at a time


class TorchvisionDataModule(InMemoryDataModule):
    """Train/test parts of a torchvision dataset under ``root``; subclasses say which class,
    where its files lie and how its arrays look."""

    parts: tuple[str, ...] = ("train", "test")  # what prepare_data downloads

    # subclass hooks

    def _open(self, part: str):
        """The torchvision dataset object of ``part`` (train, test, ...)."""
        raise NotImplementedError

    def _folder(self) -> str:
        """Where the files lie."""
        raise NotImplementedError

    def _files(self) -> list[str]:
        """The files a complete download leaves in ``_folder()``."""
        raise NotImplementedError

    def _archives(self) -> list[str]:
        """The archives a download fetches and unpacks into ``_files()`` (none: the files are
        fetched as they are). Where they lie already, ``data.download=true`` checks and unpacks
        them without the internet: a copy brought to an offline machine."""
        return []

    def _arrays(self, ds) -> tuple[Tensor, Tensor]:
        """(images uint8 (N, C, H, W), labels int64) of a dataset object; by default its
        ``data`` already in that layout and its ``labels`` (SVHN, STL-10)."""
        return torch.from_numpy(np.ascontiguousarray(ds.data)), label_tensor(ds.labels)

    # reading

    def prepare_data(self) -> None:
        """Download what is missing. The job calls this in every process (a DDP run that torchrun
        or SLURM starts, all processes at once, too), so they take turns under a lock in
        ``root``: the first downloads, the others find the files, none reads a half-written one."""
        if self.download:
            os.makedirs(self.root, exist_ok=True)
            with FileLock(os.path.join(self.root, DOWNLOAD_LOCK)):
                for part in self.parts:
                    self._read(part)

    def load(self) -> Splits:
        train_x, train_y = self._read("train")
        test_x, test_y = self._read("test")
        val, train = self._split_seeded(train_x, train_y, {"val_size": self.val_size})
        return Splits(*train, *val, test_x, test_y)

    def _read(self, part: str) -> tuple[Tensor, Tensor]:
        with self._reading():
            x, y = self._arrays(self._open(part))
            if x.dtype != torch.uint8 or x.shape[1:] != self.image_shape or len(x) != len(y) or len(y) == 0:
                raise ValueError(f"got images {tuple(x.shape)} {x.dtype} and {len(y)} labels")
            if int(y.min()) < 0 or int(y.max()) >= self.num_classes:
                raise ValueError(f"labels outside 0..{self.num_classes - 1}")
            return x, y

    @contextmanager
    def _reading(self):
        """Turn any failure to read or download into one DataError line."""
        try:
            yield
        except READ_ERRORS as err:
            folder, files = os.path.abspath(self._folder()), self._files()
            present = all(os.path.isfile(os.path.join(folder, f)) for f in files)
            expected = ", ".join(files)
            packed = self._download_here()
            if not present and not self.download and packed:
                msg = (
                    f"{self.name} files not found in {folder} (expected {expected}), but their download is there, "
                    f"not unpacked ({packed}): {self.fetch_hint} unpacks it (no internet needed)"
                )
            elif not present and not self.download:
                msg = (
                    f"{self.name} files not found in {folder} (expected {expected}): {self.root_hint} says "
                    f"where they are, {self.fetch_hint} fetches them (needs internet), or use {OFFLINE_HINT}"
                )
            elif not present and packed:
                msg = (
                    f"{self.name}'s download ({packed}) did not unpack into {folder}, and no new one could be "
                    f"fetched ({one_line(err, limit=160)}): it may be a partial copy; copy a whole one there, "
                    f"or use {OFFLINE_HINT}"
                )
            elif not present:
                msg = (
                    f"could not download {self.name} into {folder} ({one_line(err, limit=160)}): check the "
                    f"internet connection, or copy the files there by hand ({expected}), or use {OFFLINE_HINT}"
                )
            else:
                msg = (
                    f"{self.name} files in {folder} look partial or corrupt ({one_line(err, limit=160)}): "
                    f"delete that folder and download again with {self.fetch_hint}, or use {OFFLINE_HINT}"
                )
            raise DataError(msg) from err

    def _download_here(self) -> str | None:
        """The download brought in by hand, as the error lines name it (``a.tar.gz in DIR``), or
        None where it is not all there."""
        archives = self._archives()
        if not archives or not all(map(os.path.isfile, archives)):
            return None
        return f"{', '.join(map(os.path.basename, archives))} in {os.path.dirname(os.path.abspath(archives[0]))}"


def label_tensor(targets) -> Tensor:
    return torch.as_tensor(np.asarray(targets), dtype=torch.long)


class MNISTDataModule(TorchvisionDataModule):
    """Full MNIST (60,000 train, 10,000 test) from torchvision's raw IDX files under
    ``<root>/MNIST/raw``."""

    def _open(self, part: str):
        from torchvision.datasets import MNIST

        return MNIST(self.root, train=part == "train", download=self.download)

    def _folder(self) -> str:
        return os.path.join(self.root, "MNIST", "raw")

    def _files(self) -> list[str]:
        from torchvision.datasets import MNIST

        return [os.path.splitext(os.path.basename(url))[0] for url, _ in MNIST.resources]

    def _archives(self) -> list[str]:
        from torchvision.datasets import MNIST

        return [os.path.join(self._folder(), os.path.basename(url)) for url, _ in MNIST.resources]

    def _arrays(self, ds) -> tuple[Tensor, Tensor]:
        return ds.data.unsqueeze(1), label_tensor(ds.targets)


class CIFAR10DataModule(TorchvisionDataModule):
    """CIFAR-10 (50,000 train, 10,000 test) from torchvision's pickled batches under
    ``<root>/cifar-10-batches-py``; the (N, 32, 32, 3) arrays become (N, 3, 32, 32)."""

    def _dataset_class(self):
        from torchvision.datasets import CIFAR10

        return CIFAR10

    def _open(self, part: str):
        return self._dataset_class()(self.root, train=part == "train", download=self.download)

    def _folder(self) -> str:
        return os.path.join(self.root, self._dataset_class().base_folder)

    def _files(self) -> list[str]:
        cls = self._dataset_class()
        return [name for name, _ in cls.train_list + cls.test_list] + [cls.meta["filename"]]

    def _archives(self) -> list[str]:
        return [os.path.join(self.root, self._dataset_class().filename)]

    def _arrays(self, ds) -> tuple[Tensor, Tensor]:
        return torch.from_numpy(np.asarray(ds.data)).permute(0, 3, 1, 2).contiguous(), label_tensor(ds.targets)


class CIFAR100DataModule(CIFAR10DataModule):
    """CIFAR-100 (50,000 train, 10,000 test, 100 classes) under ``<root>/cifar-100-python``."""

    def _dataset_class(self):
        from torchvision.datasets import CIFAR100

        return CIFAR100


class SVHNDataModule(TorchvisionDataModule):
    """SVHN street-view digits (73,257 train, 26,032 test; ``extra=true`` adds the 531,131
    easier extra images to training) from torchvision's ``.mat`` files under ``<root>``."""

    @property
    def parts(self) -> tuple[str, ...]:
        return ("train", "test", "extra") if self.extra else ("train", "test")

    def _open(self, part: str):
        from torchvision.datasets import SVHN

        return SVHN(self.root, split=part, download=self.download)

    def _folder(self) -> str:
        return self.root

    def _files(self) -> list[str]:
        from torchvision.datasets import SVHN

        return [SVHN.split_list[part][1] for part in self.parts]

    def load(self) -> Splits:
        splits = super().load()
        if not self.extra:
            return splits
        extra_x, extra_y = self._read("extra")  # training only: val and test stay as they are
        return splits._replace(
            train_x=torch.cat([splits.train_x, extra_x]), train_y=torch.cat([splits.train_y, extra_y])
        )
