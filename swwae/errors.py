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


class ExportError(UserError):
    """A network that cannot be exported as asked (a missing exporter package, a graph the
    exporter refuses)."""


class NonFiniteError(UserError):
    """Training produced a NaN or infinite loss, or weights; raised before anything
    non-finite is saved over a checkpoint."""


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a run; the message says where it stopped, which checkpoint is kept and
    the command that continues it. ``train.py`` prints it and exits with status 130."""


def one_line(err: BaseException, limit: int = 300) -> str:
    """``err`` as one line, white space folded: a user error's message (it says it all);
    any other error as ``Type: message``, cut to ``limit`` characters."""
    text = " ".join(str(err).split())
    if isinstance(err, UserError) and text:
        return text
    text = f"{type(err).__name__}: {text}".rstrip(": ")
    return text if len(text) <= limit else text[: limit - 3] + "..."
