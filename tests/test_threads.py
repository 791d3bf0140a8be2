"""OpenMP's threads and wait, chosen before torch loads (``swwae.threads``): the decision as a
table of made-up machines, and in a fresh process, where torch must load after it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.config import ROOT
from swwae import threads
from swwae.threads import Machine, decide_threads

IDLE = Machine(cpus=8, others_running=0)
HALF_BUSY = Machine(cpus=8, others_running=5)
FULL = Machine(cpus=2, others_running=2)
PINNED = Machine(cpus=2, others_running=0)  # taskset -c 0,1 on a bigger machine: the affinity counts
QUOTA = Machine(cpus=8, others_running=0, quota=3)  # cgroup v2 cpu.max "250000 100000"
QUOTA_BUSY = Machine(cpus=8, others_running=2, quota=3)
PASSIVE = {"OMP_WAIT_POLICY": "PASSIVE"}


@pytest.mark.parametrize(
    ("environ", "machine", "settings", "reason"),
    [
        ({}, IDLE, {}, "8 threads, one per usable CPU; the runtime's own bounded spin"),
        ({}, PINNED, {}, "2 threads, one per usable CPU"),
        ({}, HALF_BUSY, PASSIVE, "8 threads, one per usable CPU; threads sleep"),
        ({}, FULL, PASSIVE, "2 threads, one per usable CPU; threads sleep"),
        ({}, Machine(cpus=2, others_running=9), PASSIVE, "(2 usable CPUs, 9 other runnable threads)"),
        ({}, QUOTA, {"OMP_NUM_THREADS": "3"}, "3 threads, one per usable CPU; the runtime's own"),
        ({}, QUOTA_BUSY, {"OMP_NUM_THREADS": "3", **PASSIVE}, "3 threads, one per usable CPU; threads sleep"),
        # the user's values are kept, and the rest is decided around them
        ({"OMP_WAIT_POLICY": "ACTIVE"}, FULL, {}, "the wait as set"),
        ({"GOMP_SPINCOUNT": "1000"}, QUOTA_BUSY, {"OMP_NUM_THREADS": "3"}, "the wait as set"),
        ({"KMP_BLOCKTIME": "0"}, FULL, {}, "the wait as set"),
        ({"OMP_NUM_THREADS": "4"}, IDLE, {}, "4 threads, as set; the runtime's own bounded spin"),
        ({"OMP_NUM_THREADS": "3"}, HALF_BUSY, {}, "3 threads, as set; the runtime's own"),  # 3 CPUs are free
        ({"OMP_NUM_THREADS": "4"}, HALF_BUSY, PASSIVE, "4 threads, as set; threads sleep"),
        ({"OMP_NUM_THREADS": "16"}, IDLE, PASSIVE, "16 threads, as set; threads sleep"),
        ({"MKL_NUM_THREADS": "1"}, FULL, PASSIVE, "1 thread, as set"),
        ({"OMP_NUM_THREADS": "many"}, QUOTA, PASSIVE, "the runtime default threads, as set"),  # 8 on 3 CPUs
        ({"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "ACTIVE"}, FULL, {}, "2 threads, as set; the wait as set"),
    ],
)
def test_the_decision(environ, machine, settings, reason):
    decision = decide_threads(environ, machine)
    assert decision.settings == settings
    assert reason in decision.reason
    assert not set(decision.settings) & set(environ)  # nothing the user set is overridden


def test_free_and_usable_cpus():
    assert (QUOTA.usable_cpus, QUOTA.free_cpus, QUOTA_BUSY.free_cpus) == (3, 3, 1)
    assert (FULL.free_cpus, Machine(cpus=2, others_running=5).free_cpus) == (0, 0)


@pytest.mark.parametrize(
    ("readings", "busy"),
    [
        ((0, 0, 0, 0, 0), 0),
        ((0, 1, 0, 0, 0), 0),  # a thread passing by (an idle machine shows one in a few readings of 100)
        ((0, 2, 1, 0, 0), 0),
        ((2, 2, 1, 2, 3), 2),  # two busy neighbours, one of them descheduled for a reading
        ((0, 1, 1, 0, 1), 1),  # runnable in most readings: busy
        ((0, 1), 0),  # an even count: the lower middle
        ((3,), 3),  # one reading (the load average, where no running count can be read)
        ((), 0),
    ],
)
def test_the_count_is_the_median_of_the_readings(readings, busy):
    assert threads.typical_count(readings) == busy


def test_a_passing_thread_leaves_an_idle_machine_to_the_runtimes_wait():
    seen = threads.typical_count((0, 1, 0, 0, 0))
    assert decide_threads({}, Machine(cpus=2, others_running=seen)).settings == {}
    busy = threads.typical_count((2, 1, 2, 2, 2))
    assert decide_threads({}, Machine(cpus=2, others_running=busy)).settings == PASSIVE


def test_the_machine_is_read_from_its_files(monkeypatch):
    files = {
        "/proc/self/cgroup": "0::/user.slice/job\n",
        "/sys/fs/cgroup/user.slice/job/cpu.max": "150000 100000\n",
    }
    loads = iter(["1.50 1.20 0.90 4/311 12345\n", "1.50 1.20 0.90 1/311 12346\n", "1.50 1.20 0.90 4/311 12347\n"])
    monkeypatch.setattr(threads, "read_ascii", lambda path: next(loads) if path == "/proc/loadavg" else files.get(path))
    readings = threads.read_running(samples=3, gap_s=0)
    assert readings == (3, 0, 3)  # four runnable, this process among them; once only this one
    assert threads.typical_count(readings) == 3
    assert threads.cgroup_cpu_limit() == 2  # 1.5 CPUs: two threads share them
    files["/sys/fs/cgroup/user.slice/job/cpu.max"] = "max 100000\n"
    assert threads.cgroup_cpu_limit() is None
    files["/proc/self/cgroup"] = "12:cpu,cpuacct:/\n"  # cgroup v1 only
    assert threads.cgroup_cpu_limit() is None
    monkeypatch.setattr(threads, "read_ascii", files.get)  # not Linux: the one-minute load average
    monkeypatch.setattr(os, "getloadavg", lambda: (2.6, 1.0, 0.5))
    assert threads.read_running(samples=3, gap_s=0) == (3,)


def test_the_reason_shows_the_readings():
    machine = Machine(cpus=2, others_running=0, readings=(0, 1, 0, 0, 0))
    assert "(2 usable CPUs, 0 other runnable threads: the median of 0,1,0,0,0)" in decide_threads({}, machine).reason


def python(code: str, **env) -> str:
    """``python -c code`` in a fresh process (torch not loaded yet), OpenMP's variables cleared unless given."""
    cleared = (*threads.THREAD_SETTINGS, *threads.WAIT_SETTINGS)
    environ = {k: v for k, v in os.environ.items() if k not in cleared} | env
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    ).stdout.strip()


# in the child: what it decided, whether torch was loaded then, and the variables torch then reads
DECIDE = (
    "import os, sys\n"
    "from swwae.threads import choose_threads\n"
    "decision = choose_threads()\n"
    "print('torch' in sys.modules, decision is not None)\n"
    "import torch\n"
    "print(os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'), os.environ.get('GOMP_SPINCOUNT'))\n"
)


def test_decided_in_the_environment_before_torch_loads():
    loaded_first, decided = python(DECIDE).splitlines()[0].split()
    assert (loaded_first, decided) == ("False", "True")


def test_a_users_values_are_kept():
    lines = python(DECIDE, OMP_WAIT_POLICY="ACTIVE", OMP_NUM_THREADS="2").splitlines()
    assert lines[:2] == ["False True", "ACTIVE 2 None"]
    lines = python(DECIDE, GOMP_SPINCOUNT="1000", OMP_NUM_THREADS="1").splitlines()
    assert lines[1] == "None 1 1000"  # a spin count is a wait: no policy added


def test_too_late_once_torch_is_loaded_so_nothing_is_changed():
    code = (
        "import torch, os; from swwae.threads import choose_threads; "
        "print(choose_threads(), os.environ.get('OMP_WAIT_POLICY'), os.environ.get('OMP_NUM_THREADS'))"
    )
    assert python(code) == "None None None"


def test_the_old_name_still_decides():
    code = "import sys; from swwae import threads; "
    code += "print(threads.set_passive_wait().reason > '', 'torch' in sys.modules)"
    assert python(code) == "True False"


def test_importing_swwae_loads_no_torch_and_its_pooling_names_still_come():
    assert (
        python("import sys, swwae; print('torch' in sys.modules); print(swwae.WhatWherePool.__name__)")
        == "False\nWhatWherePool"
    )


REPORT = "import os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


@pytest.mark.slow
@pytest.mark.parametrize("program", ["train.py", "scripts/probe.py", "scripts/export.py"])
def test_the_job_and_the_scripts_decide_before_torch_loads(program):
    """The program's imports run (not its main): the settings are chosen, and a user's value kept;
    the scripts load torch after that, train.py not at all (bad input answers before torch)."""
    code = (
        f"import runpy; g = runpy.run_path({program!r}, run_name='imported'); from swwae import threads; "
        f"print(threads.chosen is not None); {REPORT}"
    )
    loads_torch = program != "train.py"
    assert python(code, OMP_WAIT_POLICY="ACTIVE").splitlines() == ["True", f"ACTIVE {loads_torch}"]
