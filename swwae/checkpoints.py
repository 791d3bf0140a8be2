"""Reading checkpoints back: the model and the run config, or one clear error."""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path

import torch

from swwae.errors import ConfigError
from swwae.module import SWWAEModule

UNREADABLE = (RuntimeError, EOFError, OSError, ValueError, pickle.UnpicklingError, zipfile.BadZipFile, KeyError)


def read_checkpoint(path) -> dict:
    """The checkpoint's dict, checked to be one that swwae's train.py wrote."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"checkpoint {path} does not exist")
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except UNREADABLE as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ConfigError(f"checkpoint {path} is unreadable (truncated or corrupt?): {reason}") from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint or "swwae_config" not in checkpoint:
        raise ConfigError(f"checkpoint {path} was not written by swwae's train.py (no state_dict or run config)")
    return checkpoint


def load_model(path) -> tuple[SWWAEModule, dict]:
    """(module in eval mode, the run config stored by ``SaveRunConfig``)."""
    checkpoint = read_checkpoint(path)
    try:
        module = SWWAEModule(**checkpoint["hyper_parameters"])
        module.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError, KeyError) as err:
        first = str(err).strip().splitlines()[0]
        raise ConfigError(f"checkpoint {path} does not fit swwae's model: {first}") from None
    return module.eval(), checkpoint["swwae_config"]
