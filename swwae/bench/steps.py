"""One training step for the benchmark scripts, as Lightning's automatic optimisation takes it
(zero the grads, forward and loss, backward, Adam step), at one of Lightning's precisions:
``32-true``; ``bf16-mixed`` (autocast to bfloat16); ``16-mixed`` (autocast to float16, and a
grad scaler, which reads its overflow flag back from the device every step, as Lightning's
does). Pure torch: the loss is any callable."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import torch
from torch import Tensor

from swwae.optim import adam

AUTOCAST = {"32-true": None, "bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}
PRECISIONS = tuple(AUTOCAST)


def training_step(
    loss: Callable[[], Tensor],
    parameters: Iterable[torch.nn.Parameter],
    *,
    lr: float,
    device: torch.device | str = "cpu",
    precision: str = "32-true",
) -> Callable[[], Tensor]:
    """A function taking one step on ``loss()`` and returning it."""
    if precision not in AUTOCAST:
        raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    device_type, dtype = torch.device(device).type, AUTOCAST[precision]
    optimizer = adam(parameters, lr)  # the job's (swwae.optim)
    scaler = torch.amp.GradScaler(device_type) if precision == "16-mixed" else None

    def step() -> Tensor:
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type, dtype=dtype, enabled=dtype is not None):
            value = loss()
        if scaler is None:
            value.backward()
            optimizer.step()
        else:
            scaler.scale(value).backward()
            scaler.step(optimizer)
            scaler.update()
        return value

    return step
