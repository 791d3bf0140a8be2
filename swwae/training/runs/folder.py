"""``RunFolder``: the one owner of a run's folder, ``<paths.checkpoint_dir>/<run name>/``.

It holds the run's name (checked: one path component), its identity (the settings that made its
weights, ``identity``), the lock (``lock``: one run, one owner), what the folder holds (its
checkpoints, read only through the safe reader), the resume decision (``decision.decide``, a
pure function of the two), moving an old run aside, the mid-epoch position of a pre-empted
save, and the run's ``metrics.json``, which names the SHA-256 of the checkpoint it reports so
that a reader can tell that the weights are the ones measured (and is believed only about a
checkpoint inside this folder). Every file it reads is parsed with bounds first
(``swwae.checkpoint_file``, ``swwae.files``): one that does not parse is passed over, in one line.

The lock: One run, one owner: a run holds an exclusive lock on its checkpoint folder while it runs.

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
import logging
import math
import os
import shlex
import shutil
import socket
import sys
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from pathlib import Path

from filelock import FileLock, Timeout

from swwae.checkpoint_file import file_sha256, mid_epoch_position, read_checkpoint
from swwae.errors import CheckpointError, ConfigError, Corrupt, DiskError, RunInUseError, Unreadable
from swwae.files import is_inside, read_json, sha256_of
from swwae.settings import model_settings, own_settings
from swwae.stored import parse_metrics
from swwae.training.checkpoints import remove_stale_temp_files
from swwae.training.folders import reason, write_failed
from swwae.training.registry import DATA_MODULES, DATASETS, MODEL_MODULES, MODELS, shipped
from swwae.training.runs.decision import Decision, FolderState, Found, Request, decide
from swwae.training.runs.identity import (
    IDENTITY_KEY,
    aside_name,
    aside_stamp,
    check_run_name,
    digest,
    moved_aside,
    run_identity,
)

log = logging.getLogger(__name__)

IDENTITY_KEYS = ("model", "data", "trainer", "seed", "optimized_metric", "optimized_mode", "callbacks")  # identity_of's

# helpers


def class_name(section: str, target) -> str:
    """A stored ``_target_`` as the registry's name of the class (the same class under an old
    module path is the same), or as written when swwae ships no such class."""
    table, modules = (MODELS, MODEL_MODULES) if section == "model" else (DATASETS, DATA_MODULES)
    try:
        return shipped(target, table, modules, "a class", "the config").name
    except CheckpointError:
        return str(target)


def section_defaults(data_target: str | None) -> dict[str, dict]:
    """The default of every model setting and of every setting of the data class
    ``data_target`` names, so that a checkpoint written before a setting existed counts it as its
    default."""
    defaults = {"model": model_settings()().model_dump(), "data": {}}
    entry = DATASETS.get(str(data_target or "").rpartition(".")[2])
    if entry is not None:
        defaults["data"] = entry.settings().model_dump()
    return defaults


def stored_identity(stored: Mapping, checkpoint: Mapping) -> dict:
    """The identity of the run a checkpoint holds, from its stored config; with the contents
    its record names (a folder of images' fingerprint, which no config holds)."""
    identity = identity_of(*(stored.get(key) for key in IDENTITY_KEYS))
    record = checkpoint.get(IDENTITY_KEY)
    saved = record.get("identity") if isinstance(record, Mapping) else None
    data = saved.get("data") if isinstance(saved, Mapping) else None
    contents = data.get("contents") if isinstance(data, Mapping) else None
    if isinstance(contents, str):
        identity["data"]["contents"] = contents
    return identity


def identity_of(
    model: Mapping | None,
    data: Mapping | None,
    trainer: Mapping | None,
    seed: int | None,
    optimized_metric: str | None,
    optimized_mode: str | None,
    callbacks: Mapping | None = None,
) -> dict:
    """The identity (``swwae.training.runs.identity``) of a run of these resolved sections and
    values (``IDENTITY_KEYS``, in order), as the job has them or a checkpoint stores them: of the
    model, the settings that made its weights (``own_settings``: no other pooling mode's, no lab's
    term it does not weigh), so that loading a lab's plugin changes no run's identity."""
    defaults = section_defaults((data or {}).get("_target_"))
    model = own_settings(defaults.pop("model") | dict(model or {}))
    return run_identity(
        model,
        data,
        trainer,
        seed,
        optimized_metric,
        optimized_mode,
        callbacks,
        defaults=defaults,
        target_names=class_name,
    )


def batches(count: int) -> str:
    return f"{count} batch" if count == 1 else f"{count} batches"


def describe_checkpoint(path: Path, checkpoint: Mapping) -> str:
    """'checkpoints/r/last.ckpt (after epoch 3, step 96)': epochs counted from 1, as every line
    a user reads counts them."""
    position = mid_epoch_position(checkpoint)
    if position is not None:
        return (
            f"{path} (in epoch {position[0] + 1}, after {batches(position[1])}; step {checkpoint.get('global_step')})"
        )
    return f"{path} (after epoch {checkpoint.get('epoch', -1) + 1}, step {checkpoint.get('global_step')})"


def resume_candidates(folder: Path) -> list[Path]:
    """``last.ckpt``, ``best.ckpt``, then any other ``*.ckpt``, newest first; a dangling symlink
    is one more file that does not read back (its disk not mounted?), never no file at all."""
    named = [folder / "last.ckpt", folder / "best.ckpt"]
    others = [p for p in folder.glob("*.ckpt") if p not in named]
    others.sort(key=lambda p: p.lstat().st_mtime, reverse=True)  # lstat: a dangling symlink is one more unreadable file
    return [p for p in named if p.is_file() or p.is_symlink()] + others


# the owner


class RunFolder:
    """A run's folder and everything about it that outlives the process (module docstring)."""

    def __init__(
        self,
        root: str | Path,
        name: str,
        identity: dict,
        output_dir: str | Path | None = None,
        keep_previous: int | None = None,
    ):
        self.name = check_run_name(name)
        self.root = Path(root)
        self.path = self.root / self.name
        self.identity = identity
        self.digest = digest(identity)
        self.output_dir = Path(output_dir) if output_dir is not None else None
        self.keep_previous = keep_previous  # old runs moved aside to keep (None: all)
        self.loaded: dict[Path, dict] = {}  # the checkpoints read so far, by path

    # ownership

    def own(self, trains: bool = True) -> AbstractContextManager:
        """The run's lock for the block (``own_run``, below); ``trains=False`` for a
        DDP rank other than 0, whose run rank 0 owns."""
        return own_run(self.path, self.name, trains)

    # what it holds

    def read(self, tidy: bool = True) -> FolderState:
        """The folder's checkpoints, read in resume order up to the first that reads back and
        whose stored config parses (the decision never looks past it); stray temp files of an
        interrupted save are removed (only under the lock: ``tidy=False`` reads a folder whose
        lock this process does not hold, and changes nothing in it)."""
        from swwae.training.spec import parse_stored  # the schema imports the runs package

        if not self.path.is_dir():
            return FolderState()
        for stale in remove_stale_temp_files(self.path) if tidy else ():
            log.warning("removed %s, left by a save that was interrupted", stale)
        found = []
        for path in resume_candidates(self.path):
            try:
                checkpoint = self.loaded.get(path) or read_checkpoint(path)
                parse_stored(checkpoint["swwae_config"], str(path))  # the run's schema, as for the command line
            except CheckpointError as err:
                found.append(Found(path.name, problem=str(err)))
                continue
            self.loaded[path] = checkpoint
            stored = checkpoint["swwae_config"]
            found.append(
                Found(
                    path.name,
                    None,
                    stored_identity(stored, checkpoint),
                    checkpoint.get("epoch", -1),
                    checkpoint.get("global_step", 0),
                    mid_epoch_position(checkpoint),
                )
            )
            break
        return FolderState(tuple(found))

    def decide(self, mode: str, max_epochs: int | None, max_steps: int | None) -> Decision:
        return decide(self.read(), Request(mode, self.identity, max_epochs, max_steps))

    def holds_checkpoints(self) -> bool:
        """Whether the folder holds a checkpoint file (read or not), without its lock."""
        return self.path.is_dir() and bool(resume_candidates(self.path))

    def this_run_in(self, name: str, max_epochs: int | None, max_steps: int | None) -> Decision | None:
        """Whether the folder of run ``name`` beside this one holds this run (its identity): the
        decision there (continue or finished), else None. Read without its lock: nothing in it
        changes."""
        other = RunFolder(self.root, name, self.identity)
        decision = decide(other.read(tidy=False), Request("auto", self.identity, max_epochs, max_steps))
        return decision if decision.action in ("continue", "finished") else None

    def checkpoint(self, found: Found) -> tuple[Path, dict]:
        """(path, contents) of a checkpoint the decision names."""
        path = self.path / found.name
        return path, self.loaded[path]

    def kept(self) -> str:
        """What a run that stopped on an error leaves to resume from, in words."""
        for path in resume_candidates(self.path) if self.path.is_dir() else []:
            try:
                return f"{describe_checkpoint(path, self.loaded.get(path) or read_checkpoint(path))} is kept"
            except CheckpointError:
                continue
        return "no checkpoint was saved"

    def tested(self, best: str | Path | None) -> Path | None:
        """The checkpoint whose test metrics the run reports: ``best`` (its best.ckpt), or, where
        that no longer reads back (a flipped bit, a file cut short since it was saved), its
        last.ckpt, with a warning (``metrics.json`` names it): else a finished run reported again
        (its ``metrics.json`` gone) would end in that one error each time it is asked for. (At the
        end of training, best.ckpt was saved moments before: it is not read once more there.)
        Damage only (``Corrupt``, ``Unreadable``): a file swwae never wrote there (pickled objects)
        stays its one error line, as does damage where last.ckpt does not read back either."""
        if not best:
            return None
        best, last = Path(best), (self.path / "last.ckpt").absolute()
        try:
            self.loaded.get(best) or read_checkpoint(best)
            return best
        except (Corrupt, Unreadable) as err:
            if best.absolute() == last or not last.is_file():
                raise
            try:
                read_checkpoint(last)
            except CheckpointError:
                raise err from None
            log.warning("%s; testing %s instead (metrics.json names it)", err, last)
            return last

    def move_aside(self) -> Path | None:
        """A fresh start moves an old run's folder aside (``<run>.previous-<time>``); of the
        folders moved aside, the newest ``keep_previous`` are kept and older ones deleted
        (``None``: none is). Only under the run's lock, by the process that owns it."""
        if not (self.path.is_dir() and any(self.path.glob("*.ckpt"))):
            return None
        stamp = aside_stamp()
        aside = self.path.with_name(aside_name(self.name, stamp))
        number = 1
        while aside.exists():
            number += 1
            aside = self.path.with_name(aside_name(self.name, stamp, number))
        shutil.move(str(self.path), str(aside))
        self.loaded.clear()
        log.warning("%s held an earlier run: moved it to %s", self.path, aside)
        self.delete_old_asides()
        return aside

    def delete_old_asides(self) -> None:
        """The folders moved aside beyond the newest ``keep_previous`` deleted, said in one line."""
        if self.keep_previous is None:
            return
        # a folder with a lock of its own beside it was trained under that name (allowed before): no aside
        asides = [folder for folder in moved_aside(self.root, self.name) if not lock_path(folder).exists()]
        deleted = []
        for folder in asides[: max(0, len(asides) - max(1, self.keep_previous))]:  # the one moved aside now: never
            try:
                shutil.rmtree(folder)
                deleted.append(folder.name)
            except OSError as err:  # the run goes on: an old folder left is no fault of this one
                log.warning("could not delete %s, an old run moved aside: %s", folder, reason(err))
        if deleted:
            names = ", ".join(deleted[:3]) + (", ..." if len(deleted) > 3 else "")
            log.warning(
                "deleted %d old run(s) moved aside, beyond keep_previous=%d: %s",
                len(deleted),
                self.keep_previous,
                names,
            )

    # metrics.json

    def write_metrics(self, summary: dict) -> Path:
        """``<output dir>/metrics.json``: the summary, the run's identity digest and the SHA-256
        of the checkpoint file it reports (``summary["checkpoint"]``)."""
        record = dict(summary) | {"identity": self.digest}
        checkpoint = Path(summary["checkpoint"]) if summary.get("checkpoint") else None
        if checkpoint is not None and checkpoint.is_file():
            record["checkpoint_sha256"] = file_sha256(checkpoint)
        path = self.output_dir / "metrics.json"
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(record, indent=2))
        except OSError as err:
            raise write_failed(path, err) from None
        return path

    def own_metrics(self, checkpoint: Mapping, wanted: list[str]) -> tuple[dict | None, str]:
        """The metrics.json a finished run wrote (its folder is in the run config stored in
        ``checkpoint``), if it reports this run's weights: the checkpoint it names lies in this
        run's own folder and still holds the bytes it measured (``checkpoint_sha256``), and it
        holds every metric ``wanted``. Both files are read with bounds (regular files only, the
        record's size and nesting limited): a file that names ``/dev/zero`` or another run's
        weights is not believed, and the run is evaluated again."""
        folder = stored_output_dir(checkpoint)
        path = folder / "metrics.json" if folder else None
        if path is None or not (path.exists() or path.is_symlink()):
            return None, ""
        try:
            summary = parse_metrics(read_json(path, "metrics.json"), f"metrics.json {path}")
            measured, recorded = summary.get("checkpoint"), summary.get("checkpoint_sha256")
            if not (measured and recorded and is_inside(measured, self.path)):
                log.warning("%s does not report a checkpoint of %s with its SHA-256: not believed", path, self.path)
                return None, ""
            same = sha256_of(measured, "checkpoint") == recorded
        except Unreadable as err:
            log.warning("%s: not believed", err)
            return None, ""
        metrics = summary["metrics"]
        if (
            not same
            or summary.get("status") != "ok"
            or any(not math.isfinite(metrics.get(k, math.nan)) for k in wanted)
        ):
            return None, ""
        return summary, f"from {path}"


def stored_output_dir(checkpoint: Mapping) -> Path | None:
    """The output folder of the run that wrote ``checkpoint`` (its stored ``paths.output_dir``),
    where its metrics.json and test_outcomes.csv are; None where the config names none."""
    stored = checkpoint.get("swwae_config")
    for key in ("paths", "output_dir"):
        stored = stored.get(key) if isinstance(stored, Mapping) else None
    return Path(stored) if isinstance(stored, str) and stored else None


# the lock: one run, one owner (module docstring)

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
        "command": shlex.join(sys.orig_argv),  # as the process was started: swwae train ..., python train.py ...
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
