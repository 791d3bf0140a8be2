"""Real read-only and full folders for the tests: a tmpfs mounted read-only or small (as root);
else, for a read-only folder, one whose mode takes no writes (a user other than root is held
to it). Where neither holds, the test is skipped."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest


def mount(point: Path, options: str) -> bool:
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
    return result.returncode == 0


@contextlib.contextmanager
def small_disk(point: Path, size: str = "64k") -> Iterator[Path]:
    """A fresh tmpfs of ``size`` at ``point``: writes past it fail with ENOSPC."""
    point.mkdir(parents=True)
    if not mount(point, f"size={size}"):
        pytest.skip("cannot mount a tmpfs here")
    try:
        yield point
    finally:
        subprocess.run(["umount", str(point)], capture_output=True)


@contextlib.contextmanager
def read_only_folder(point: Path, fill: Callable[[Path], object] = lambda folder: None) -> Iterator[Path]:
    """The folder ``point``, first ``fill``-ed, then read-only: a tmpfs remounted read-only, or
    its mode 0555 where no tmpfs can be mounted (and the user is not root, who ignores modes)."""
    point.mkdir(parents=True)
    if mount(point, "size=4m"):
        try:
            fill(point)
            subprocess.run(["mount", "-o", "remount,ro", str(point)], check=True, capture_output=True)
            yield point
        finally:
            subprocess.run(["umount", str(point)], capture_output=True)
        return
    if os.geteuid() == 0:
        pytest.skip("cannot mount a tmpfs here, and root writes into any folder whatever its mode")
    fill(point)
    point.chmod(0o555)
    try:
        yield point
    finally:
        point.chmod(0o755)


def read_only_reason() -> str:
    """What writing into ``read_only_folder`` fails with: root writes through permissions, so
    the folder is a read-only mount there, and a folder without write permission otherwise."""
    return "Read-only file system" if os.geteuid() == 0 else "Permission denied"
