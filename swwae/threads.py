"""CPU threads: fast alone, fair when shared. OpenMP's settings, chosen before torch loads.

torch's CPU kernels run on OpenMP threads, which wait for work between parallel regions. A
thread that spins while it waits (OpenMP's ACTIVE wait) answers at once, which is what a run
alone on its machine wants: sleeping threads (``PASSIVE``) pay a wake-up at every region. On a
machine whose cores are taken by other processes, spinning is a disaster: a spinning thread
holds a core that a descheduled team-mate needs before anyone can go on, and epochs take many
times longer. ``python scripts/bench_neighbours.py`` measures both.

So the job reads the machine once, before torch loads: how many CPUs this process may use
(its affinity, a cgroup v2 ``cpu.max`` quota) and how many threads of other processes are
runnable (``/proc/loadavg``'s running count). It runs one thread per usable CPU; if each has a
free CPU it leaves the wait to the OpenMP runtime (libgomp spins a bounded while, about 3 ms,
then sleeps), and if not, the threads sleep while they wait (``PASSIVE``). One reading is one
instant, and an idle machine shows a passing runnable thread (a kernel worker, a shell waking)
in a few readings out of a hundred, which would send a run alone to the slower sleeping wait;
so the count is the median of ``SAMPLES`` readings ``SAMPLE_GAP_S`` apart (``typical_count``):
a busy neighbour is runnable in every reading, a passing thread in one. It reads a few small
files, sleeps about 8 ms between the readings and starts nothing: about 10 ms at every start.

The settings are the standard environment variables, read once when torch's OpenMP runtime
starts; a value you set is kept, and the rest is decided around it:

* ``OMP_NUM_THREADS=N``: N threads (``MKL_NUM_THREADS`` counts too);
* ``OMP_WAIT_POLICY=ACTIVE`` or ``PASSIVE``, ``GOMP_SPINCOUNT=N`` (libgomp, torch's runtime on
  Linux), ``KMP_BLOCKTIME=ms`` (Intel/LLVM OpenMP): the wait is yours.

This module imports nothing heavy (no torch): importing it must not load torch.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

THREADS = "OMP_NUM_THREADS"
WAIT_POLICY = "OMP_WAIT_POLICY"
THREAD_SETTINGS = (THREADS, "MKL_NUM_THREADS")
WAIT_SETTINGS = (WAIT_POLICY, "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "KMP_LIBRARY")
SAMPLES = 5  # readings of the running count: a passing thread is in one, a busy neighbour in all
SAMPLE_GAP_S = 0.002  # between readings: the window is 8 ms


@dataclass(frozen=True)
class Machine:
    """What the decision needs to know about the machine as the run starts."""

    cpus: int  # the CPUs this process may run on (its affinity): the OpenMP runtime's default threads
    others_running: int  # runnable threads of other processes as the run starts (typical_count)
    quota: int | None = None  # the CPUs its cgroup's quota allows, if it has one
    readings: tuple[int, ...] = ()  # the readings others_running was taken from, for the log

    @property
    def usable_cpus(self) -> int:
        return min(self.cpus, self.quota) if self.quota else self.cpus

    @property
    def free_cpus(self) -> int:
        return max(0, self.usable_cpus - self.others_running)


@dataclass(frozen=True)
class ThreadChoice:
    """The settings to add to the environment (none of them set by the user) and why."""

    settings: dict[str, str] = field(default_factory=dict)
    reason: str = ""


def user_threads(environ: Mapping[str, str]) -> int | None:
    """The thread count the user set, if any (an unreadable value counts as unset)."""
    for name in THREAD_SETTINGS:
        value = environ.get(name, "").split(",")[0].strip()  # OMP_NUM_THREADS may list nested levels
        if value.isdigit() and int(value) > 0:
            return int(value)
    return None


def decide_threads(environ: Mapping[str, str], machine: Machine) -> ThreadChoice:
    """The OpenMP settings for a run that starts on ``machine``: the thread count and the wait,
    each left to the user where the user set it.

    Threads: one per usable CPU (the runtime's default, but within a cgroup quota). Fewer, one
    per free CPU, was measured slower beside busy processes: the scheduler shares a core among
    threads, so a smaller team gets a smaller share. The wait: if every thread has a free CPU,
    the runtime's own (libgomp spins a bounded while, then sleeps); if not, threads sleep while
    they wait, so that none spins on a core that a descheduled team-mate needs."""
    settings: dict[str, str] = {}
    seen = (
        f"{machine.usable_cpus} usable CPU{'s' * (machine.usable_cpus != 1)}, "
        f"{machine.others_running} other runnable thread{'s' * (machine.others_running != 1)}"
    )
    if len(machine.readings) > 1:
        seen += f": the median of {','.join(map(str, machine.readings))}"
    threads = user_threads(environ)
    if any(name in environ for name in THREAD_SETTINGS):
        why_threads = f"{threads or 'the runtime default'} thread{'s' * (threads != 1)}, as set"
        threads = threads or machine.cpus
    else:
        threads = machine.usable_cpus
        if threads != machine.cpus:  # the runtime counts the affinity, not the quota
            settings[THREADS] = str(threads)
        why_threads = f"{threads} thread{'s' * (threads != 1)}, one per usable CPU"
    if any(name in environ for name in WAIT_SETTINGS):
        why_wait = "the wait as set"
    elif threads <= machine.free_cpus:
        why_wait = "the runtime's own bounded spin (CPUs free)"
    else:
        settings[WAIT_POLICY] = "PASSIVE"
        why_wait = "threads sleep while they wait (CPUs busy)"
    return ThreadChoice(settings, f"{why_threads}; {why_wait} ({seen})")


# reading the machine: a few small files, nothing started, no waiting


def read_ascii(path: str) -> str | None:
    try:
        with open(path, encoding="ascii") as f:
            return f.read()
    except (OSError, ValueError):
        return None


def cgroup_cpu_limit() -> int | None:
    """The CPUs a cgroup v2 ``cpu.max`` quota allows this process (rounded up), if it has one."""
    text = read_ascii("/proc/self/cgroup") or ""
    path = next((line[3:].strip() for line in text.splitlines() if line.startswith("0::")), None)
    if path is None:
        return None
    quota = (read_ascii(f"/sys/fs/cgroup{path.rstrip('/')}/cpu.max") or "").split()
    if len(quota) != 2 or not quota[0].isdigit() or not quota[1].isdigit() or int(quota[1]) == 0:
        return None  # "max 100000": no quota
    return max(1, math.ceil(int(quota[0]) / int(quota[1])))


def affinity_cpus() -> int:
    """The CPUs this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        return os.cpu_count() or 1


def typical_count(readings: Sequence[int]) -> int:
    """The runnable threads of other processes a run will meet, from readings of the running
    count taken a few milliseconds apart: their median (the lower one of an even count), so that
    a thread runnable in a minority of readings (passing by) does not count, and a neighbour
    runnable in most of them (busy) does. No readings: none runnable."""
    return statistics.median_low(readings) if readings else 0


def running_now() -> int | None:
    """Runnable threads of other processes at this instant: ``/proc/loadavg``'s running count
    less this one; None where there is no such file (not Linux)."""
    fields = (read_ascii("/proc/loadavg") or "").split()
    running = fields[3].partition("/")[0] if len(fields) > 3 else ""
    return max(0, int(running) - 1) if running.isdigit() else None


def read_running(samples: int = SAMPLES, gap_s: float = SAMPLE_GAP_S) -> tuple[int, ...]:
    """``samples`` readings of :func:`running_now`, ``gap_s`` apart; where the running count
    cannot be read, one reading: the one-minute load average, already an average over time."""
    readings = []
    for number in range(samples):
        if number:
            time.sleep(gap_s)
        now = running_now()
        if now is None:
            try:
                return (round(os.getloadavg()[0]),)
            except (AttributeError, OSError):
                return ()
        readings.append(now)
    return tuple(readings)


def read_machine() -> Machine:
    readings = read_running()
    return Machine(affinity_cpus(), typical_count(readings), cgroup_cpu_limit(), readings)


# the job's call

chosen: ThreadChoice | None = None  # what this process decided, for the job's log


def choose_threads(environ: dict[str, str] | None = None, machine: Machine | None = None) -> ThreadChoice | None:
    """Decide the OpenMP settings and put them in the environment (this process's and its
    children's), first thing, before torch loads. None if torch is already loaded: its runtime
    has read the environment then, and nothing is changed. ``machine``: as read already (the
    benchmark records what the decision saw); by default read now."""
    global chosen
    if "torch" in sys.modules:
        return None
    environ = os.environ if environ is None else environ
    decision = decide_threads(environ, machine or read_machine())
    environ.update(decision.settings)
    chosen = decision
    return decision


def set_passive_wait() -> ThreadChoice | None:
    """The name the entry points called before the wait was chosen by the machine's load:
    :func:`choose_threads`."""
    return choose_threads()


def describe(threads_used: int | None = None) -> str:
    """The threads and the wait this process runs with, and why: for the job's debug log
    (``threads_used``: torch's count, which the caller reads)."""
    names = (*THREAD_SETTINGS, *WAIT_SETTINGS)
    values = ", ".join(f"{name}={os.environ[name]}" for name in names if name in os.environ) or "none set"
    why = chosen.reason if chosen else "not chosen by swwae.threads (torch was loaded first, or no one asked)"
    used = f"{threads_used} threads; " if threads_used is not None else ""
    return f"OpenMP: {used}{values}; {why}"
