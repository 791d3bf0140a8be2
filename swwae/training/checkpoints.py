"""Checkpoints back into training: the LightningModule and the run config of a checkpoint, which
checkpoint ``resume=true`` continues from, and whether it fits the current config. Every file
is read by ``swwae.checkpoint_file.read_checkpoint`` (weights only, checksum checked)."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path

from swwae.checkpoint_file import read_checkpoint
from swwae.errors import CheckpointError, one_line
from swwae.model import SWWAE
from swwae.training.checkpoint_io import remove_stale_temp_files
from swwae.training.module import SWWAEModule
from swwae.training.registry import plain_settings

log = logging.getLogger(__name__)

# data settings that say where the files are or how they are read, not what is trained on
DATA_KEYS_FREE_TO_CHANGE = ("root", "download", "num_workers")

# helpers


def _plain(value):
    """Tuples and lists compare equal (hparams come back from a checkpoint as either)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def config_differences(saved: dict, current: dict, ignore=(), prefix: str = "") -> list[str]:
    """``<prefix>key: <saved> -> <current>`` for every setting that differs."""
    missing = "<unset>"
    keys = sorted((set(saved) | set(current)) - set(ignore))
    return [
        f"{prefix}{k}: {_plain(saved.get(k, missing))} -> {_plain(current.get(k, missing))}"
        for k in keys
        if _plain(saved.get(k, missing)) != _plain(current.get(k, missing))
    ]


# reading


def load_model(path) -> tuple[SWWAEModule, dict]:
    """(module in eval mode, the run config stored by ``SaveRunConfig``)."""
    checkpoint = read_checkpoint(path)
    settings = plain_settings(checkpoint["hyper_parameters"], "model", f"checkpoint {path}")
    try:
        module = SWWAEModule(**settings)
        module.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError, KeyError) as err:
        raise CheckpointError(f"checkpoint {path} does not fit swwae's model: {one_line(err, limit=200)}") from None
    return module.eval(), checkpoint["swwae_config"]


# resuming


def module_defaults(module) -> dict:
    """The default of every setting of the module and its network."""
    signatures = [inspect.signature(type(module).__init__), inspect.signature(SWWAE)]
    return {name: p.default for sig in signatures for name, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty}


def resume_candidates(folder) -> list[Path]:
    """``last.ckpt``, ``best.ckpt``, then any other ``*.ckpt``, newest first."""
    folder = Path(folder)
    named = [folder / "last.ckpt", folder / "best.ckpt"]
    others = sorted((p for p in folder.glob("*.ckpt") if p not in named), key=lambda p: p.stat().st_mtime, reverse=True)
    return [p for p in named if p.is_file()] + others


def newest_readable(folder) -> tuple[Path | None, dict | None, list[str]]:
    """(path, checkpoint) of the first of ``resume_candidates`` that reads back as an swwae
    checkpoint, or (None, None); and ``name: reason`` for each one passed over."""
    skipped = []
    for path in resume_candidates(folder) if Path(folder).is_dir() else []:
        try:
            return path, read_checkpoint(path), skipped
        except CheckpointError as err:
            skipped.append(f"{path.name}: {err}")
    return None, None, skipped


def pick_resume_checkpoint(folder) -> tuple[Path, dict] | None:
    """What ``resume=true`` continues from: ``newest_readable``, with a warning for each
    checkpoint passed over; ``None`` if the folder holds no checkpoint at all; CheckpointError
    (one line) if it holds some and none of them reads back."""
    folder = Path(folder)
    if not folder.is_dir():
        return None
    for stale in remove_stale_temp_files(folder):
        log.warning("removed %s, left by a save that was interrupted", stale)
    path, checkpoint, skipped = newest_readable(folder)
    for reason in skipped:
        log.warning("cannot resume from %s", reason)
    if path is None and skipped:
        raise CheckpointError(
            f"resume=true but no checkpoint in {folder} reads back ({'; '.join(skipped)}): "
            f"resume=false starts the run over (the old folder is moved aside, not deleted)"
        )
    if path is not None and skipped:
        log.warning("resuming from %s (epoch %s) instead", path, checkpoint.get("epoch"))
    return None if path is None else (path, checkpoint)


def check_resumable(path: Path, checkpoint: dict, module, datamodule=None, advice: str | None = None) -> None:
    """CheckpointError (one line) unless ``checkpoint`` was trained with the current model and
    data config: resuming it would fail in ``load_state_dict``, or silently train on. Settings
    the checkpoint predates (added to the model since) count as their defaults."""
    advice = ": use another run_name or resume=false" if advice is None else advice
    current = dict(module.hparams)
    defaults = {k: v for k, v in module_defaults(module).items() if k in current}
    diffs = config_differences(defaults | dict(checkpoint["hyper_parameters"]), current, prefix="model.")
    if diffs:
        shown = "; ".join(diffs[:4]) + ("; ..." if len(diffs) > 4 else "")
        raise CheckpointError(f"{path} was trained with a different model config ({shown}){advice}")
    saved_data = checkpoint.get("datamodule_hyper_parameters")
    current_data = dict(getattr(datamodule, "hparams", {}) or {})
    if saved_data is not None and current_data:
        diffs = config_differences(saved_data, current_data, ignore=DATA_KEYS_FREE_TO_CHANGE, prefix="data.")
        if diffs:
            shown = "; ".join(diffs[:4]) + ("; ..." if len(diffs) > 4 else "")
            raise CheckpointError(f"{path} was trained with a different data config ({shown}){advice}")
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
    if expected != saved:
        wrong = sorted(k for k in expected.keys() | saved.keys() if expected.get(k) != saved.get(k))
        raise CheckpointError(
            f"{path} does not fit the current model ({len(wrong)} tensors differ, e.g. {wrong[0]}: "
            f"{saved.get(wrong[0], 'missing')} there, {expected.get(wrong[0], 'missing')} now){advice}"
        )
