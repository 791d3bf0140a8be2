"""Whole batches from in-memory tensors: no per-sample calls, no collate.

A sampler hands out one *batch of indices* at a time and the dataset answers it with one
gather, ``(x[idx], y[idx])``, uint8 images turned to float in [0, 1] batch by batch. The batch
sampler sits in the DataLoader's ``sampler`` slot (``batch_size=None``). Under DDP the training
batches are dealt out to the ranks whole by :class:`DealtBatches`, and each rank evaluates its own
part of a validation or test split by :class:`EvaluationShare`, every image once; Lightning leaves
both in place.

Every order is a pure function of (seed, epoch), and each rank's share of it of (seed, epoch,
rank): Lightning calls ``set_epoch`` before each training epoch, so a resumed run, DDP or not,
replays exactly the batches of an uninterrupted one.

Semi-supervised batches (:class:`LabelledBatchSampler`) hold a fixed number of labelled
samples each, cycled through the labelled subset, and label-hidden samples for the rest.

Data kept on a GPU (``data.on_device``) is gathered there: a batch sampler with a ``device``
makes each epoch's order on the host as always, copies it to the device once (pinned, without
waiting), and hands out slices of it, so that no step waits for the host or copies a batch, and
the batches are those of the host's path, in the same order.
"""

from __future__ import annotations

import itertools
import math
from typing import NamedTuple

import torch
from torch import Tensor
from torch.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    DistributedSampler,
    RandomSampler,
    Sampler,
    SequentialSampler,
)

from swwae.loss import UNLABELLED
from swwae.splits import LABELLED_CYCLES, SHUFFLE, derive_seed, generator


def to_float(x: Tensor) -> Tensor:
    """uint8 images (as stored) -> float32 in [0, 1]; float images pass through."""
    return x.float().div_(255.0) if x.dtype == torch.uint8 else x


def to_device(indices: Tensor, device: torch.device) -> Tensor:
    """``indices`` on ``device``; to a GPU through pinned memory, without waiting for it (the
    caching host allocator keeps the pinned block until the copy is done)."""
    if device.type == "cpu":
        return indices
    if device.type == "cuda":
        return indices.pin_memory().to(device, non_blocking=True)
    return indices.to(device)


class SemiSupervisedBatch(NamedTuple):
    """One batch of a :class:`LabelledBatchSampler`: indices whose labels it keeps, then
    indices whose labels it hides."""

    labelled: list[int]
    unlabelled: list[int]


class BatchTensorDataset(Dataset):
    """Tensors indexed by a whole batch of indices at once.

    ``dataset[[i, j, ...]]`` is one gather (``index_select`` copies whole rows: ~4x faster
    than ``x[idx]`` on CPU); ``dataset[SemiSupervisedBatch(...)]`` is the same with the
    labels of the second part set to ``UNLABELLED``.
    """

    def __init__(self, x: Tensor, y: Tensor) -> None:
        if len(x) != len(y):
            raise ValueError(f"x has {len(x)} samples but y has {len(y)}")
        self.x, self.y = x, y

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, idx) -> tuple[Tensor, Tensor]:
        if isinstance(idx, SemiSupervisedBatch):
            labelled, unlabelled = (torch.as_tensor(i, dtype=torch.long, device=self.x.device) for i in idx)
            x = self.x.index_select(0, torch.cat([labelled, unlabelled]))
            y = torch.cat([self.y.index_select(0, labelled), self.y.new_full((len(unlabelled),), UNLABELLED)])
            return to_float(x), y
        if isinstance(idx, Tensor) and idx.dim() == 1 and idx.device == self.x.device:  # a batch sampler's, there
            return to_float(self.x.index_select(0, idx)), self.y.index_select(0, idx)
        idx = torch.as_tensor(idx, dtype=torch.long, device=self.x.device)
        if idx.dim() != 1 or (len(idx) and int(idx.min()) < 0):  # one sample, or negative indices
            return to_float(self.x[idx]), self.y[idx]
        return to_float(self.x.index_select(0, idx)), self.y.index_select(0, idx)


class EpochRandomSampler(RandomSampler):
    """A RandomSampler whose order in epoch ``e`` is a pure function of ``(seed, e)``.

    Every DDP rank draws the *same* permutation, which Lightning's wrapper then shards
    without overlap. Iterated outside Lightning without ``set_epoch``, the generator simply
    moves on: each pass is still a new, reproducible order.
    """

    def __init__(self, data_source: Dataset, seed: int) -> None:
        super().__init__(data_source, generator=torch.Generator())
        self.seed = seed
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.generator.manual_seed(derive_seed(self.seed, SHUFFLE, epoch))


class ResumesMidEpoch:
    """A batch sampler that can start one epoch after its first ``batches`` batches: a run
    stopped mid-epoch (pre-emption) continues where it was, on the batches it would have seen
    (each batch is a pure function of (seed, epoch), so skipping is exact). ``len`` stays the
    whole epoch's: Lightning counts the skipped batches as done."""

    epoch = 0
    _resume: tuple[int, int] | None = None

    def resume_at(self, epoch: int, batches: int) -> None:
        self._resume = (int(epoch), int(batches))

    def _skipping(self, epoch: int, batches):
        if self._resume is not None and self._resume[0] == epoch:
            skip, self._resume = self._resume[1], None
            return itertools.islice(batches, skip, None)
        return batches


class EpochBatchSampler(ResumesMidEpoch, BatchSampler):
    """A BatchSampler that forwards ``set_epoch`` to the sampler it batches; with a ``device``,
    its batches are index tensors there (the same indices, one copy an epoch)."""

    device: torch.device | None = None

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        if callable(getattr(self.sampler, "set_epoch", None)):
            self.sampler.set_epoch(epoch)

    def __iter__(self):  # a generator: the epoch is read at the first batch, after Lightning's set_epoch
        epoch = self.epoch
        self.epoch += 1  # without set_epoch, the next pass moves on (as the sampler does)
        yield from self._skipping(epoch, super().__iter__() if self.device is None else self._on_device())

    def _on_device(self):
        order = to_device(torch.tensor(list(self.sampler), dtype=torch.long), self.device)
        for batch in order.split(self.batch_size):
            if len(batch) == self.batch_size or not self.drop_last:
                yield batch


class LabelledBatchSampler(ResumesMidEpoch, Sampler):
    """Semi-supervised batches: ``labelled_per_batch`` labelled samples in *every* batch, the
    rest of the batch label-hidden samples.

    The label-hidden part is a shuffled pass over all ``num_samples`` training samples (their
    labels hidden, labelled ones included, as the paper's 60,000 unlabelled MNIST digits
    include its labelled ones): that pass is one epoch, whatever the number of labels. The
    labelled part is one endless stream through the ``labelled`` indices in reshuffled
    cycles, so every label is seen equally often per cycle; epoch ``e`` starts at position
    ``e * len(self) * labelled_per_batch`` of that stream, and cycle ``c`` is ordered by
    (seed, c) alone. So every batch is a pure function of (seed, epoch).

    Drawn at random from the whole split, a batch of 128 holds 128 * 100 / 4000 ~ 3
    labelled samples at 100 labels out of 4,000, and the classifier sees a label once an
    epoch, on batches of 0 to 3 samples.
    """

    device: torch.device | None = None  # set: each batch's two parts are index tensors there

    def __init__(self, num_samples: int, labelled: Tensor, batch_size: int, labelled_per_batch: int, seed: int = 0):
        if not 1 <= labelled_per_batch < batch_size:
            raise ValueError(f"labelled_per_batch must be in 1..{batch_size - 1}, got {labelled_per_batch}")
        if len(labelled) < 1 or num_samples < 1:
            raise ValueError("a semi-supervised batch needs labelled and unlabelled samples")
        self.num_samples, self.labelled = num_samples, torch.as_tensor(labelled, dtype=torch.long)
        self.labelled_per_batch, self.unlabelled_per_batch = labelled_per_batch, batch_size - labelled_per_batch
        self.seed, self.epoch = seed, 0

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.unlabelled_per_batch)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch

    def labelled_stream(self, start: int, count: int) -> Tensor:
        """Positions ``start .. start + count - 1`` of the endless stream of labelled indices."""
        n = len(self.labelled)
        parts = []
        for cycle in range(start // n, (start + count - 1) // n + 1):
            order = self.labelled[torch.randperm(n, generator=generator(self.seed, LABELLED_CYCLES, cycle))]
            lo, hi = max(start - cycle * n, 0), min(start + count - cycle * n, n)
            parts.append(order[lo:hi])
        return torch.cat(parts)

    def __iter__(self):
        epoch, self.epoch = self.epoch, self.epoch + 1  # without set_epoch, the next pass moves on
        k, batches = self.labelled_per_batch, len(self)
        hidden = torch.randperm(self.num_samples, generator=generator(self.seed, SHUFFLE, epoch))
        labelled = self.labelled_stream(epoch * batches * k, batches * k)
        if self.device is not None:  # one copy of both orders, then slices of them
            both = to_device(torch.cat([labelled, hidden]), self.device)
            labelled, hidden = both[: len(labelled)], both[len(labelled) :]
        listed = Tensor.tolist if self.device is None else (lambda t: t)
        batches = (
            SemiSupervisedBatch(listed(labelled[b * k : (b + 1) * k]), listed(chunk))
            for b, chunk in enumerate(hidden.split(self.unlabelled_per_batch))
        )
        yield from self._skipping(epoch, batches)


class DealtBatches(ResumesMidEpoch, DistributedSampler):
    """One DDP rank's share of each epoch's batches, whole: batches ``rank``, ``rank + W``, ... of
    the batch sampler's order (``W`` ranks; where ``W`` does not divide them, the first batches
    again, as DistributedSampler pads, so that every rank steps as often). A share is so a pure
    function of (seed, epoch, rank), and a pre-empted epoch resumes on each rank after the batches
    that rank had trained (``resume_at``, its own count).

    A DistributedSampler, so that Lightning leaves it in the loader instead of wrapping the batch
    sampler in its DistributedSamplerWrapper, which deals the batches in a shuffled order of its
    own (no rank could skip what it had trained) and forwards ``set_epoch`` to the batch sampler
    only from Lightning 2.6.1 on (before, every resumed run took epoch 0's order)."""

    def __init__(self, batches: ResumesMidEpoch, num_replicas: int, rank: int) -> None:
        super().__init__(batches, num_replicas=num_replicas, rank=rank, shuffle=False)  # batches: sized
        self.batches = batches

    def __iter__(self):  # a generator: the epoch is read at the first batch, after Lightning's set_epoch
        epoch = self.epoch  # (on a restart, Lightning makes the iterator before it sets the epoch)
        self.batches.set_epoch(epoch)
        every = list(self.batches)
        every = (every * math.ceil(self.total_size / len(every)))[: self.total_size]
        yield from self._skipping(epoch, iter(every[self.rank :: self.num_replicas]))


class EvaluationShare(DistributedSampler):
    """One DDP rank's share of an evaluation split, in order, each image evaluated by one rank once:
    the split cut into ``W * ceil(ceil(n / batch_size) / W)`` batches of near-equal size (``W``
    ranks), batches ``rank``, ``rank + W``, ... of them. Every rank so evaluates as many batches,
    none bigger than ``batch_size``, and the metrics reduced across the ranks are the split's own.
    Lightning's DistributedSampler evens the ranks out with images again instead: a test split
    of 500 images in batches of 200 under two processes counted one batch twice, and so did the
    validation metric that picks best.ckpt. (A split smaller than ``W`` leaves some ranks an empty
    batch, so that they still meet the others where the metrics are reduced.)"""

    def __init__(self, size: int, batch_size: int, num_replicas: int, rank: int, device=None) -> None:
        super().__init__(range(size), num_replicas=num_replicas, rank=rank, shuffle=False)
        batches = num_replicas * math.ceil(math.ceil(size / batch_size) / num_replicas)
        self.share = torch.arange(size).tensor_split(max(batches, num_replicas))[rank::num_replicas]
        self.device = device

    def __len__(self) -> int:
        return len(self.share)

    def __iter__(self):
        if self.device is None:
            return iter([batch.tolist() for batch in self.share])
        return iter(to_device(torch.cat(self.share), self.device).split([len(b) for b in self.share]))


def batch_loader(
    x: Tensor,
    y: Tensor,
    batch_size: int,
    shuffle: bool,
    seed: int = 0,
    num_workers: int = 0,
    sampler: Sampler | None = None,
    device: torch.device | None = None,
    ranks: tuple[int, int] = (0, 1),
) -> DataLoader:
    """A DataLoader of whole batches gathered from in-memory tensors: shuffled (by (seed,
    epoch)) or in order, or as ``sampler`` says. The last batch may be smaller. With a
    ``device`` (the tensors' own: ``data.on_device``), by index tensors there. ``ranks``, (rank,
    number of ranks): that rank's share of the batches (:class:`DealtBatches`), or in order (not
    ``shuffle``: an evaluation split), of the images (:class:`EvaluationShare`)."""
    dataset = BatchTensorDataset(x, y)
    if device is not None and x.device != device:
        raise ValueError(f"the batches are gathered where the images are ({x.device}), not on {device}")
    if sampler is None and not shuffle and ranks[1] > 1:  # an evaluation split: each image once
        sampler = EvaluationShare(len(dataset), batch_size, ranks[1], ranks[0], device)
    else:
        if sampler is None:
            order = EpochRandomSampler(dataset, seed) if shuffle else SequentialSampler(dataset)
            sampler = EpochBatchSampler(order, batch_size=batch_size, drop_last=False)
        if device is not None:
            sampler.device = device
        if ranks[1] > 1:
            sampler = DealtBatches(sampler, num_replicas=ranks[1], rank=ranks[0])
    return DataLoader(
        dataset, sampler=sampler, batch_size=None, num_workers=num_workers, persistent_workers=num_workers > 0
    )
