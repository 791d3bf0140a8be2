"""Checkpoints back into the job: the LightningModule and the run config of a checkpoint, and
whether a checkpoint's tensors fit the current model. Every file is read by
``swwae.checkpoint_file.read_checkpoint`` (weights only, checksum checked); which checkpoint a
run continues from is the run folder's decision (``swwae.training.runs``)."""

from __future__ import annotations

import logging
from pathlib import Path

from swwae.checkpoint_file import read_checkpoint
from swwae.errors import CheckpointError, one_line
from swwae.pretrained import check_shapes as check_settings_fit
from swwae.pretrained import meta_shapes
from swwae.training.module import SWWAEModule
from swwae.training.registry import plain_settings

log = logging.getLogger(__name__)

# reading


def load_model(path) -> tuple[SWWAEModule, dict]:
    """(module in eval mode, the run config stored by ``SaveRunConfig``)."""
    checkpoint = read_checkpoint(path)
    settings = plain_settings(checkpoint["hyper_parameters"], "model", f"checkpoint {path}")
    try:
        expected = meta_shapes(lambda: SWWAEModule(**settings))
    except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
        raise CheckpointError(f"checkpoint {path} does not fit swwae's model: {one_line(err, limit=200)}") from None
    check_settings_fit(expected, {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}, f"checkpoint {path}")
    try:
        module = SWWAEModule(**settings)
        module.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:
        raise CheckpointError(f"checkpoint {path} does not fit swwae's model: {one_line(err, limit=200)}") from None
    return module.eval(), checkpoint["swwae_config"]


# resuming


def check_fits_model(path: Path, checkpoint: dict, module) -> None:
    """CheckpointError (one line) unless the checkpoint's tensors have the current model's
    shapes: the last guard before Lightning loads them, for a run of the same identity written
    by a version of swwae whose network was laid out otherwise."""
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
    if expected != saved:
        wrong = sorted(k for k in expected.keys() | saved.keys() if expected.get(k) != saved.get(k))
        raise CheckpointError(
            f"{path} does not fit the current model ({len(wrong)} tensors differ, e.g. {wrong[0]}: "
            f"{saved.get(wrong[0], 'missing')} there, {expected.get(wrong[0], 'missing')} now): use another "
            "run_name, or resume=false to start over"
        )
