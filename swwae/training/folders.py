"""Folders a run writes to: checked before any training, and a failed write as one line.

A read-only checkpoint folder, a file where the run's folder should be, or a launch folder
Hydra cannot create its output folder in would otherwise surface as a 35-65 line traceback,
some of them only after an epoch was trained. ``check_writable`` tries each folder at the
start (create it, write and remove a probe file; ``check_folders`` every folder of a run);
``CheckOutputFolder``, a Hydra callback, does it for Hydra's own run or sweep folder, which
Hydra creates before the job starts. A write that fails later (disk full) is a ``DiskError``
naming the path; the job adds which checkpoint is kept.
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hydra.experimental.callback import Callback

from swwae.errors import DiskError, UserError, excerpt

if TYPE_CHECKING:
    from swwae.training.run_settings import PathSettings


PATH_SHOWN = 400  # characters of a path an error line shows (a 120 kB hydra.run.dir is cut)


def reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def check_writable(folder: Path, what: str, setting: str, keep: bool = True) -> None:
    """DiskError (one line) unless ``folder`` exists or can be created, and takes a file;
    ``setting`` is the key that puts it elsewhere. With ``keep=False`` the folders it had to create are
    removed again: a run that stops on a config error afterwards leaves nothing behind."""
    folder = Path(folder)
    created = [p for p in (folder, *folder.parents) if not p.exists()]
    probe = folder / f".swwae-write-test-{os.getpid()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as err:
        in_the_way = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        why = f"{excerpt(in_the_way, PATH_SHOWN)} is a file, not a folder" if in_the_way is not None else reason(err)
        raise DiskError(
            f"cannot write {what} in {excerpt(folder, PATH_SHOWN)}: {why}; set {setting}=... to write elsewhere"
        ) from None
    finally:
        if not keep:
            for p in created:  # innermost first
                with contextlib.suppress(OSError):
                    p.rmdir()


def check_folders(paths: PathSettings) -> None:
    """Every folder a run writes to (the run spec's ``paths``), before any data is read; the
    folders it had to create for the test are removed again (a file where the run's own
    checkpoint folder should be is found under the run's lock)."""
    check_writable(Path(paths.checkpoint_dir), "checkpoints", "paths.checkpoint_dir", keep=False)
    check_writable(Path(paths.log_dir), "logs", "paths.log_dir", keep=False)
    check_writable(Path(paths.output_dir), "the run's output", "hydra.run.dir")


def write_failed(path, err: OSError) -> DiskError:
    """The one-line error of a write of ``path`` that failed (disk full, quota, read-only)."""
    return DiskError(f"writing {excerpt(path, PATH_SHOWN)} failed: {reason(err)}")


class CheckOutputFolder(Callback):
    """Hydra callback: the run's (or sweep's) output folder must be writable, else one
    ``error:`` line and exit status 2 before the job starts (Hydra would print a traceback)."""

    # hydra.<mode>.dir, resolved: its ${hydra:...} parts need Hydra's config set, which hydra-core
    # sets only after these callbacks (>= 1.3.3) or before them (1.3.2)

    def on_run_start(self, config, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig

        from swwae.training.runs.identity import check_run_name

        HydraConfig.instance().set_config(config)
        folder = Path(str(config.hydra.run.dir))
        try:
            check_run_name(config.get("run_name"))  # before its name makes a folder anywhere
        except UserError as err:
            self._fail(err)
        self._check(folder, "the run's output", "hydra.run.dir")

    def on_multirun_start(self, config, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(config)
        self._check(Path(str(config.hydra.sweep.dir)), "the sweep's output", "hydra.sweep.dir")

    @classmethod
    def _check(cls, folder: Path, what: str, setting: str) -> None:
        try:
            check_writable(folder, what, setting)
        except DiskError as err:
            cls._fail(err)

    @staticmethod
    def _fail(err: Exception):
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
