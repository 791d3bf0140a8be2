"""The optimiser every training loop of the project builds: the job's, and the benchmarks'
hand-written twins, so that they compare loops and not optimisers. Pure torch."""

from __future__ import annotations

from collections.abc import Iterable

import torch

# where adam is fused (the tests add "cpu", where torch fuses Adam too, to run the CUDA path)
FUSED_DEVICES = ("cuda",)


def adam(
    parameters: Iterable[torch.nn.Parameter], lr: float, weight_decay: float = 0.0, fused: bool = True
) -> torch.optim.Adam:
    """Adam; on CUDA torch's fused form (``fused=True``: the whole update one kernel a step,
    where the default multi-tensor form launches several, each host time that a small
    network's GPU step waits for). Elsewhere torch's default, the form the documented CPU
    results were trained with (fused changes the rounding, so a run's exact numbers).
    ``fused=False``: torch's default on CUDA too (a fused Adam unscales a grad scaler's gradients
    in its own step, after any clipping: Lightning refuses to clip them for it)."""
    parameters = list(parameters)
    on_device = fused and bool(parameters) and all(p.device.type in FUSED_DEVICES for p in parameters)
    return torch.optim.Adam(parameters, lr=lr, weight_decay=weight_decay, fused=True if on_device else None)
