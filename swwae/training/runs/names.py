"""A run name is a name: one path component, so that ``checkpoints/<run name>/`` is a folder
inside ``checkpoints/`` and nowhere else. Plain Python, checked before anything is written.

Also the one definition of the names of old runs moved aside by a fresh start
(``<run>.previous-<time>``, ``-<n>`` for a second one in the same second): ``RunFolder.move_aside``
writes them, ``swwae runs`` recognises them."""

from __future__ import annotations

import re
import time
from pathlib import PurePath

from swwae.errors import ConfigError

NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", re.ASCII)
RESERVED = {"quick": "debug=quick's runs have their own root, checkpoints/quick/"}
MAX_LENGTH = 200  # with ".previous-<time>" and ".owner.json" added, within a file system's 255 bytes
ASIDE_STAMP = "%Y%m%d-%H%M%S"  # the <time> of a moved-aside run's name
MOVED_ASIDE = re.compile(r"\.previous-\d{8}-\d{6}(-\d+)?$")  # the names aside_name gives


def arch_tag(arch) -> str:
    """The default run name's part for ``model.arch``: nothing without one, else the network as
    a name (``(16)5c-(32)3c-2p`` -> ``_16x5c-32x3c-2p``), so that a network written out gets a
    folder of its own instead of meeting the shorthand's run in one (configs/train.yaml)."""
    if arch is None or str(arch) in ("", "None"):
        return ""
    text = re.sub(r"\(([0-9]+)\)", r"\1x", str(arch))
    return "_" + re.sub(r"[^A-Za-z0-9._-]", "", text)


def aside_stamp() -> str:
    """The current local time as a moved-aside name's <time> (``20260101-120000``)."""
    return time.strftime(ASIDE_STAMP)


def aside_name(name: str, stamp: str, number: int = 1) -> str:
    """The folder name of run ``name`` moved aside at ``stamp`` (``aside_stamp()``); ``number``
    > 1 for another one moved aside in the same second."""
    return f"{name}.previous-{stamp}" + (f"-{number}" if number > 1 else "")


def is_moved_aside(folder: str | PurePath) -> bool:
    """Whether a folder (its path or its name) is an old run moved aside (``aside_name``)."""
    return bool(MOVED_ASIDE.search(PurePath(folder).name))


def register_resolver() -> None:
    """``${swwae.arch_tag:${model.arch}}`` for the configs (on import: the Hydra callbacks and
    the job import this module before the run name is resolved)."""
    from omegaconf import OmegaConf

    OmegaConf.register_new_resolver("swwae.arch_tag", arch_tag, replace=True)


def check_run_name(name: object) -> str:
    """``name``, or ConfigError (one line) unless it is letters, digits and ``._-`` only, not
    starting with a dot (no ``..``, no hidden folder beside the locks), not empty and not
    reserved."""
    text = "" if name is None else str(name)
    if not text:
        raise ConfigError("run_name is empty: give the run a name, e.g. run_name=my_run")
    if len(text) > MAX_LENGTH or not NAME.fullmatch(text):
        bad = next((c for c in text if not re.fullmatch(r"[A-Za-z0-9._-]", c, re.ASCII)), None)
        why = (
            f"{len(text)} characters, more than {MAX_LENGTH}"
            if len(text) > MAX_LENGTH
            else "it starts with a dot"
            if bad is None
            else f"{bad!r} is not allowed"
        )
        raise ConfigError(
            f"run_name={text[:80]!r} is not a name ({why}): use letters, digits and ._- only, "
            f"not starting with a dot; it names one folder under paths.checkpoint_dir"
        )
    if text in RESERVED:
        raise ConfigError(f"run_name={text} is reserved ({RESERVED[text]}): choose another name")
    return text


register_resolver()
