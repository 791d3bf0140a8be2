"""One run, one owner: a run holds an exclusive lock on its checkpoint folder while it runs.

Two runs of one run name (two terminals, a sweep whose jobs share a name, a SLURM array with a
repeated task) would otherwise write the same ``best.ckpt`` and ``last.ckpt``, and each would
test and report the other's weights. The lock is ``filelock``'s (``fcntl.flock`` on POSIX:
released by the kernel when the process dies, even by ``kill -9``; on NFS, Linux maps it onto
the server's byte-range locks). It lives beside the folder (``checkpoints/.<run>.lock``), not in
it, so moving an old run's folder aside (which happens only under the lock) cannot move the lock
with it. Beside it, ``.<run>.owner.json`` says who holds it, for the other run's error line.
The process that trains takes it: of a DDP run, the process of global rank 0 as the Trainer
counts ranks (its other ranks belong to the same run); a process alone in its run always takes
it, whatever rank variables a launcher left in its environment (``srun -n 2 python train.py``
without DDP starts two runs, not two ranks of one).
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import sys
import time
from pathlib import Path

from filelock import FileLock, Timeout

from swwae.errors import ConfigError, DiskError, RunInUseError, Unreadable
from swwae.files import read_json
from swwae.training.folders import reason

OWNER_LIMIT = 1 << 16  # bytes: an owner file is one line


def lock_path(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.lock")


def owner_path(folder: Path) -> Path:
    return folder.with_name(f".{folder.name}.owner.json")


def describe_owner(folder: Path) -> str:
    """'pid 123 on host n7, started 2026-12-01 10:00:00: python train.py ...', as far as known."""
    try:
        owner = read_json(owner_path(folder), "owner file", OWNER_LIMIT)  # bounded: any file may be there
    except Unreadable:
        return "another process"
    if not isinstance(owner, dict):
        return "another process"
    return (
        f"pid {owner.get('pid', '?')} on host {owner.get('host', '?')}, started {owner.get('started', '?')}: "
        f"{owner.get('command', '?')}"
    )


def write_owner(folder: Path) -> None:
    owner = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "command": " ".join(["python", *map(shlex.quote, sys.argv)]),
    }
    temp = owner_path(folder).with_name(f"{owner_path(folder).name}.{os.getpid()}.tmp")
    temp.write_text(json.dumps(owner))
    os.replace(temp, owner_path(folder))


@contextlib.contextmanager
def own_run(folder: Path, run_name: str, trains: bool = True):
    """``with own_run(checkpoints/<run>, run):`` the block runs holding the run's lock, or
    RunInUseError (one line naming the other process and what to do) before it touches anything;
    a lock that cannot be taken for another reason (a read-only folder, a symlink loop where the
    lock file goes) is a DiskError line. A run folder that is a symbolic link is a ConfigError
    line: the lock guards a name, so two links to one target would be two owners of one folder
    (``paths.checkpoint_dir`` may be a link: the locks then live in its target, beside the
    folders). ``trains=False``: a DDP rank other than 0, whose run rank 0 owns."""
    if not trains:
        yield
        return
    if folder.is_symlink():  # its lock would be the link's, not its target's: two names could share one
        raise ConfigError(
            f"{folder} is a symbolic link (to {os.readlink(folder)}): a run's folder must be a folder of "
            f"paths.checkpoint_dir itself; to keep checkpoints on another disk, point paths.checkpoint_dir there"
        )
    lock = FileLock(lock_path(folder), timeout=0)
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
        lock.acquire()
    except Timeout:
        raise RunInUseError(
            f"{folder} is in use by another run of {run_name} ({describe_owner(folder)}): wait for it to finish, "
            f"or give this run its own folder with run_name=..."
        ) from None
    except OSError as err:
        raise DiskError(f"cannot lock {lock_path(folder)} for the run {run_name}: {reason(err)}") from None
    try:
        write_owner(folder)
        yield
    finally:
        owner_path(folder).unlink(missing_ok=True)
        lock.release()
