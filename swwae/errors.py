"""Errors that mean "the user asked for something that cannot work", and how to show them.

``train.py`` and the scripts print a :class:`UserError` as one ``error: ...`` line and exit
with status 2, instead of a traceback: its message alone says what to change. The kinds say
where the problem lies; catch ``UserError`` to catch them all.
"""

from __future__ import annotations


class UserError(ValueError):
    """Something the user can fix; the message says how."""


class ConfigError(UserError):
    """A config value or command-line option that cannot work."""


class DataError(UserError):
    """A dataset that is missing, partial, corrupt or cannot be downloaded."""


class CheckpointError(UserError):
    """A checkpoint that is missing, unreadable, foreign, or trained with another config."""


class Unreadable(CheckpointError):
    """A file (checkpoint, model folder, ``metrics.json``, sweep folder) whose contents do not
    parse into what swwae writes there: too large, too deep, not a regular file, or a value of
    the wrong kind. A kind of CheckpointError, so that resume passes over such a checkpoint as
    it does over a corrupt one."""


class Corrupt(CheckpointError):
    """A checkpoint whose contents do not match the checksum written with it: its bytes changed
    since it was saved (a flipped bit). Damage, as an ``Unreadable`` file is, where a file
    swwae never wrote (pickled objects, another model's weights) is a plain CheckpointError."""


class ExportError(UserError):
    """A network that cannot be exported as asked (a missing exporter package, a graph the
    exporter refuses)."""


class NonFiniteError(UserError):
    """Training produced a NaN or infinite loss, or weights; raised before anything
    non-finite is saved over a checkpoint."""


class RunInUseError(UserError):
    """Another process holds the run's checkpoint folder: two runs of one run name would
    overwrite each other's checkpoints and report each other's numbers."""


class DiskError(UserError):
    """A folder that cannot be created or written (read-only, a file in its place), or a write
    that failed (disk full); the message names the path and what is kept."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run; the message says where it stopped, which checkpoint is kept and
    the command that continues it. ``train.py`` prints it and exits with status 130."""

    exit_status = 130
    said_elsewhere = False  # a DDP process's, whose run's owner (rank 0) says the same line


class Preempted(Interrupted):
    """SIGTERM or SIGUSR1 (a scheduler pre-empting the job): a resumable checkpoint was saved
    into the run's folder; the message says which, and how the run goes on. ``train.py``
    exits with 128 + the signal's number, as a process killed by it would."""

    def __init__(self, message: str, signum: int):
        super().__init__(message)
        self.exit_status = 128 + int(signum)


def one_line(err: BaseException, limit: int = 300) -> str:
    """``err`` as one line of at most ``limit`` characters, white space folded: a user error's
    message (it says it all), any other error as ``Type: message``. Either may carry what it
    was given (a path, a value, a file's bytes), so a longer text is cut (``shortened``)."""
    text = " ".join(str(err).split())
    if not (isinstance(err, UserError) and text):
        text = f"{type(err).__name__}: {text}".rstrip(": ")
    return shortened(text, limit)


def plural(n: int, word: str) -> str:
    """``1 job``, ``2 jobs``: a count in a message or a report."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def shortened(text: str, limit: int = 300) -> str:
    """``text`` cut to at most ``limit`` characters, at the last word boundary that keeps more
    than half of it (a word is never cut in two), with ``...`` to say that more was there."""
    if len(text) <= limit:
        return text
    cut = text[: limit - 2]  # one character more than fits: a word ending exactly there is whole
    space = cut.rfind(" ")
    cut = cut[:space] if space > limit // 2 else cut[:-1]
    return cut.rstrip(" ,;:") + "..."


ECHO_LIMIT = 100  # characters of the user's input that an error line shows


def excerpt(text: str, limit: int = ECHO_LIMIT) -> str:
    """What the user gave, as an error line shows it: whole up to ``limit`` characters, a longer
    text as its start and end around ``...`` with its length (a 100 kB value on the command line
    must not come back as a 100 kB error)."""
    text = str(text)
    if len(text) <= limit:
        return text
    half = max(1, (limit - 3) // 2)
    return f"{text[:half]}...{text[-half:]} ({len(text)} characters)"
