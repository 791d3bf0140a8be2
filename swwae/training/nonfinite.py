"""Catching a non-finite loss without a host-device synchronisation every training step.

``if not torch.isfinite(loss)`` reads a value back from the device: on a GPU the host waits
for every queued kernel, at every step. ``LossWatch`` keeps its record on the loss's device
instead (a few tiny kernels a step, queued like the rest) and is read back only when asked:
the training module asks every ``log_every_n_steps`` steps (when Lightning reads its logged
values back anyway), at the end of every epoch and before anything is saved. The error still
names the first bad step and its values, even when it is raised a few steps later; those
steps only waste time: a checkpoint is never written after a non-finite loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import torch
from torch import Tensor

from swwae.errors import NonFiniteError

ADVICE = "lower model.lr or model.beta, or check the data"


class LossWatch:
    """The first training step whose loss terms were not all finite: its epoch, step and
    term values, held on the device until ``check`` reads them."""

    def __init__(self):
        self.names: tuple[str, ...] | None = None
        self.seen: Tensor | None = None  # bool: some recorded step was bad
        self.values: Tensor | None = None  # the terms of the first bad step
        self.epoch: Tensor | None = None
        self.step: Tensor | None = None

    def record(self, terms: Mapping[str, Tensor], epoch: int, step: int) -> None:
        """Note ``terms`` (the loss terms, 0-d tensors) of training step ``step``; no host sync."""
        names = tuple(terms)
        if names != self.names:  # the first step (or other terms): settle what came before
            self.check()
            self.names = names
            self.seen = self.values = self.epoch = self.step = None
        values = torch.stack([t.detach().reshape(()).float() for t in terms.values()])
        bad = values.isfinite().all().logical_not_()
        if self.seen is None:
            self.seen, self.values = bad, values
            self.epoch = torch.where(bad, epoch, -1)
            self.step = torch.where(bad, step, -1)
            return
        first = bad & ~self.seen
        self.values = torch.where(first, values, self.values)
        self.epoch = torch.where(first, epoch, self.epoch)
        self.step = torch.where(first, step, self.step)
        self.seen = self.seen | bad

    def check(self, any_process: Callable[[bool], bool] | None = None) -> None:
        """Raise ``NonFiniteError`` if a recorded step was bad (one read from the device).
        ``any_process(bad) -> bool``, with several processes: whether any of them saw one,
        so that they all stop at the same check (Lightning's ``reduce_boolean_decision``)."""
        bad = self.seen is not None and bool(self.seen)
        if any_process is not None and any_process(bad) and not bad:
            raise NonFiniteError(f"non-finite loss in another process; {ADVICE}")
        if not bad:
            return
        values = dict(zip(self.names, self.values.tolist()))
        shown = ", ".join(f"{name}={value}" for name, value in values.items() if not math.isfinite(value))
        raise NonFiniteError(
            f"non-finite loss in epoch {int(self.epoch) + 1}, step {int(self.step)}: {shown}; {ADVICE}"
        )
