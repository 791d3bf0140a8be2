"""Catching a non-finite loss without a host-device synchronisation every training step.

``if not torch.isfinite(loss)`` reads a value back from the device: on a GPU the host waits
for every queued kernel, at every step. ``LossWatch`` only keeps each step's loss terms (the
0-d tensors themselves, no kernel a step) and reads them back when asked, all at once: the
training module asks every ``log_every_n_steps`` steps (when Lightning reads its logged values
back anyway), at the end of every epoch and before anything is saved. The error still names
the first bad step and its values, even when it is raised a few steps later; those steps only
waste time: a checkpoint is never written after a non-finite loss.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from torch import Tensor

from swwae.errors import NonFiniteError
from swwae.training.term_means import stacked

ADVICE = "lower model.lr or model.beta, or check the data"


class LossWatch:
    """The first training step whose loss terms were not all finite: its epoch, step and term
    values, found among the steps recorded since the last ``check`` when it reads them back."""

    def __init__(self):
        self.names: tuple[str, ...] | None = None
        self.pending: list[tuple[Tensor, ...]] = []  # the terms of each step since the last check
        self.steps: list[tuple[int, int]] = []  # and its (epoch, step)
        self.first_bad: tuple[int, int, dict[str, float]] | None = None  # kept: every later check raises

    def record(self, terms: Mapping[str, Tensor], epoch: int, step: int) -> None:
        """Note ``terms`` (the loss terms, 0-d tensors) of training step ``step``; no host sync, no kernel."""
        names = tuple(terms)
        if names != self.names:  # the first step (or other terms): settle what came before
            self.check()
            self.names = names
        self.pending.append(tuple(t.detach() for t in terms.values()))
        self.steps.append((epoch, step))

    def _read_back(self) -> None:
        """The pending steps' terms in one read from the device; the first bad step kept."""
        pending, steps = self.pending, self.steps
        self.pending, self.steps = [], []
        if not pending or self.first_bad is not None:
            return
        values = stacked(pending)
        if bool(values.isfinite().all()):  # the one read from the device, as a rule
            return
        for (epoch, step), row in zip(steps, values.tolist()):
            if not all(map(math.isfinite, row)):
                self.first_bad = epoch, step, dict(zip(self.names, row))
                return

    def check(self, any_process: Callable[[bool], bool] | None = None) -> None:
        """Raise ``NonFiniteError`` if a recorded step was bad (one read from the device).
        ``any_process(bad) -> bool``, with several processes: whether any of them saw one,
        so that they all stop at the same check (Lightning's ``reduce_boolean_decision``)."""
        self._read_back()
        bad = self.first_bad is not None
        if any_process is not None and any_process(bad) and not bad:
            raise NonFiniteError(f"non-finite loss in another process; {ADVICE}")
        if not bad:
            return
        epoch, step, values = self.first_bad
        shown = ", ".join(f"{name}={value}" for name, value in values.items() if not math.isfinite(value))
        raise NonFiniteError(f"non-finite loss in epoch {epoch + 1}, step {step}: {shown}; {ADVICE}")
