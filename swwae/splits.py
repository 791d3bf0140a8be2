"""Seeded random streams, stratified splits and class-balanced label subsets.

Every random choice about the data derives from one user seed through its own stream key,
so that changing one choice never moves another: changing ``num_labels`` must not move the
train/val/test split, and the shuffle order must not depend on either. Pure torch: the data
modules (``swwae.training.data``) and the feature probes (``swwae.probe``) both draw from here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torch import Tensor

from swwae.errors import ConfigError

__all__ = [
    "AUGMENT",
    "LABELLED_CYCLES",
    "LABELS",
    "PROBE_LABELS",
    "SHUFFLE",
    "SPLIT",
    "UNLABELLED_POOL",
    "balanced_subset",
    "derive_seed",
    "generator",
    "stratified_split",
]

# stream keys: independent random streams derived from one seed
SPLIT, LABELS, SHUFFLE, LABELLED_CYCLES, AUGMENT = 1, 2, 3, 4, 5
UNLABELLED_POOL = 6  # data.num_unlabelled: which label-hidden training images are kept
PROBE_LABELS = 7  # swwae.probe: the labelled subsets of the feature probes


def derive_seed(seed: int, *keys: int) -> int:
    """A 63-bit seed (torch's generators take signed 64-bit ones) for the stream ``keys`` of ``seed``."""
    state = int(np.random.SeedSequence([seed, *keys]).generate_state(1, np.uint64)[0])
    return state >> 1  # shifted as a Python int: NumPy 1.x has no uint64 >> int


def generator(seed: int, *keys: int) -> torch.Generator:
    return torch.Generator().manual_seed(derive_seed(seed, *keys))


def _proportional(counts: Tensor, total: int, gen: torch.Generator, keep: int = 0) -> Tensor:
    """Split ``total`` over classes in proportion to ``counts`` (largest remainder method;
    ties broken at random). Never gives a class more than it has less ``keep``: a rounded-up
    share that would take a class's last ``keep`` goes to the next class in line, so that
    where no class runs short the split is the plain method's (``total`` must leave room:
    at most ``counts.sum() - keep * len(counts)``)."""
    n = int(counts.sum())
    share, remainder = (counts * total) // n, (counts * total) % n  # each under counts: total < n
    left = total - int(share.sum())
    shuffled = torch.randperm(len(counts), generator=gen)
    order = shuffled[torch.sort(remainder[shuffled], descending=True, stable=True).indices]
    room = counts - keep - share
    while left:  # one more for each class in line that has one to spare, until none is left
        more = order[room[order] > 0][:left]
        if not len(more):
            raise ValueError(f"{total} of {n} samples leave no {keep} per class of {len(counts)}")
        share[more] += 1
        room[more] -= 1
        left -= len(more)
    return share


def stratified_split(y: Tensor, sizes: list[int], gen: torch.Generator) -> list[Tensor]:
    """Indices of disjoint subsets of sizes ``sizes``, plus one last subset with the rest.

    Each subset holds every class in proportion to its share of ``y`` (equal shares when
    the classes are equal). Every class keeps a sample for the last subset (the training
    split) where the sizes leave room for it: a class of one image (a folder of the user's)
    drawn for testing would never be trained on, and nothing would say so. Each subset comes
    back in random order, so that the first validation batch (the one that gets logged as
    images) shows a mix of classes.
    """
    classes = torch.unique(y)
    keep = int(sum(sizes) <= len(y) - len(classes))
    members = [torch.nonzero(y == c).flatten() for c in classes]
    members = [m[torch.randperm(len(m), generator=gen)] for m in members]
    left = torch.tensor([len(m) for m in members])
    taken = torch.zeros_like(left)
    parts = []
    for size in sizes:
        per_class = _proportional(left, size, gen, keep)
        parts.append(torch.cat([m[t : t + k] for m, t, k in zip(members, taken, per_class)]))
        taken += per_class
        left -= per_class
    parts.append(torch.cat([m[t:] for m, t in zip(members, taken)]))
    return [p[torch.randperm(len(p), generator=gen)] for p in parts]


def balanced_subset(
    y: Tensor,
    n: int,
    num_classes: int,
    gen: torch.Generator,
    where: str,
    setting: str = "data.num_labels",
    names: Sequence[str] = (),
) -> Tensor:
    """Indices of ``n`` samples, ``n // num_classes`` per class and the remainder on
    randomly chosen classes (only those that have a sample to spare). ``setting`` names the
    option that asked for ``n`` in the error messages, ``names`` the classes where they have
    names (a folder's class folders: "class 0" alone would leave the user to count them)."""
    per_class = torch.full((num_classes,), n // num_classes)
    counts = torch.bincount(y, minlength=num_classes)[:num_classes]
    short = torch.nonzero(counts < per_class).flatten()
    if len(short):
        c = int(short[0])
        raise ConfigError(
            f"{setting}={n} asks for {n // num_classes} labelled samples per class, "
            f"but class {c}{f' ({names[c]})' if names else ''} has only {int(counts[c])} training samples in {where}"
        )
    roomy = torch.nonzero(counts > per_class).flatten()
    extra = n % num_classes
    if extra > len(roomy):
        raise ConfigError(
            f"{setting}={n} needs {extra} classes with more than {n // num_classes} training samples, "
            f"but only {len(roomy)} classes of {where} have that many"
        )
    per_class[roomy[torch.randperm(len(roomy), generator=gen)[:extra]]] += 1
    chosen = []
    for c in range(num_classes):
        members = torch.nonzero(y == c).flatten()
        chosen.append(members[torch.randperm(len(members), generator=gen)[: per_class[c]]])
    return torch.cat(chosen)
