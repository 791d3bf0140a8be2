"""CPU threads on a shared machine: OpenMP waits without spinning unless the user says otherwise.

torch's CPU kernels run on OpenMP threads. Between parallel regions each thread spins,
busy-waiting for the next one (OpenMP's ACTIVE wait, the default). On a machine with a core
for every thread that saves a wake-up; on a shared machine the spinning threads take cores
that other processes (and the job's own other threads) need, and everyone slows down
(``python scripts/bench_neighbours.py`` measures it). So the job and the heavy scripts call
:func:`set_passive_wait` first thing, before torch loads: threads sleep while they wait.

The threads are set by the standard environment variables, read once when torch's OpenMP
runtime starts, which is before any config is read:

* ``OMP_NUM_THREADS=N``: N threads (torch's default: one per core);
* ``OMP_WAIT_POLICY=ACTIVE``: spin as OpenMP does by default (a machine of your own); the
  job leaves a value you set as it is.

This module imports nothing but ``os`` and ``sys``: importing it must not load torch.
"""

from __future__ import annotations

import os
import sys

WAIT_POLICY = "OMP_WAIT_POLICY"
DEFAULT_WAIT_POLICY = "PASSIVE"


def set_passive_wait() -> bool:
    """Set ``OMP_WAIT_POLICY=PASSIVE`` for this process and its children, unless the user set
    it. True if it was set now; False if the user's value stands or torch was already loaded
    (its OpenMP runtime has read the environment then: too late, nothing is changed)."""
    if WAIT_POLICY in os.environ or "torch" in sys.modules:
        return False
    os.environ[WAIT_POLICY] = DEFAULT_WAIT_POLICY
    return True
