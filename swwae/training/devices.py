"""The devices a run asks for, against those the machine has: one line before any data is read.

Lightning finds out late, and says it in its own words (``MisconfigurationException('No
supported gpu backend found!')`` for ``trainer=gpu`` without a GPU); the job calls
:func:`check_devices` with its other checks, so the user reads what was asked and what is
there, and how to ask for what is. Only what can be known from torch is checked: a CUDA GPU
(``gpu``, ``cuda``) or Apple's MPS asked for, and how many. ``auto`` takes what there is, and
CPU runs may ask for several processes; other accelerators are Lightning's to judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from swwae.errors import ConfigError

CUDA = ("gpu", "cuda")
EVERY = (-1, "-1", "auto", None)  # Lightning's "every device there is"


def cuda_count() -> int:
    import torch  # only when a GPU is asked for: a CPU run's checks load no torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def mps_available() -> bool:
    import torch

    mps = getattr(torch.backends, "mps", None)
    return bool(mps is not None and mps.is_available())


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def wanted_indices(devices) -> list[int] | None:
    """The device indices that ``devices`` names (``[0, 2]``, ``"0,2"``), or None if it is a
    count or "every device"."""
    if isinstance(devices, str) and "," in devices:
        return [int(part) for part in devices.split(",") if part.strip()]
    if isinstance(devices, Sequence) and not isinstance(devices, str):
        return [int(d) for d in devices]
    return None


def wanted_count(devices) -> int | None:
    """How many devices ``devices`` asks for, or None for "every device" (or a form Lightning judges)."""
    if devices in EVERY or isinstance(devices, bool):
        return None
    if isinstance(devices, int):
        return devices
    if isinstance(devices, str) and devices.strip().isdigit():
        return int(devices)
    return None


def check_cuda(devices) -> None:
    have = cuda_count()
    if have == 0:
        raise ConfigError(
            "trainer.accelerator=gpu asks for a CUDA GPU, and this machine has none "
            "(torch.cuda.is_available() is False): train on the CPU with trainer=default "
            "(or trainer.accelerator=auto, which uses a GPU where there is one)"
        )
    indices = wanted_indices(devices)
    if indices is not None:
        missing = [i for i in indices if not 0 <= i < have]
        if missing:
            raise ConfigError(
                f"trainer.devices={devices} names GPU {', '.join(map(str, missing))}, and this machine "
                f"has {plural(have, 'CUDA GPU')} (indices 0..{have - 1})"
            )
        return
    count = wanted_count(devices)
    if count is not None and count > have:
        raise ConfigError(
            f"trainer.devices={devices} asks for {plural(count, 'CUDA GPU')}, and this machine has "
            f"{have}: trainer.devices={have} (or -1: every GPU there is)"
        )


def check_devices(trainer_cfg: Mapping) -> None:
    """A ``ConfigError`` naming what ``trainer`` asks for and what the machine has, if the
    machine has less; nothing otherwise."""
    accelerator = str(trainer_cfg.get("accelerator") or "auto").lower()
    devices = trainer_cfg.get("devices", "auto")
    if accelerator in CUDA:
        check_cuda(devices)
    elif accelerator == "mps" and not mps_available():
        cuda = cuda_count()
        instead = f"trainer=gpu (this machine has {plural(cuda, 'CUDA GPU')})" if cuda else "trainer=default (the CPU)"
        raise ConfigError(
            "trainer.accelerator=mps asks for Apple's MPS GPU, and this machine has none "
            f"(torch.backends.mps.is_available() is False; MPS is macOS on Apple silicon): "
            f"train with {instead}"
        )
