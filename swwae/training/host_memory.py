"""Keep freed host memory for reuse, instead of handing it back to the OS after every step.

glibc returns large freed blocks to the OS: ``mmap``-ed ones at once, and the top of the
heap once more than a trim threshold of it is free. A training step on CPU frees its
activations at the end and allocates them again in the next, so every step then faults
them back in, page by page, each page zeroed by the kernel: for a cheap element-wise op
that costs more than its arithmetic (soft pooling runs many of them: its training step
went from 1.54x to 1.24x native with this, ``scripts/bench_training.py``). jemalloc and
tcmalloc keep freed memory by default; this asks glibc to do the same.

It is process-wide, so it is the application's call, never the library's: the training
job makes it (``keep_freed_memory: true`` in configs/train.yaml), ``swwae.pooling`` does not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import sys

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, <malloc.h>
TRIM_THRESHOLD = 1 << 30  # free memory kept at the top of the heap before glibc trims it
MMAP_THRESHOLD = 1 << 25  # 32 MiB, glibc's maximum: smaller blocks come from the heap


def keep_freed_memory() -> bool:
    """Ask glibc (``mallopt``) to keep up to 1 GiB of freed memory and to serve blocks up to
    32 MiB from its heap. True if applied; False elsewhere (macOS, Windows, musl), where
    nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))
