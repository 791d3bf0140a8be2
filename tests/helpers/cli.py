"""The one launcher of the subprocess tests: ``python train.py ...`` or a script, run the
way a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.config import QUICK, ROOT

TESTS = ROOT / "tests"


def run_cli(
    *args, cwd: Path, timeout: int = 300, env: dict | None = None, program: str = sys.executable
) -> subprocess.CompletedProcess:
    """``python <args>`` (or ``<program> <args>``, e.g. ``bash``) in ``cwd``, output captured (so
    not a terminal: one progress line per epoch). ``tests/`` and the checkout are importable,
    so overrides can load the fault-injection callbacks of ``helpers.faults`` by dotted path.
    SIGINT gets its default disposition: a shell that backgrounds the job (CI under ``nohup
    ... &``) would have it ignored, and Ctrl-C tests need it as a terminal gives it."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", HYDRA_FULL_ERROR="0", **(env or {}))
    env["PYTHONPATH"] = os.pathsep.join([str(TESTS), str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run(
        [program, *map(str, args)],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


def train_cli(
    tmp: Path, *overrides, name: str = "run", quick=QUICK, timeout: int = 300, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``python train.py <quick> <overrides>`` launched in ``tmp``: checkpoints and logs land in
    ``tmp/checkpoints`` and ``tmp/logs`` (the default relative paths), the run folder in
    ``tmp/outputs/<name>``."""
    return run_cli(
        ROOT / "train.py",
        *quick,
        f"hydra.run.dir={tmp / 'outputs' / name}",
        *overrides,
        cwd=tmp,
        timeout=timeout,
        env=env,
    )


def last_error_line(result: subprocess.CompletedProcess) -> str:
    return result.stderr.strip().splitlines()[-1]
