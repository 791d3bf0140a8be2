"""The package as a user installs it: a wheel built from a copy of the clone (the clone gets no
``build/``), installed into a fresh virtual environment whose dependencies are this one's."""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.config import ROOT


def run(*args, cwd: Path, timeout: int = 600, env: dict | None = None, status: int = 0) -> subprocess.CompletedProcess:
    """``args`` run in ``cwd``; asserts the exit ``status``."""
    result = subprocess.run(
        [*map(str, args)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, PYTHONWARNINGS="ignore", **(env or {})),
    )
    assert result.returncode == status, f"{args}: exit status {result.returncode}\n{result.stderr[-3000:]}"
    return result


def source_copy(folder: Path) -> Path:
    """The clone's files, tracked or not, that git does not ignore (no runs, no caches)."""
    listed = run("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", cwd=ROOT).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    return folder


def build_wheel(folder: Path) -> Path:
    """``pip wheel`` of a copy of the clone; this environment's setuptools when new enough
    (offline), else an isolated build as pip does by default."""
    source = source_copy(folder / "source")
    setuptools = int(importlib.metadata.version("setuptools").split(".")[0])
    isolation = ["--no-build-isolation"] if setuptools >= 77 else []
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *isolation, "-w", folder / "dist", source, cwd=folder)
    (wheel,) = (folder / "dist").glob("swwae-*.whl")
    return wheel


def venv_with(wheel: Path, folder: Path) -> Path:
    """A fresh virtual environment holding the wheel, its dependencies this environment's (a
    ``.pth`` naming its site-packages; the ``.pth`` files there, such as an editable install's,
    are not run). Returns its ``bin/``."""
    run(sys.executable, "-m", "venv", "--without-pip", folder, cwd=folder.parent)
    python = folder / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", cwd=folder).stdout.strip()
    ours = [p for p in sys.path if p.endswith(("site-packages", "dist-packages"))]
    Path(site, "test-dependencies.pth").write_text("\n".join(ours) + "\n")
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel, cwd=folder)
    return folder / "bin"
