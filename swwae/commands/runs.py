"""``swwae runs [--dir checkpoints]``: the runs under a checkpoint folder, one line each.

    swwae runs                          # checkpoints/ of the current folder (paths.checkpoint_dir)
    swwae runs --dir /scratch/ckpts --json

A run is a folder holding checkpoints (``<dir>/<run>/last.ckpt``, ``best.ckpt``); a folder of
run folders (``<dir>/quick/<run>/``) lists them as ``quick/<run>``. Each run is read from its
newest checkpoint that reads back (last.ckpt, else best.ckpt), through the project's one safe
reader (``swwae.checkpoint_file.read_checkpoint``: weights only, checksum checked):

* status: ``finished`` when it trained as far as its own run config asks (epoch + 1 >=
  ``trainer.max_epochs``, or ``global_step`` >= ``trainer.max_steps``: the job's own test,
  ``swwae.training.runs.decision.has_finished``), ``pre-empted`` when it was saved mid-epoch
  by a scheduler's signal (``swwae.checkpoint_file.mid_epoch_position``; ``resume=true``
  continues it), ``unfinished`` otherwise, ``unreadable`` when no checkpoint reads back (the
  reason is in its note);
* epochs done of the run's ``trainer.max_epochs``;
* the monitored metric and its best value so far (the checkpoint callback's own state).

Old runs moved aside by a fresh start (``<run>.previous-<time>``, named by
``swwae.training.runs.identity``) are counted, and listed with ``--previous``; hidden files (a
run's ``.lock`` and ``.owner.json``) are not runs. A sweep folder or a job's output folder given
as ``--dir`` is one error line: they hold records, not checkpoints (``swwae compare`` reads a sweep).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from swwae.checkpoint_file import mid_epoch_position, read_checkpoint
from swwae.cli import OneLineParser, one_line_errors
from swwae.errors import CheckpointError, ConfigError
from swwae.install import command
from swwae.training.runs.decision import Found, has_finished
from swwae.training.runs.identity import is_moved_aside
from swwae.training.sweep.jobs import SWEEP_MARK

CHECKPOINTS = ("last.ckpt", "best.ckpt")  # newest first
DEFAULT_DIR = Path("checkpoints")  # paths.checkpoint_dir's default, relative to the current folder
NESTING = 3  # how deep folders of run folders are searched
DIR_HINT = (
    "--dir names the folder training saves checkpoints into: paths.checkpoint_dir, by default checkpoints/ of "
    "the folder it ran in"
)


@dataclass
class RunRow:
    name: str  # relative to the folder listed: "run", "quick/run"
    folder: str
    status: str  # finished | unfinished | pre-empted | unreadable | no checkpoint
    epochs: int | None = None  # epochs trained to their end
    max_epochs: int | None = None
    monitor: str | None = None
    best: float | None = None
    checkpoint: str | None = None  # the file read
    note: str = ""
    previous: bool = False  # moved aside by a fresh start of its run name


# helpers


def holds_checkpoints(folder: Path) -> bool:
    return any(p.is_file() for p in folder.glob("*.ckpt"))


def run_folders(root: Path, depth: int = NESTING) -> list[Path]:
    """The run folders under ``root``: folders holding checkpoints; a folder without any
    whose subfolders hold runs is a folder of runs, searched in turn; one without either is a
    run that saved nothing yet."""
    found = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
        try:
            below = [] if holds_checkpoints(folder) or depth <= 1 else run_folders(folder, depth - 1)
        except OSError:  # a folder that cannot be listed: a row of its own, which says so
            below = []
        found += below or [folder]
    return found


def best_score(checkpoint: dict) -> tuple[str | None, float | None]:
    """(monitored metric, its best value) from the state of the checkpoint callback that
    monitors one; else the run config's ``optimized_metric`` and no value."""
    for state in (checkpoint.get("callbacks") or {}).values():
        if isinstance(state, dict) and isinstance(state.get("monitor"), str):
            score = state.get("best_model_score")
            if isinstance(score, (int, float)) or (hasattr(score, "numel") and score.numel() == 1):
                return state["monitor"], float(score)
    return checkpoint["swwae_config"].get("optimized_metric"), None


def run_row(name: str, folder: Path, path: Path, checkpoint: dict) -> RunRow:
    """The row of a run, from the checkpoint ``path`` it was read from."""
    trainer = checkpoint["swwae_config"].get("trainer") or {}  # parsed by the reader: integers or None
    max_epochs, max_steps = trainer.get("max_epochs"), trainer.get("max_steps")
    found = Found(
        path.name,
        epoch=checkpoint.get("epoch", -1),
        step=checkpoint.get("global_step", 0),
        mid_epoch=mid_epoch_position(checkpoint),
    )
    if found.mid_epoch is not None:
        status, epochs = "pre-empted", found.mid_epoch[0]
        note = f"saved in epoch {epochs + 1} after {found.mid_epoch[1]} batches"
    else:
        epochs, note = found.epoch + 1, ""
        status = "finished" if has_finished(found, max_epochs, max_steps) else "unfinished"
    monitor, best = best_score(checkpoint)
    best = best if best is not None and math.isfinite(best) else None  # JSON has no NaN
    return RunRow(
        name,
        str(folder),
        status,
        epochs,
        max_epochs if max_epochs is not None and max_epochs >= 0 else None,
        monitor,
        best,
        path.name,
        note,
    )


def read_run(name: str, folder: Path) -> RunRow:
    """The row of one run folder: its newest checkpoint that reads back, and why the newer
    ones did not."""
    problems = []
    for path in (folder / file for file in CHECKPOINTS):
        if not (path.is_file() or path.is_symlink()):  # a dangling link is a checkpoint that does not read back
            continue
        try:
            run = run_row(name, folder, path, read_checkpoint(path))
        except CheckpointError as err:
            problems.append(str(err).replace(f"checkpoint {path} ", f"{path.name} "))
            continue
        run.note = "; ".join(filter(None, [*problems, run.note]))
        return run
    if problems:
        return RunRow(name, str(folder), "unreadable", note="; ".join(problems))
    try:
        others = sorted(p.name for p in folder.glob("*.ckpt"))
    except OSError as err:
        return RunRow(name, str(folder), "unreadable", note=f"cannot be listed: {err.strerror}")
    return RunRow(
        name,
        str(folder),
        "no checkpoint",
        note=f"no {' or '.join(CHECKPOINTS)} (holds {', '.join(others)})" if others else "",
    )


def check_folder_of_runs(root: Path) -> None:
    """``ConfigError`` unless ``root`` is a folder that may hold runs: not missing, and not a sweep
    folder or a job's output folder, which hold records (``metrics.json``, ``.hydra/``) but no
    checkpoint: each job would be listed as a run that saved nothing."""
    if not root.is_dir():
        raise ConfigError(f"{root} is not a folder of runs ({DIR_HINT})")
    if (root / SWEEP_MARK).is_file():
        raise ConfigError(
            f"{root} is a sweep folder, its jobs' records without their checkpoints ({DIR_HINT}); "
            f"{command('compare')} {root} summarises the sweep"
        )
    if (root / ".hydra").is_dir():
        raise ConfigError(
            f"{root} is a job's output folder, its config and records without its checkpoints ({DIR_HINT})"
        )


def list_runs(root: Path, previous: bool = False) -> tuple[list[RunRow], int]:
    """(the runs under ``root``, how many moved-aside old runs were left out)."""
    check_folder_of_runs(root)
    rows, skipped = [], 0
    for folder in run_folders(root):
        aside = is_moved_aside(folder)
        if aside and not previous:
            skipped += 1
            continue
        run = read_run(folder.relative_to(root).as_posix(), folder)
        run.previous = aside
        rows.append(run)
    return rows, skipped


# the table


def epochs_text(run: RunRow) -> str:
    if run.epochs is None:
        return "-"
    return f"{run.epochs}/{run.max_epochs}" if run.max_epochs is not None else str(run.epochs)


def best_text(run: RunRow) -> str:
    if run.monitor is None:
        return "-"
    if run.best is None:
        return f"{run.monitor} -"
    return f"{run.monitor} {run.best:.4g}"


def note_text(run: RunRow, limit: int = 80) -> str:
    """The note, each of its parts cut to ``limit`` characters (``--json`` keeps them whole)."""
    parts = [part if len(part) <= limit else part[: limit - 3] + "..." for part in run.note.split("; ") if part]
    return f"  ({'; '.join(parts)})" if parts else ""


def runs_table(rows: list[RunRow]) -> str:
    head = ["run", "status", "epochs", "best", "folder"]
    lines = [head] + [
        [
            run.name + (" (moved aside)" if run.previous else ""),
            run.status,
            epochs_text(run),
            best_text(run),
            run.folder + note_text(run),
        ]
        for run in rows
    ]
    widths = [max(len(line[i]) for line in lines) for i in range(len(head) - 1)]
    return "\n".join(
        "  ".join([*(cell.ljust(w) for cell, w in zip(line, widths)), line[-1]]).rstrip() for line in lines
    )


@one_line_errors
def main(argv=None) -> int:
    parser = OneLineParser(prog="swwae runs", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--dir",
        type=Path,
        default=DEFAULT_DIR,
        help="the checkpoint folder (default: checkpoints/ of the current folder)",
    )
    parser.add_argument("--previous", action="store_true", help="also list the old runs moved aside")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON instead of a table")
    args, extra = parser.parse_known_args(argv)
    if extra:  # `swwae runs checkpoints/quick`, as ls takes a folder: say how it is given
        hint = f" (a folder of runs is given as --dir {extra[0]})" if not extra[0].startswith("-") else ""
        parser.error(f"unrecognized arguments: {' '.join(extra)}{hint}")
    rows, skipped = list_runs(args.dir, args.previous)
    if args.json:
        print(
            json.dumps(
                {"dir": str(args.dir), "runs": [asdict(run) for run in rows], "moved_aside_left_out": skipped}, indent=2
            )
        )
        return 0
    print(runs_table(rows) if rows else f"no runs under {args.dir}")
    if skipped:
        print(f"({skipped} old run{'s' if skipped > 1 else ''} moved aside by a fresh start not shown: --previous)")
    return 0
