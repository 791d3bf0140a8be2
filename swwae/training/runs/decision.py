"""Where a run starts, decided from what its folder holds and what the new config asks: a pure
function, tested as a table of cases (``tests/test_resume_decision.py``) without training.

``resume=auto`` (the default) continues the folder's run when it is this run (same identity)
and unfinished, reports it when finished, and refuses a folder that holds another run: a
different config never takes over, moves aside or reports a run that is not its own.
``resume=true`` is the same but a folder without a checkpoint to continue is an error;
``resume=false`` starts over, moving whatever the folder holds aside (never deleting it).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from swwae.errors import ConfigError, excerpt
from swwae.training.runs.identity import differences

RESUME_MODES = ("auto", "true", "false")
Action = Literal["fresh", "start_over", "continue", "finished", "refuse"]


@dataclass(frozen=True)
class Found:
    """One checkpoint file of the folder, as read (or not) by the safe reader."""

    name: str  # "last.ckpt"
    problem: str | None = None  # why it cannot be read back (corrupt, unreadable, foreign); None: it can
    identity: dict | None = None  # the identity of the run that wrote it
    epoch: int = -1  # the epoch it was saved at the end of (or in, mid_epoch)
    step: int = 0
    mid_epoch: tuple[int, int] | None = None  # (epoch, batches done) of a save by a pre-emption


@dataclass(frozen=True)
class FolderState:
    """What a run folder holds: its checkpoints, in the order a run continues from them
    (``last.ckpt``, ``best.ckpt``, any other newest first), and who else holds its lock."""

    checkpoints: tuple[Found, ...] = ()
    locked_by: str | None = None  # the other owner, when the lock is taken


@dataclass(frozen=True)
class Request:
    """What the new run asks for."""

    mode: str  # auto | true | false
    identity: dict
    max_epochs: int | None = None
    max_steps: int | None = None


@dataclass(frozen=True)
class Decision:
    action: Action
    checkpoint: Found | None = None  # what it continues or reports
    reason: str = ""  # the refusal, in words; or why it starts over
    warnings: tuple[str, ...] = field(default_factory=tuple)  # checkpoints passed over


def resume_mode(value) -> str:
    """``resume`` as one of RESUME_MODES (the command line gives booleans or ``auto``)."""
    mode = {True: "true", False: "false"}[value] if isinstance(value, bool) else str(value).lower()
    if mode not in RESUME_MODES:
        raise ConfigError(f"resume={excerpt(repr(value))} is unknown; choose one of {', '.join(RESUME_MODES)}")
    return mode


def has_finished(found: Found, max_epochs: int | None, max_steps: int | None) -> bool:
    """Whether the run trained as far as asked (a save mid-epoch never has)."""
    if found.mid_epoch is not None:
        return False
    if max_steps is not None and max_steps >= 0 and found.step >= max_steps:
        return True
    return max_epochs is not None and max_epochs >= 0 and found.epoch + 1 >= max_epochs


def decide(state: FolderState, request: Request) -> Decision:
    """The table (see the module docstring): locked -> refuse; nothing -> fresh; resume=false
    -> start over; the first readable checkpoint of another identity -> refuse; of this one ->
    finished or continue; none readable -> start over (auto) or refuse (true)."""
    if state.locked_by is not None:
        return Decision("refuse", reason=f"in use by another run ({state.locked_by})")
    if not state.checkpoints:
        return Decision(
            "fresh", warnings=("holds no checkpoint: starting a fresh run",) if request.mode == "true" else ()
        )
    if request.mode == "false":
        return Decision("start_over", reason="resume=false")
    readable = next((f for f in state.checkpoints if f.problem is None), None)
    before = state.checkpoints[: state.checkpoints.index(readable)] if readable else state.checkpoints
    skipped = tuple(f"cannot resume from {f.name}: {f.problem}" for f in before)
    if readable is None:
        if request.mode == "true":
            return Decision(
                "refuse", reason=f"holds no checkpoint that reads back ({'; '.join(skipped)})", warnings=skipped
            )
        return Decision("start_over", reason="no checkpoint in it reads back", warnings=skipped)
    changed = differences(readable.identity or {}, request.identity)
    if changed:
        shown = "; ".join(changed[:3]) + ("; ..." if len(changed) > 3 else "")
        return Decision("refuse", readable, f"holds another run ({shown})", skipped)
    if has_finished(readable, request.max_epochs, request.max_steps):
        return Decision("finished", readable, warnings=skipped)
    return Decision("continue", readable, warnings=skipped)
