"""The optimiser every training loop of the project builds: the job's, and the benchmarks'
hand-written twins, so that they compare loops and not optimisers. Pure torch."""

from __future__ import annotations

from collections.abc import Iterable

import torch


def adam(parameters: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0) -> torch.optim.Adam:
    """Adam; on CUDA torch's fused form (``fused=True``: the whole update one kernel a step,
    where the default multi-tensor form launches several, each host time that a small
    network's GPU step waits for). Elsewhere torch's default, the form the documented CPU
    results were trained with (fused changes the rounding, so a run's exact numbers)."""
    parameters = list(parameters)
    on_cuda = bool(parameters) and all(p.device.type == "cuda" for p in parameters)
    return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=True if on_cuda else None)
