"""The training loss terms' epoch means, summed where the terms are and logged once an epoch.

Lightning's ``self.log(..., on_epoch=True)`` costs about 0.2 ms of host time a call (2 CPU
cores; it walks its accumulator's attributes to move it to the value's device, every call), and
the default network logs four terms a step: on a GPU, where the default run's step is a few
milliseconds of kernel launches, that was host time the GPU waited for. ``TermMeans`` keeps one
small vector of sums on the terms' device instead (three tiny kernels a step, no host sync) and
hands back the means at the epoch's end, for one ``self.log`` each.
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor


class TermMeans:
    """Batch-size-weighted means over an epoch of named 0-d tensors (sum(value * batch) / sum(batch),
    as Lightning's epoch means), summed on their device until ``pop`` hands them back."""

    def __init__(self):
        self.names: tuple[str, ...] = ()
        self.sums: Tensor | None = None
        self.count = 0

    def add(self, terms: Mapping[str, Tensor], batch_size: int) -> None:
        """Add one step's ``terms`` (0-d tensors) over ``batch_size`` samples; no host sync."""
        names = tuple(terms)
        if not names:
            return
        if self.sums is not None and names != self.names:
            raise ValueError(f"the terms changed within an epoch: {', '.join(self.names)} then {', '.join(names)}")
        values = torch.stack([t.detach().reshape(()).float() for t in terms.values()]).mul_(batch_size)
        self.names = names
        self.sums = values if self.sums is None else self.sums.add_(values)
        self.count += batch_size

    def pop(self) -> dict[str, Tensor]:
        """The means since the last ``pop`` (none when nothing was added), and a fresh start."""
        if self.sums is None or not self.count:
            return {}
        means = dict(zip(self.names, (self.sums / self.count).unbind()))
        self.sums, self.count = None, 0
        return means
