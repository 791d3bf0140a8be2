"""A good neighbour on a shared machine: the job and the heavy scripts set
``OMP_WAIT_POLICY=PASSIVE`` before torch loads (``swwae.threads``), unless the user set it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from helpers.config import ROOT


def python(code: str, **env) -> str:
    """``python -c code`` in a fresh process (torch not loaded yet), the wait policy unset unless given."""
    environ = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | env
    environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), environ.get("PYTHONPATH", "")])
    return subprocess.run(
        [sys.executable, "-c", code], env=environ, cwd=ROOT, capture_output=True, text=True, check=True, timeout=300
    ).stdout.strip()


REPORT = "import os, sys; print(os.environ.get('OMP_WAIT_POLICY'), 'torch' in sys.modules)"


def test_set_before_torch_loads_unless_the_user_chose():
    assert (
        python(f"from swwae.threads import set_passive_wait; print(set_passive_wait()); {REPORT}")
        == "True\nPASSIVE False"
    )
    assert (
        python(
            f"from swwae.threads import set_passive_wait; print(set_passive_wait()); {REPORT}", OMP_WAIT_POLICY="ACTIVE"
        )
        == "False\nACTIVE False"
    )


def test_too_late_once_torch_is_loaded_so_nothing_is_claimed():
    assert (
        python(f"import torch; from swwae.threads import set_passive_wait; print(set_passive_wait()); {REPORT}")
        == "False\nNone True"
    )


def test_importing_swwae_loads_no_torch_and_its_pooling_names_still_come():
    assert (
        python("import sys, swwae; print('torch' in sys.modules); print(swwae.WhatWherePool.__name__)")
        == "False\nWhatWherePool"
    )


@pytest.mark.slow
@pytest.mark.parametrize("program", ["train.py", "scripts/probe.py", "scripts/export.py"])
def test_the_job_and_the_scripts_run_with_the_passive_policy(program):
    """The program's imports run (not its main): torch is loaded, and it was loaded after the policy was set."""
    code = f"import runpy; runpy.run_path({program!r}, run_name='imported'); {REPORT}"
    assert python(code) == "PASSIVE True"
    assert python(code, OMP_WAIT_POLICY="ACTIVE") == "ACTIVE True"
