"""The in-memory datamodule every dataset here builds on: splits, label subsets, batches.

Images live in memory as uint8 (N, C, H, W) and become float in [0, 1] one batch at a time
(``swwae.training.data.batching``): STL-10's 100,000 unlabelled images take 2.8 GB so, 11 GB as
float32. Nothing is decoded per sample: no PIL, no collate, no worker processes needed.

On a GPU the loaders gather batches there (``data.on_device``, by default where the images take
at most a quarter of its memory: CIFAR-10 is 180 MB as uint8): a copy of each split on the
device, index tensors there (``swwae.training.data.batching``), so no step copies a batch or
waits for the host. Everything else (panels, probes, the k-NN monitor) reads the host's copy.

Splits are seeded and stratified by class (``swwae.splits``). A training sample whose
label is hidden carries the label -1: ``num_labels`` keeps the labels of a class-balanced,
seeded subset of the training split and hides the others (STL-10's unlabelled images have
none to begin with). Every training batch then holds ``labelled_per_batch`` labelled samples
and label-hidden ones for the rest: the model trains its reconstruction terms on every
sample and its NLL on the labelled ones, in every step. ``num_unlabelled`` keeps a seeded
subset of the label-hidden ones (the same labelled subset, validation and test images), to
measure what the amount of unlabelled data is worth.
"""

from __future__ import annotations

from typing import NamedTuple

import lightning
import torch
from torch import Tensor
from torch.utils.data import DataLoader

from swwae.datasets import entry_of
from swwae.errors import ConfigError
from swwae.settings import check_data, check_int, choose_labelled_per_batch, parse
from swwae.splits import (
    AUGMENT,
    LABELS,
    SPLIT,
    UNLABELLED_POOL,
    balanced_subset,
    derive_seed,
    generator,
    stratified_split,
)
from swwae.training.data.augment import random_crop_flip
from swwae.training.data.batching import UNLABELLED, LabelledBatchSampler, batch_loader, to_float

OFFLINE_HINT = "data=mnist_sample (bundled, works offline)"


class Splits(NamedTuple):
    """What :meth:`InMemoryDataModule.load` returns: images uint8 (N, C, H, W), labels int64
    in [0, num_classes), or -1 for training images that come without a label."""

    train_x: Tensor
    train_y: Tensor
    val_x: Tensor
    val_y: Tensor
    test_x: Tensor
    test_y: Tensor


class InMemoryDataModule(lightning.LightningDataModule):
    """Holds train/val/test tensors in memory and serves them as whole batches.

    Subclasses set the class constants and implement :meth:`load`; this class does the
    label subset, the loaders and the augmentation. ``setup`` may be called for every
    stage: it loads once.

    After ``setup``: ``train_x, train_y, val_x, val_y, test_x, test_y`` (images uint8 (N, C,
    H, W), labels int64; label-hidden training samples have label -1); :meth:`images` gives
    float images of a split.
    """

    # what the user sets to point at the files, or to fetch them, in the words of the command
    # that reads them (a stored run's reader: --data-root, --download)
    root_hint: str = "data.root=<folder>"
    fetch_hint: str = "data.download=true"
    class_names: tuple[str, ...] = ()  # the classes' names where the data name them (a folder's), for error lines

    def __init__(self, **settings):
        """``settings``: the data set's (its entry's ``settings`` class in ``swwae.datasets``:
        names, types and defaults are declared there); the data set's facts (name, image shape,
        classes, flips) are its entry's too."""
        super().__init__()
        entry = entry_of(type(self))
        self.settings = parse(entry.settings, settings, "data")
        self.name, self.flips = entry.name, entry.flips
        self.image_shape, self.num_classes = entry.shape_of(self.settings), entry.classes_of(self.settings)
        # the split is a property of the dataset, fixed by split_seed: runs with different
        # (training) seeds are then compared on the same test images
        values = check_data(self.name, self.num_classes, self.settings)
        vars(self).update(values)  # self.batch_size, self.seed, self.val_size, ...: read by the loaders
        self.train_x = self.train_y = self.val_x = self.val_y = self.test_x = self.test_y = None
        self.labelled = None  # indices of the labelled training samples, when some labels are hidden
        self.resume_position: tuple[int, int] | None = None  # set by resume_at: a pre-empted epoch to finish
        self._on_device: dict[str, tuple[Tensor, Tensor]] = {}  # split -> its images and labels on the device
        # every setting lands in checkpoints (resume checks it); num_unlabelled only when set, so
        # checkpoints written before it existed still resume
        self.save_hyperparameters({k: v for k, v in values.items() if k != "num_unlabelled" or v is not None})

    @classmethod
    def contents_of(cls, settings) -> str | None:
        """A fingerprint of what ``settings`` point at, for the run identity when it may change
        under the same settings (a folder of the user's); None for a fixed data set."""
        return None

    def load(self) -> Splits:
        """Read the data and split it into train/val/test (all labels kept)."""
        raise NotImplementedError

    def setup(self, stage: str | None = None) -> None:
        if self.train_x is not None:
            return
        splits = self.load()
        train_y = splits.train_y.clone()
        pool = torch.nonzero(train_y >= 0).flatten()  # the training samples that have a label
        if self.num_labels is not None:
            if self.num_labels > len(pool):
                raise ConfigError(
                    f"data.num_labels={self.num_labels} is more than the {len(pool)} labelled "
                    f"training samples of {self.name}"
                )
            chosen = balanced_subset(
                train_y[pool],
                self.num_labels,
                self.num_classes,
                generator(self.seed, LABELS),
                self.name,
                names=self.class_names,
            )
            hidden = torch.ones(len(train_y), dtype=torch.bool)
            hidden[pool[chosen]] = False
            train_y[hidden] = UNLABELLED
        train_x = splits.train_x
        if self.num_unlabelled is not None:
            train_x, train_y = self._fewer_unlabelled(train_x, train_y)
        if bool((train_y < 0).any()) and bool((train_y >= 0).any()):  # semi-supervised: labelled in every batch
            self.labelled = torch.nonzero(train_y >= 0).flatten()
            self.labelled_per_batch = choose_labelled_per_batch(
                self.labelled_per_batch,
                self.batch_size,
                len(self.labelled),
                f"{len(self.labelled)} labelled training samples of {self.name}",
            )
        self.train_x, self.train_y = train_x, train_y
        self.val_x, self.val_y = splits.val_x, splits.val_y
        self.test_x, self.test_y = splits.test_x, splits.test_y

    def _fewer_unlabelled(self, train_x: Tensor, train_y: Tensor) -> tuple[Tensor, Tensor]:
        """The labelled training samples plus ``num_unlabelled`` label-hidden ones, drawn from
        (seed, UNLABELLED_POOL): a prefix of one permutation, so a smaller pool is part of
        every larger one. The training order is kept, so the labelled samples are cycled
        through in the same order whatever the pool."""
        hidden = torch.nonzero(train_y < 0).flatten()
        if len(hidden) == 0:
            raise ConfigError(
                f"data.num_unlabelled={self.num_unlabelled} needs label-hidden training images: "
                "set data.num_labels too (with every label kept, no image is unlabelled)"
            )
        if self.num_unlabelled > len(hidden):
            raise ConfigError(
                f"data.num_unlabelled={self.num_unlabelled} is more than the {len(hidden)} "
                f"label-hidden training images of {self.name}"
            )
        pool = hidden[torch.randperm(len(hidden), generator=generator(self.seed, UNLABELLED_POOL))]
        keep = torch.ones(len(train_y), dtype=torch.bool)
        keep[pool[self.num_unlabelled :]] = False
        return train_x[keep], train_y[keep]

    def _split_seeded(self, x: Tensor, y: Tensor, sizes: dict[str, int]) -> list[tuple[Tensor, Tensor]]:
        """Stratified, seeded split of (x, y) into the named sizes plus the rest (train)."""
        for key, size in sizes.items():
            check_int(key, size, 1)
        if sum(sizes.values()) > len(y) - self.num_classes:
            wanted = " + ".join(f"data.{k}={v}" for k, v in sizes.items())
            raise ConfigError(f"{wanted} leaves too few of the {len(y)} samples of {self.name} for training")
        parts = stratified_split(y, list(sizes.values()), generator(self.split_seed, SPLIT))
        return [(x[idx], y[idx]) for idx in parts]

    # what models and scripts read

    def images(self, split: str, count: int | None = None) -> Tensor:
        """The first ``count`` images of ``split`` (train, val or test), float in [0, 1]."""
        return to_float(getattr(self, f"{split}_x")[:count])

    def pixel_mean(self, chunk: int = 4096) -> list[float]:
        """Mean training pixel per channel, in [0, 1] (read in chunks: no float copy of it all)."""
        total = torch.zeros(self.image_shape[0], dtype=torch.float64)
        for part in self.train_x.split(chunk):
            total += part.double().sum((0, 2, 3))
        return (total / (len(self.train_x) * self.image_shape[1] * self.image_shape[2] * 255)).tolist()

    # loaders

    def loader_device(self) -> torch.device | None:
        """Where the loaders gather batches (``data.on_device``): the training device, or None for
        the host's way (lists of indices, batches copied to the device by Lightning). ``auto``:
        a CUDA device whose memory holds the images four times over."""
        trainer = self.trainer
        device = trainer.strategy.root_device if trainer is not None else torch.device("cpu")
        if self.num_workers:  # loader processes gather on the host (data.on_device=true refuses them)
            return None
        if self.on_device is True:
            return device
        if self.on_device != "auto" or device.type != "cuda":
            return None
        images = sum(t.numel() * t.element_size() for t in (self.train_x, self.val_x, self.test_x))
        return device if 4 * images <= torch.cuda.get_device_properties(device).total_memory else None

    def split_for_loader(self, split: str) -> tuple[Tensor, Tensor, torch.device | None]:
        """A split's images and labels where the loaders gather them, and that device (None: the host's way)."""
        x, y = getattr(self, f"{split}_x"), getattr(self, f"{split}_y")
        device = self.loader_device()
        if device is None:
            return x, y, None
        if split not in self._on_device or self._on_device[split][0].device != device:
            self._on_device[split] = (x.to(device), y.to(device))
        return (*self._on_device[split], device)

    def train_dataloader(self) -> DataLoader:
        sampler = None
        if self.labelled is not None:
            sampler = LabelledBatchSampler(
                len(self.train_x), self.labelled, self.batch_size, self.labelled_per_batch, self.seed
            )
        x, y, device = self.split_for_loader("train")
        loader = batch_loader(x, y, self.batch_size, True, self.seed, self.num_workers, sampler, device, self.ranks())
        if self.resume_position is not None:  # the batch sampler sits in the sampler= slot
            loader.sampler.resume_at(*self.resume_position)
        return loader

    def ranks(self) -> tuple[int, int]:
        """(rank, ranks) that share the training batches and the evaluation splits: the trainer's,
        under DDP, unless its ``use_distributed_sampler=false`` gives every process the whole of each."""
        trainer = self.trainer
        if trainer is None or trainer.world_size < 2:
            return 0, 1
        if not getattr(trainer._accelerator_connector, "use_distributed_sampler", True):
            return 0, 1
        return trainer.global_rank, trainer.world_size

    def resume_at(self, epoch: int, batches_done: int) -> None:
        """Start training epoch ``epoch`` after the ``batches_done`` batches (of this process)
        that a pre-empted run had trained (``swwae.training.preemption``)."""
        self.resume_position = (epoch, batches_done)

    def val_dataloader(self) -> DataLoader:
        return self.evaluation_loader("val")

    def test_dataloader(self) -> DataLoader:
        return self.evaluation_loader("test")

    def evaluation_loader(self, split: str) -> DataLoader:
        """A split's images in order; under DDP, this process's share of them (each image once)."""
        x, y, device = self.split_for_loader(split)
        ranks = self.ranks()
        return batch_loader(x, y, self.batch_size, False, num_workers=self.num_workers, device=device, ranks=ranks)

    def on_after_batch_transfer(self, batch, dataloader_idx: int):
        """``data.augment``: random crop (padding 1/8 of the side) and, where a mirror image
        keeps its class, horizontal flip; training batches only, on the training device. The
        draws come from (seed, epoch, batch, rank), so a resumed run replays them."""
        trainer = self.trainer
        if not self.augment or trainer is None or not trainer.training:
            return batch
        x, y = batch
        step = trainer.fit_loop.epoch_loop.batch_progress.current.ready
        gen = torch.Generator(x.device).manual_seed(
            derive_seed(self.seed, AUGMENT, trainer.current_epoch, step, trainer.global_rank)
        )
        return random_crop_flip(x, padding=max(1, self.image_shape[-1] // 8), flip=self.flips, generator=gen), y
