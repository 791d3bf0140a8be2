"""Frozen-feature probes: how good, and how shift-invariant, a network's *what* is.

The paper argues that splitting a pool's output into a what and a where makes the what
invariant (the where carries the position). Representation-learning work measures such
claims on frozen codes: a linear classifier and k nearest neighbours trained on a few
labelled codes, against raw pixels and the same network with random weights; and how much
a code moves when its input is shifted. This module does both on tensors, so that a script,
a callback or a notebook can use it:

    feats = {split: features(net, images[split]) for split in ("train", "val", "test")}
    idx = labelled_subset(train_y, 100, seed=0)            # the same for every model
    linear_probe(feats["train"][idx], train_y[idx], feats["val"], val_y, feats["test"], test_y)
    knn_probe(feats["train"][idx], train_y[idx], feats["test"], test_y, k=20)
    invariance(net, x, shifts=(1, 2, 3))                   # {"pixels": {1: .., 2: ..}, "stage_1": ...}

Pure torch, numpy and scikit-learn: no Lightning, no Hydra.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from sklearn.neighbors import KNeighborsClassifier
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits
from torch import Tensor, nn

from swwae.errors import ConfigError
from swwae.model import eval_mode
from swwae.splits import PROBE_LABELS, balanced_subset, generator

# inverse regularisation strengths tried by the linear probe; the validation split picks one
C_GRID = (1e-4, 1e-3, 1e-2, 1e-1, 1.0, 10.0)
DIRECTIONS = ((0, 1), (0, -1), (1, 0), (-1, 0))  # right, left, down, up

# helpers


def _float(images: Tensor) -> Tensor:
    return images.float().div(255.0) if images.dtype == torch.uint8 else images.float()


def _numpy(t) -> np.ndarray:
    return t.detach().cpu().numpy() if isinstance(t, Tensor) else np.asarray(t)


@torch.no_grad()
def features(net: nn.Module, images: Tensor, stages: str = "top", pooled: int = 2, batch_size: int = 500) -> Tensor:
    """Frozen features (N, D), float32, of ``images`` (uint8 or float in [0, 1]), in eval mode.

    ``stages="top"``: the top what, flattened, as the classifier head reads it.
    ``stages="all"``: every stage's what, average-pooled to ``pooled`` x ``pooled`` cells
    per channel (so that the large low stages do not drown the top one), concatenated.
    """
    if stages not in ("top", "all"):
        raise ConfigError(f"features: stages must be 'top' or 'all', got {stages!r}")
    weight = next(net.parameters())  # a network trained in float64 or bfloat16 takes its own dtype
    parts = []
    with eval_mode(net):
        for chunk in images.split(batch_size):
            whats = net.encode(_float(chunk).to(weight.device, weight.dtype))[0]
            if stages == "top":
                parts.append(whats[-1].flatten(1).float().cpu())
            else:
                parts.append(torch.cat([F.adaptive_avg_pool2d(w, pooled).flatten(1) for w in whats], 1).float().cpu())
    return torch.cat(parts)


def labelled_subset(y: Tensor, n: int | None, seed: int = 0, num_classes: int | None = None) -> Tensor:
    """Indices of ``n`` class-balanced samples of ``y`` (``None``: all of them), drawn from
    ``seed`` alone: the same subset for every model probed with that seed."""
    y = torch.as_tensor(y)
    if n is None or n >= len(y):
        if n is not None and n > len(y):
            raise ConfigError(f"--labels {n} is more than the {len(y)} labelled training images")
        return torch.arange(len(y))
    num_classes = num_classes or int(y.max()) + 1
    return balanced_subset(
        y, n, num_classes, generator(seed, PROBE_LABELS), "the probe's training images", setting="--labels"
    )


def random_like(net: nn.Module, seed: int = 0) -> nn.Module:
    """The same network, every layer re-initialised from ``seed`` (its default init, as a
    freshly built one gets): the random-weights control. The global RNG is left alone."""
    twin = copy.deepcopy(net)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in twin.modules():
            if module is not twin and callable(getattr(module, "reset_parameters", None)):
                module.reset_parameters()
            if callable(getattr(module, "reset_running_stats", None)):
                module.reset_running_stats()
    return twin.eval()


def shift(x: Tensor, dy: int, dx: int, fill: str = "zero") -> Tensor:
    """``x`` (..., H, W) translated by whole pixels, ``dy`` down and ``dx`` right. ``fill="zero"``:
    what moves in from the border is 0 and what leaves is lost; ``"wrap"``: circular."""
    if fill == "wrap":
        return torch.roll(x, shifts=(dy, dx), dims=(-2, -1))
    if fill != "zero":
        raise ConfigError(f"shift: fill must be 'zero' or 'wrap', got {fill!r}")
    h, w = x.shape[-2:]
    out = torch.zeros_like(x)
    if abs(dy) < h and abs(dx) < w:
        out[..., max(dy, 0) : h + min(dy, 0), max(dx, 0) : w + min(dx, 0)] = x[
            ..., max(-dy, 0) : h - max(dy, 0), max(-dx, 0) : w - max(dx, 0)
        ]
    return out


def relative_change(moved: Tensor, original: Tensor) -> Tensor:
    """||moved - original|| / ||original|| per sample (flattened); NaN where original is 0."""
    moved, original = moved.flatten(1).double(), original.flatten(1).double()
    norm = original.norm(dim=1)
    return (moved - original).norm(dim=1) / norm.where(norm > 0, torch.tensor(float("nan"), dtype=norm.dtype))


# probes


@dataclass
class LinearResult:
    acc: float  # test accuracy of the model the validation split picked
    C: float  # its inverse regularisation strength
    val_acc: float  # its validation accuracy


def linear_probe(train_x, train_y, val_x, val_y, test_x, test_y, grid=C_GRID, max_iter: int = 1000) -> LinearResult:
    """Multinomial logistic regression on standardised features (the scaler is fitted on the
    training features), its ``C`` chosen by validation accuracy (ties: the stronger
    regularisation); the test split is read once, by the chosen model."""
    train_x, val_x, test_x = _numpy(train_x), _numpy(val_x), _numpy(test_x)
    scaler = StandardScaler().fit(train_x)
    train_x, val_x = scaler.transform(train_x), scaler.transform(val_x)
    best, best_val = None, -1.0
    for C in sorted(grid):
        # one BLAS thread: these matrices are small, and threads that wait for a busy core
        # made each fit 10x slower on a shared 2-core machine (docs/analysis.md "Feature probes")
        with threadpool_limits(limits=1, user_api="blas"):
            model = LogisticRegression(C=C, max_iter=max_iter).fit(train_x, _numpy(train_y))
        val_acc = float((model.predict(val_x) == _numpy(val_y)).mean())
        if val_acc > best_val:
            best, best_val = model, val_acc
    acc = float((best.predict(scaler.transform(test_x)) == _numpy(test_y)).mean())
    return LinearResult(acc=acc, C=float(best.C), val_acc=best_val)


def knn_probe(train_x, train_y, test_x, test_y, k: int = 20) -> float:
    """Accuracy of a k-nearest-neighbour vote on cosine similarity, each neighbour weighted
    by 1 / distance (an exact match decides alone), as self-supervised work reports it."""
    model = KNeighborsClassifier(
        n_neighbors=min(k, len(train_x)), metric="cosine", weights="distance", algorithm="brute"
    )
    model.fit(_numpy(train_x), _numpy(train_y))
    return float((model.predict(_numpy(test_x)) == _numpy(test_y)).mean())


@torch.no_grad()
def invariance(net: nn.Module, x: Tensor, shifts=(1, 2, 3), fill: str = "zero") -> dict[str, dict[int, float]]:
    """How far each stage's what moves when the input is translated by whole pixels: the
    mean over images and the four directions (right, left, down, up) of
    ||f(shift(x)) - f(x)|| / ||f(x)||, for ``f`` = the image itself (``"pixels"``, the
    reference) and the what of every stage (``"stage_1"``, ...). 0: no change at all;
    a shift of 0 gives 0. Images whose code is all zeros are left out of that mean."""
    x = _float(x).to(next(net.parameters()).device)
    with eval_mode(net):
        base = [x, *net.encode(x)[0]]
        changes = {name: {} for name in ["pixels", *(f"stage_{i}" for i in range(1, len(base)))]}
        for s in shifts:
            per_code = [[] for _ in base]
            for dy, dx in DIRECTIONS:
                moved = shift(x, dy * s, dx * s, fill)
                for i, (m, b) in enumerate(zip([moved, *net.encode(moved)[0]], base)):
                    per_code[i].append(relative_change(m, b))
            for name, values in zip(changes, per_code):
                changes[name][int(s)] = float(torch.cat(values).nanmean())
    return changes


def label_key(n: int | None) -> str:
    return "all" if n is None else str(n)


def probe_features(
    train: tuple[Tensor, Tensor],
    val: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    subsets: dict[str, Tensor],
    k: int = 20,
    grid=C_GRID,
) -> dict[str, dict[str, float]]:
    """The linear and k-NN probes of one model's features, for every labelled subset of the
    training features (``subsets``: name -> indices, e.g. from [`labelled_subset`][swwae.probe.labelled_subset]):
    ``{"linear": {"100": acc, ...}, "linear_C": {...}, "knn": {...}}``. Every model given the
    same ``subsets`` is probed on the same labelled images."""
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = train, val, test
    result = {"linear": {}, "linear_C": {}, "knn": {}}
    for name, idx in subsets.items():
        linear = linear_probe(train_x[idx], train_y[idx], val_x, val_y, test_x, test_y, grid=grid)
        result["linear"][name], result["linear_C"][name] = linear.acc, linear.C
        result["knn"][name] = knn_probe(train_x[idx], train_y[idx], test_x, test_y, k=k)
    return result
