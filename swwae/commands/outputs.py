"""Where a command's pictures go: where the user said, else the current folder; never beside
the file it reads (a checkpoint's folder may be read-only, or another user's).

``picture_path`` settles the path and checks that its folder takes a file before any work
(one ``error:`` line, not a traceback after the evaluation); ``write_picture`` writes it
atomically, and a write that fails anyway (a full disk) is one line naming the file.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch import Tensor

from swwae.errors import ConfigError
from swwae.images import save_png
from swwae.training.folders import check_writable, write_failed


def picture_path(out: Path | None, default: str, setting: str) -> Path:
    """``out`` (a folder: ``default`` inside it), or ``default`` in the current folder;
    ``ConfigError`` unless it names a PNG, ``DiskError`` unless its folder takes a file
    (``setting``, the option that names another: ``--out``). Folders made for the check are
    removed again: a command that stops later leaves nothing behind."""
    path = Path(default) if out is None else Path(out) / default if Path(out).is_dir() else Path(out)
    if path.suffix.lower() != ".png":
        raise ConfigError(f"{setting}={out}: name a .png file (or a folder for {default})")
    check_writable(path.parent, f"the picture {path.name}", setting, keep=False)
    return path


def write_picture(image: Tensor, path: Path) -> None:
    """``image`` (3, H, W) in [0, 1] as the PNG ``path`` (its folder made if need be), through
    a temp file: a reader sees the old picture or the new one; ``DiskError`` if it fails."""
    temp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        save_png(image, temp)
        os.replace(temp, path)
    except OSError as err:
        raise write_failed(path, err) from None
    finally:
        temp.unlink(missing_ok=True)
