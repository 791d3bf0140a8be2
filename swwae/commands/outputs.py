"""Where a command's outputs go: where the user said, else the current folder; never beside
the file or folder it reads (a checkpoint's folder or a sweep folder may be read-only, or
another user's).

``output_path`` (one file; ``picture_path``, one PNG) and ``report_prefix`` (a report's
``.md``, ``.png``... files, each named by ``report_file``) settle the path and check that its
folder takes a file before any work (one ``error:`` line, not a traceback after the
evaluation); ``write_picture`` writes a picture atomically, ``writing`` turns any other write
that fails anyway (a full disk) into one line naming the file. No torch until a picture is
written: a report's bad input answers without it.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING

from swwae.errors import ConfigError
from swwae.training.folders import check_writable, write_failed

REPORT_SUFFIXES = (".md", ".png", ".json")  # the files a report writes beside one another

if TYPE_CHECKING:
    from torch import Tensor


def settled(out: str | Path | None, default: str) -> Path:
    """``out`` (a folder: ``default`` inside it; else the path itself), or ``default`` in the
    current folder. A folder is one that exists, or text ending in a slash (``results/``: a
    ``Path`` drops the slash, and the files would land beside it as ``results.md``)."""
    if out is None:
        return Path(default)
    folder = Path(out).is_dir() or (isinstance(out, str) and out.endswith(("/", os.sep)))
    return Path(out) / default if folder else Path(out)


def output_path(out: str | Path | None, default: str, setting: str, what: str) -> Path:
    """``out`` (a folder: ``default`` inside it), or ``default`` in the current folder;
    ``ConfigError`` unless it is named like ``default`` (its suffix: a file of another kind, a
    checkpoint, is never replaced), ``DiskError`` unless its folder takes a file (``setting``,
    the option that names another: ``--out``; ``what``, the output in words). Folders made for
    the check are removed again: a command that stops later leaves nothing behind."""
    path, suffix = settled(out, default), Path(default).suffix
    if path.suffix.lower() != suffix:
        raise ConfigError(f"{setting}={out}: name a {suffix} file (or a folder for {default})")
    check_writable(path.parent, f"{what} {path.name}", setting, keep=False)
    return path


def picture_path(out: str | Path | None, default: str, setting: str) -> Path:
    """``output_path`` of a PNG."""
    return output_path(out, default, setting, "the picture")


def report_prefix(out: str | Path | None, default: str, setting: str) -> Path:
    """The prefix of a report's files (``report_file``: ``<prefix>.md``, ``<prefix>.png``...):
    ``out`` (a folder: ``default`` inside it; else the prefix itself, less a report file's suffix:
    ``--out results/sweep.md`` names ``sweep.md`` and ``sweep.png``), or ``default`` in the
    current folder; ``DiskError`` unless its folder takes a file, checked as ``picture_path`` checks."""
    prefix = settled(out, default)
    if prefix.suffix.lower() in REPORT_SUFFIXES:
        prefix = prefix.with_suffix("")
    check_writable(prefix.parent, f"the report {prefix.name}", setting, keep=False)
    return prefix


def report_file(prefix: Path, suffix: str) -> Path:
    """``<prefix><suffix>``, the prefix's name kept whole: ``Path.with_suffix`` reads the ``.001``
    of ``--out lr0.001`` as a suffix, and wrote ``lr0.md``, the file ``--out lr0.01`` writes too."""
    return prefix.with_name(prefix.name + suffix)


@contextlib.contextmanager
def writing(path: Path):
    """Write ``path`` inside the block (its folder made first); an ``OSError`` there (disk
    full, a folder made read-only meanwhile) is one ``DiskError`` line naming the file."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        yield path
    except OSError as err:
        raise write_failed(path, err) from None


def save_png(image: Tensor, path) -> None:
    """``swwae.images.save_png``, imported when a picture is written (it needs torch)."""
    from swwae.images import save_png as save

    save(image, path)


def write_picture(image: Tensor, path: Path) -> None:
    """``image`` (3, H, W) in [0, 1] as the PNG ``path`` (its folder made if need be), through
    a temp file: a reader sees the old picture or the new one; ``DiskError`` if it fails."""
    temp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.png")
    try:
        with writing(path):
            save_png(image, temp)
            os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)
