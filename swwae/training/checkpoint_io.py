"""Checkpoint files that are either the old one or the new one, never half of either, carry
their content checksum, and are read back only through the one safe reader.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction: a temp file in the
system temp folder, then ``shutil.move`` (a copy when that folder is on another disk) and
no fsync, so a kill or a power cut during a save can leave a truncated ``last.ckpt``.
Here the bytes go to a temp file *in the checkpoint's own folder*, are fsynced, and
``os.replace`` swaps it in (atomic on POSIX and Windows); the folder is fsynced too, so
the rename itself survives a crash. A kill mid-save leaves at most a stray
``.<name>.tmp-*`` file, which ``remove_stale_temp_files`` clears and no reader ever opens.

``AtomicCheckpointIO`` is the Trainer's CheckpointIO plugin (``swwae.training.run``): every
save gets ``swwae_checksum``, and every load Lightning makes (``ckpt_path=`` of fit, validate
and test) goes through ``swwae.checkpoint_file.read_checkpoint``: weights only, whatever
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says, checksum checked.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import TorchCheckpointIO

from swwae.checkpoint_file import read_checkpoint, verified, with_checksum
from swwae.training.folders import write_failed

TEMP_MARK = ".tmp-"


def atomic_torch_save(obj: Any, path) -> None:
    """``torch.save(obj, path)``, atomically: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a unique name opened with "x" (not mkstemp: its files are 0600, this one follows umask)
    temp = path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(temp, "xb") as f:
            try:
                torch.save(obj, f)
            except RuntimeError as err:  # torch's zip writer wraps a failed write (a full disk) in its own error
                if isinstance(err.__context__, OSError):
                    raise err.__context__ from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def remove_stale_temp_files(folder) -> list[Path]:
    """Delete the temp files that a save killed half-way left in ``folder``."""
    stale = [p for p in Path(folder).glob(f".*{TEMP_MARK}*") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":  # no directory handles to fsync on Windows
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic and checksummed, and whose loads are
    the safe reader's (see the module docstring). Remote paths (s3://, gs://, ...) keep
    Lightning's own object-store upload, which is all-or-nothing by nature."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        with_checksum(checkpoint)
        if storage_options is not None or not _is_local_file_protocol(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        try:
            atomic_torch_save(checkpoint, path)
        except OSError as err:  # disk full, quota, read-only: the previous file is whole
            raise write_failed(path, err) from err

    def load_checkpoint(
        self, path, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if not _is_local_file_protocol(path):
            return verified(super().load_checkpoint(path, map_location=map_location, weights_only=True), path)
        return read_checkpoint(path)
