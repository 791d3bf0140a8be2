"""The training loss terms' epoch means, computed where the terms are and logged once an epoch.

Lightning's ``self.log(..., on_epoch=True)`` costs about 0.2-0.4 ms of host time a call (2 CPU
cores; it walks its accumulator's attributes to move it to the value's device, every call), and
the default network has four terms a step: on a GPU, where the default run's step is a few
milliseconds of kernel launches, that was host time the GPU waited for. ``TermMeans`` only keeps
each step's terms (the 0-d tensors themselves: no kernel, no host sync a step) and weighs and
sums them on their device in one go, every few hundred steps and at the epoch's end, for one
``self.log`` a term. ``ImageMean``: the evaluation loss's mean over a split, likewise.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import torch
from torch import Tensor
from torchmetrics import Metric


def stacked(steps: list[tuple[Tensor, ...]]) -> Tensor:
    """Steps' kept 0-d terms as one (steps, terms) float32 matrix on their device: one kernel."""
    return torch.stack([t for step in steps for t in step]).float().view(len(steps), -1)


class TermMeans:
    """Batch-size-weighted means over an epoch of named 0-d tensors (sum(value * batch) / sum(batch),
    as Lightning's epoch means), computed on their device when ``pop`` hands them back."""

    FOLD_EVERY = 256  # steps kept before they are summed into one vector (a long epoch holds no more)

    def __init__(self):
        self.names: tuple[str, ...] = ()
        self.steps: list[tuple[Tensor, ...]] = []
        self.batch_sizes: list[int] = []
        self.sums: Tensor | None = None  # of the steps folded so far: sum(value * batch)
        self.count = 0  # their samples

    def add(self, terms: Mapping[str, Tensor], batch_size: int) -> None:
        """Keep one step's ``terms`` (0-d tensors) over ``batch_size`` samples; no kernel, no host sync."""
        names = tuple(terms)
        if not names:
            return
        if self.steps and names != self.names:
            raise ValueError(f"the terms changed within an epoch: {', '.join(self.names)} then {', '.join(names)}")
        self.names = names
        self.steps.append(tuple(t.detach() for t in terms.values()))
        self.batch_sizes.append(batch_size)
        if len(self.steps) >= self.FOLD_EVERY:
            self._fold()

    def _fold(self) -> None:
        """The kept steps summed, weighted by their batch sizes, into ``sums`` on their device."""
        values = stacked(self.steps)
        # non_blocking: a copy from pageable memory that the host does not wait for the device to take
        weights = torch.tensor(self.batch_sizes, dtype=values.dtype).to(values.device, non_blocking=True)
        sums = (values * weights[:, None]).sum(0)
        self.sums = sums if self.sums is None else self.sums.to(sums.device).add_(sums)  # restored: on the host
        self.count += sum(self.batch_sizes)
        self.steps, self.batch_sizes = [], []

    def totals(self, every_process: Callable[[Tensor], Tensor] | None = None) -> dict | None:
        """The sums and samples so far (of every process, summed by ``every_process``) as plain
        numbers, kept: what a pre-empted epoch carries in its checkpoint, so that the epoch, continued,
        reports its means over all its batches, not over those after the restart (``restore``)."""
        if self.steps:
            self._fold()
        if self.sums is None:
            return None
        sums = torch.cat([self.sums, torch.tensor([self.count], dtype=self.sums.dtype, device=self.sums.device)])
        sums = (every_process(sums) if every_process is not None else sums).tolist()
        return {"names": list(self.names), "sums": sums[:-1], "count": sums[-1]}

    def restore(self, totals: dict) -> None:
        """Start from ``totals`` (``totals()``'s, parsed) instead of nothing; under DDP in one process
        only, since ``pop`` sums every process's."""
        self.names, self.steps, self.batch_sizes = tuple(totals["names"]), [], []
        self.sums, self.count = torch.tensor(totals["sums"], dtype=torch.float32), totals["count"]

    def pop(self, every_process: Callable[[Tensor], Tensor] | None = None) -> dict[str, Tensor]:
        """The means since the last ``pop`` (none when nothing was added), and a fresh start; no host
        sync. ``every_process(t)``: ``t`` summed over the DDP processes (each calls it at the same
        step): the means are then the means over every process's samples, as one process would
        have them, not a mean of the processes' means (whose last batches differ in size)."""
        if self.steps:
            self._fold()
        if self.sums is None:
            return {}
        sums, count = self.sums, self.count
        if every_process is not None:  # the samples beside the sums, copied as _fold's weights are
            counted = torch.tensor([count], dtype=sums.dtype).to(sums.device, non_blocking=True)
            totals = every_process(torch.cat([sums, counted]))
            sums, count = totals[:-1], totals[-1]
        means = sums / count
        self.sums, self.count = None, 0
        return dict(zip(self.names, means.unbind()))


class ImageMean(Metric):
    """The mean of per-batch values weighted by their images (the evaluation loss over a split), a
    metric as the others are: no host sync a batch (torchmetrics' MeanMetric checks each value for
    NaN, a read back from the GPU), and its sums reduced across DDP processes as sums. (Logged as a
    plain value, Lightning averages the processes' image counts as integers: truncated, the loss
    of an odd split on two processes came out 10% off, and a process without images divided by 0.)"""

    full_state_update = False

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("total", torch.zeros(()), dist_reduce_fx="sum")
        self.add_state("images", torch.zeros((), dtype=torch.long), dist_reduce_fx="sum")

    def update(self, value: Tensor, images: int) -> None:
        self.total += value.detach().float() * images
        self.images += images

    def compute(self) -> Tensor:
        return self.total / self.images


def float32_states(metric: Metric) -> None:
    """``metric``'s floating-point states, and the values it resets them to, back in float32. Lightning's
    ``bf16-true`` and ``16-true`` convert the whole LightningModule with ``.to(dtype)``, torchmetrics'
    states included (it guards ``.half()``, not ``.to``): a bfloat16 sum of squared errors or of losses
    keeps 8 bits, and an evaluation loss over 10,000 images of 0.1 each came out 0.125."""
    for name, default in metric._defaults.items():
        if isinstance(default, Tensor) and default.is_floating_point():
            metric._defaults[name] = default.float()
            setattr(metric, name, getattr(metric, name).float())
