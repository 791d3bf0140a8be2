"""Progress of the scripts' long jobs (probes, studies, exports, sweep figures): a bar on a
terminal, one line per step otherwise (a log file, a pipe, a scheduler's output), on stderr so
that stdout keeps only the results.

    for net in progress(nets, "probe", name=lambda net: net.name):
        ...

The line of a step is written when the step starts, so a log shows what is running now:
``probe 2/5 (14 s): random weights (8)3c-2p``. Plain Python and tqdm (a dependency of
Lightning's, declared in pyproject.toml); nothing here imports torch.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TextIO, TypeVar

T = TypeVar("T")


def on_terminal(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress(
    items: Iterable[T],
    what: str,
    name: Callable[[T], str] = str,
    total: int | None = None,
    stream: TextIO | None = None,
    summary: str | None = None,
) -> Iterator[T]:
    """The items of ``items``, reported as they are reached: ``what`` names the job, ``name``
    each step; ``total`` defaults to ``len(items)`` where it has one. ``stream`` defaults to
    the stderr of the moment (pytest's capture, a redirect). ``summary``: what the closing line
    says was done (default: the number of steps), where a step is a batch of the work."""
    stream = sys.stderr if stream is None else stream
    if total is None and hasattr(items, "__len__"):
        total = len(items)
    if on_terminal(stream):
        yield from bar(items, what, name, total, stream)
        return
    started, done = time.perf_counter(), 0
    for done, item in enumerate(items, start=1):
        count = f"{done}/{total}" if total is not None else str(done)
        print(f"{what} {count} ({time.perf_counter() - started:.0f} s): {name(item)}", file=stream, flush=True)
        yield item
    if summary or done != 1:  # one step's own line said it all: no "1 done" after it
        print(f"{what}: {summary or f'{done} done'} ({time.perf_counter() - started:.0f} s)", file=stream, flush=True)


def bar(items: Iterable[T], what: str, name: Callable[[T], str], total: int | None, stream: TextIO) -> Iterator[T]:
    from tqdm import tqdm

    with tqdm(items, desc=what, total=total, file=stream, dynamic_ncols=True, leave=True) as steps:
        for item in steps:
            steps.set_postfix_str(name(item), refresh=True)
            yield item
