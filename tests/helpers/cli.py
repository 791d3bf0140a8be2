"""The launchers of the command tests: ``python train.py ...`` or a script in a process of its
own, run the way a user runs it (``run_cli``, ``train_cli``), or the same command in the test's
own process (``train_here``, ``command_here``, ``swwae_here``: the same result, without a new
interpreter's imports)."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import signal
import subprocess
import sys
import traceback
import warnings
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
    return run_cli(ROOT / "train.py", *train_args(tmp, overrides, name, quick), cwd=tmp, timeout=timeout, env=env)


def train_args(tmp: Path, overrides, name: str, quick) -> list:
    """``train_cli``'s and ``train_here``'s command line: the quick settings, the run folder
    ``tmp/outputs/<name>``, the test's overrides."""
    return [*quick, f"hydra.run.dir={tmp / 'outputs' / name}", *overrides]


def last_error_line(result: subprocess.CompletedProcess) -> str:
    return result.stderr.strip().splitlines()[-1]


@contextlib.contextmanager
def kept_logging():
    """The logging set up inside the block (Hydra's job logging, Lightning's handlers: bound to
    the streams of that moment) goes with it: a later warning would otherwise be written to a
    closed stream, as Python's "--- Logging error ---" traceback."""
    loggers = [logging.getLogger()] + [
        logger for logger in logging.Logger.manager.loggerDict.values() if isinstance(logger, logging.Logger)
    ]
    saved = {logger: (list(logger.handlers), logger.level, logger.propagate) for logger in loggers}
    try:
        yield
    finally:
        for logger, (handlers, level, propagate) in saved.items():
            logger.handlers[:], logger.level, logger.propagate = handlers, level, propagate


def train_here(
    tmp: Path, *overrides, name: str = "run", quick=QUICK, env: dict | None = None
) -> subprocess.CompletedProcess:
    """``train_cli``'s twin in this process (``command_here``)."""
    return command_here(*train_args(tmp, overrides, name, quick), cwd=tmp, env=env)


def command_here(
    *args, cwd: Path, env: dict | None = None, configs: Path | None = ROOT / "configs"
) -> subprocess.CompletedProcess:
    """``run_cli(ROOT / "train.py", *args, cwd=cwd)`` in this process: the same command (over the
    clone's configs; ``configs=None``: ``swwae train``'s, the package's) and the same result (exit
    status, stdout, stderr; an uncaught exception is a traceback and status 1). A quick run spends
    about three quarters of a new process in imports (torch, Lightning, torchmetrics); here they
    are loaded once. What a run changes in the process (the working folder, the environment,
    Hydra's state, torch's determinism, threads and dtype, logging) is put back. Signals, locks
    held by another process, the imports of a command and DDP need a process of their own:
    ``train_cli``."""
    from swwae.commands.train import main

    return in_this_process(lambda argv: main(argv, configs=configs), ["train.py"], args, cwd, env)


def swwae_here(*args, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    """``run_cli("-m", "swwae", *args, cwd=cwd)`` in this process (``command_here``'s way):
    ``swwae <subcommand> <arguments>``, loading a lab's plugins first as the command does."""
    from swwae.commands.dispatch import main

    return in_this_process(main, ["swwae"], args, cwd, env)


def forget_hydra() -> None:
    """Hydra's global state as a new process has it: no config search path (``GlobalHydra``) and no
    job's Hydra config (``HydraConfig``, which a run leaves set). A stale ``HydraConfig`` resolves
    ``${hydra:...}`` where a new process could not: an Optuna search after another one then merged
    ``+trainer.default_root_dir=...`` and ran its trials instead of refusing it in one line."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig

    GlobalHydra.instance().clear()
    HydraConfig.instance().cfg = None


def in_this_process(main, program: list[str], args, cwd: Path, env: dict | None) -> subprocess.CompletedProcess:
    """``main(args)`` run as a command would be: in ``cwd``, with ``env`` added, its output
    captured; the process put back afterwards (``command_here``)."""
    import torch

    saved_env, saved_cwd = dict(os.environ), Path.cwd()
    saved_torch = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.get_num_threads(),
        torch.get_default_dtype(),
        torch.get_float32_matmul_precision(),
    )
    out, err = io.StringIO(), io.StringIO()
    args = list(map(str, args))
    os.environ.update(env or {})
    os.chdir(cwd)
    forget_hydra()
    try:
        with (
            contextlib.redirect_stdout(out),
            contextlib.redirect_stderr(err),
            warnings.catch_warnings(),
            kept_logging(),
        ):
            warnings.simplefilter((env or {}).get("PYTHONWARNINGS", "ignore"))  # as run_cli
            try:
                status = main(args)
            except SystemExit as done:
                status = done.code if isinstance(done.code, int) else (0 if done.code is None else 1)
            except Exception:
                traceback.print_exc()
                status = 1
    finally:
        forget_hydra()
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
        deterministic, warn_only, threads, dtype, matmul = saved_torch
        torch.use_deterministic_algorithms(deterministic, warn_only=warn_only)
        torch.set_num_threads(threads)
        torch.set_default_dtype(dtype)
        torch.set_float32_matmul_precision(matmul)
        torch.set_flush_denormal(False)
    return subprocess.CompletedProcess([*program, *args], status, out.getvalue(), err.getvalue())
