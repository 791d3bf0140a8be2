"""Bounded reading of files that users, folders or other files point at: regular files only,
their size and nesting limited before anything is built from them.

A path that a file names (a ``metrics.json``'s checkpoint, a stored ``output_dir``), or a file
of a folder a user points at (``config.json``, ``.hydra/overrides.yaml``), may be a device
(``/dev/zero`` never ends), a FIFO (a read blocks forever), huge, or nested deeper than
Python's parsers recurse. Every read here opens without blocking, refuses anything but a
regular file, reads at most ``limit`` bytes, and checks the depth and the number of items of
what the parser built before it is used. What does not pass is ``Unreadable``, in one line.
Pure standard library (and PyYAML for YAML).
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Mapping
from pathlib import Path

from swwae.errors import Unreadable, one_line

TEXT_LIMIT = 1 << 20  # bytes: a metrics.json, config.json or .hydra/*.yaml is a few kB
DEPTH_LIMIT = 32  # containers inside containers: swwae writes at most 8
ITEMS_LIMIT = 100_000  # keys, values and list items together

# helpers


def open_regular(path, what: str = "file") -> int:
    """A read-only descriptor of ``path``, or Unreadable unless it is a regular file (after
    symlinks). Opened without blocking, so a FIFO cannot hang the open itself."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        if os.path.islink(path):  # its disk not mounted? said as it is, not as no file at all
            raise Unreadable(f"{what} {path} is a link to {os.readlink(path)}, which does not exist") from None
        raise Unreadable(f"{what} {path} does not exist") from None
    except OSError as err:
        raise Unreadable(f"{what} {path} is unreadable: {err.strerror or one_line(err)}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        kind = "a folder" if stat.S_ISDIR(os.fstat(fd).st_mode) else "a device, FIFO or socket"
        os.close(fd)
        raise Unreadable(f"{what} {path} is unreadable: it is {kind}, not a regular file")
    os.set_blocking(fd, True)
    return fd


def check_nesting(value, source: str, depth: int = DEPTH_LIMIT, items: int = ITEMS_LIMIT):
    """``value``, or Unreadable if containers nest deeper than ``depth`` or hold more than
    ``items`` entries in all. Iterative: a value nested 20,000 deep is refused, not recursed into;
    a shared value (a YAML alias) counts each time it is reached."""
    stack, seen = [(value, 0)], 0
    while stack:
        node, level = stack.pop()
        if isinstance(node, Mapping):
            children = [*node.keys(), *node.values()]
        elif isinstance(node, (list, tuple)):
            children = list(node)
        else:
            continue
        if level >= depth:
            raise Unreadable(f"{source} is unreadable: nested deeper than {depth} levels")
        seen += len(children)
        if seen > items:
            raise Unreadable(f"{source} is unreadable: more than {items:,} entries")
        stack.extend((child, level + 1) for child in children)
    return value


# reading


def read_bytes(path, what: str = "file", limit: int = TEXT_LIMIT) -> bytes:
    """The bytes of the regular file ``path``, or Unreadable if it holds more than ``limit``."""
    fd = open_regular(path, what)
    with os.fdopen(fd, "rb") as f:
        data = f.read(limit + 1)
    if len(data) > limit:
        raise Unreadable(f"{what} {path} is unreadable: larger than {limit:,} bytes")
    return data


def read_text(path, what: str = "file", limit: int = TEXT_LIMIT) -> str:
    try:
        return read_bytes(path, what, limit).decode("utf-8")
    except UnicodeDecodeError as err:
        raise Unreadable(f"{what} {path} is unreadable: not UTF-8 text ({err.reason})") from None


def read_json(path, what: str = "file", limit: int = TEXT_LIMIT):
    """The JSON value of ``path``, bounded in size before parsing and in nesting after."""
    text = read_text(path, what, limit)
    try:
        value = json.loads(text)
    except RecursionError:
        raise Unreadable(f"{what} {path} is unreadable: nested deeper than {DEPTH_LIMIT} levels") from None
    except ValueError as err:
        raise Unreadable(f"{what} {path} is unreadable: not JSON ({one_line(err, limit=120)})") from None
    return check_nesting(value, f"{what} {path}")


def read_yaml(path, what: str = "file", limit: int = TEXT_LIMIT):
    """The YAML value of ``path`` (``yaml.safe_load``: plain values only), bounded as
    ``read_json`` is."""
    import yaml

    text = read_text(path, what, limit)
    try:
        value = yaml.safe_load(text)
    except RecursionError:
        raise Unreadable(f"{what} {path} is unreadable: nested deeper than {DEPTH_LIMIT} levels") from None
    except (yaml.YAMLError, ValueError) as err:
        raise Unreadable(f"{what} {path} is unreadable: not YAML ({one_line(err, limit=120)})") from None
    return check_nesting(value, f"{what} {path}")


def sha256_of(path, what: str = "file") -> str:
    """SHA-256 of a regular file's bytes, as ``sha256sum`` prints it (a device or FIFO is
    Unreadable, never read: ``/dev/zero`` would never end)."""
    digest = hashlib.sha256()
    with os.fdopen(open_regular(path, what), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def is_inside(path, folder) -> bool:
    """Whether ``path``, symlinks resolved, lies in ``folder`` (resolved too)."""
    try:
        return Path(path).resolve().is_relative_to(Path(folder).resolve())
    except (OSError, RuntimeError, ValueError):  # a symlink loop, a NUL in the name
        return False
