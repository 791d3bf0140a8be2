"""Train a Stacked What-Where Auto-encoder: ``swwae train model=swwae_hard`` (from a clone,
``python train.py model=swwae_hard`` is the same command).

The Hydra entry point, over the shipped configs (``swwae.configs``: ``swwae.training.composing``;
``python train.py``: the clone's own ``configs/``).
It reads Hydra's own state once (``composing.launch``: the choices, the overrides, the output and
sweep folders), parses the config once (``swwae.training.spec.check_config``), and hands both to
the job, ``swwae.training.run.train``. Bad input answers before torch loads: this module and the
config's checks import neither torch nor Lightning.

* A single run: bad input (a wrong config value, a missing dataset, a non-finite loss) ends
  with one ``error:`` line and exit status 2; anything else raises as usual.
* Ctrl-C: one line saying where the run stopped, which checkpoint is kept and the command
  that continues it; exit status 130 (a sweep stops there). SIGTERM or SIGUSR1 (a scheduler
  pre-empting the job): a resumable checkpoint is saved first; exit status 128 + the signal.
* CPU threads: one per usable CPU, and waiting OpenMP threads sleep (``OMP_WAIT_POLICY=PASSIVE``)
  when other work is running as the job starts; decided before torch loads, and any value the
  user set is kept (``swwae.threads``).
* ``resume=true`` on a run that has finished: its metrics again, exit status 0.
* A job of a multirun (``-m``): any exception is caught, the job folder gets a
  ``metrics.json`` with ``"status": "failed"`` and the one-line error (a traceback, if any,
  goes to the job's ``train.log``), and the job returns no number (``FAILED``), so the other
  jobs still run: Hydra's grid sweeper ignores what jobs return, and Optuna's records the trial
  as failed (FAIL) and goes on. The ``SweepSummary`` callback (``configs/hydra/default.yaml``)
  lists the failure in the sweep's ``summary.md`` and then makes the sweep exit with status 1.
  A search whose every trial failed has no best trial, and Optuna's sweeper stops there, before
  the callback: the summary is written all the same, exit status 1 (``after_the_sweeper_stopped``).
"""

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import contextlib
import functools
import logging
import os
import shutil
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from swwae.commands.completion import asks_for_completion, request
from swwae.commands.dispatch import PROG
from swwae.commands.overrides import run_with_one_line_errors
from swwae.errors import Interrupted, UserError, one_line
from swwae.plugins import load_plugins
from swwae.training.composing import (
    CONFIG_NAME,
    CONFIG_PATH,
    Launch,
    check_installed,
    config_path,
    launch,
    register_resolvers,
)
from swwae.training.runs import sweep_claim
from swwae.training.spec import check_config

register_resolvers()  # before Hydra composes: sweepers resolve the config before any job runs

log = logging.getLogger("train")
# what a failed multirun job returns: no number (NaN would be one, which Optuna's sweeper refuses,
# and then stops the search), so that a search records a failed trial and goes on
FAILED = "failed"
MULTIRUN_FLAGS = ("-m", "--multirun")  # Hydra's flags that make a command a sweep
# what Lightning's DDP launcher sets in its own process before it starts the others, and leaves set
DDP_LAUNCH_VARIABLES = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")
SINGLE_RUN = "hydra.mode=RUN"  # a multirun job's command again, as one run (run_as_started)


def sweep_job_failed(job: Launch, info: dict, err: Exception) -> str:
    """Record a failed multirun job (``info``: its run name, model, data and seed, as far as
    known) in its folder and let the sweep go on."""
    if not isinstance(err, UserError):  # its message says it all: no traceback
        log.error("job failed", exc_info=err)  # the full traceback, in the job's train.log
    error = one_line(err)
    from swwae.training.sweep.jobs import write_failed_job  # torch: only once a job failed

    write_failed_job(job.output_dir, info, error)
    print(f"error: sweep job {job.sweep[1]} ({info.get('run_name', '?')}) failed: {error}", file=sys.stderr)
    return FAILED


def after_the_sweeper_stopped() -> None:
    """The sweeper stopped with an error after the jobs of this process's sweep ran: when every
    one of them failed (Optuna's, with no trial finished, has no best trial to report), their
    summary all the same, its error line and exit status 1; otherwise nothing (the error is
    raised as it is)."""
    if not sweep_claim.started:
        return
    from swwae.training.sweep import collect, summarise

    folder = sweep_claim.started[-1]
    try:
        summary = collect(folder)
    except Exception:
        return
    if summary.jobs and len(summary.failed) == len(summary.jobs):
        summarise(folder)


def tidy_output_folder(output_dir: str, rejected: bool, log_name: str = "train.log") -> None:
    """No litter: a rejected single run leaves no output folder (it holds only Hydra's copy of
    the config and an empty log), and a run or sweep job whose log (``log_name``: the other
    processes of a DDP run have their own) stayed empty leaves no empty log."""
    folder = Path(output_dir).absolute()
    log_file = folder / log_name
    with contextlib.suppress(OSError):
        if log_file.is_file() and log_file.stat().st_size == 0:
            log_file.unlink()
        if not rejected or any(p.name != ".hydra" for p in folder.iterdir()):
            return
        shutil.rmtree(folder)
        launch_folder = Path.cwd()
        for parent in folder.parents:  # outputs/<run>/ and outputs/ inside the launch folder, if empty
            if launch_folder not in parent.parents or any(parent.iterdir()):
                break
            parent.rmdir()


def run_as_started(program: list[str], args: list[str], module: str | None = None):
    """``run``, as Hydra's task function, with ``sys.argv`` set, once Hydra has read its overrides,
    to the command that runs this job again: ``program`` (``swwae train``, ``python train.py``: how
    the process was started) and ``args``, or in a multirun, this job's own overrides and ``args``'
    flags but ``-m``, as a single run (``hydra.mode=RUN``: a search preset sets ``MULTIRUN`` in its
    config, and each DDP process of its trials ran a search of its own). Lightning's DDP starts a
    run's other processes so (``python <sys.argv>``, or ``python -m <module> <sys.argv[1:]>`` under
    ``python -m``, into Hydra's ``run.dir``: a multirun job's own folder while it runs), and a
    multirun job's DDP run ends with the job. ``module``: what ``__main__`` was where the command
    was read (``main_module``), as the job tells Lightning in a process of a launcher's own
    (``started_as``)."""

    @functools.wraps(run)
    def job(cfg: DictConfig) -> float | str:
        this = launch()  # Hydra's own state, read here once and passed down as values
        swept = this.sweep is not None
        flags = hydra_flags(args, but=MULTIRUN_FLAGS)
        again = [*this.overrides, *run_name_of(cfg), SINGLE_RUN, *flags] if swept else args
        environment = {name: os.environ.get(name) for name in DDP_LAUNCH_VARIABLES}
        parsed, sys.argv = sys.argv, [*program, *again]
        try:
            with run_dir(this.output_dir) if swept else contextlib.nullcontext(), started_as(module):
                return run(cfg, this)
        finally:
            sys.argv = parsed
            if swept and "torch" in sys.modules:  # a job that got as far as torch: its DDP run ends here
                from swwae.training.process import end_distributed_job

                end_distributed_job(environment)

    return job


def main_module() -> str | None:
    """The module this process runs as ``__main__`` (``swwae.__main__`` under ``python -m swwae``),
    or None for a script (``python train.py``, the ``swwae`` command): Lightning's DDP starts a
    run's other processes as it (``python -m <module>``, or ``python <sys.argv[0]>``)."""
    import __main__

    spec = getattr(__main__, "__spec__", None)
    return None if spec is None else spec.name


@contextlib.contextmanager
def started_as(module: str | None):
    """``__main__`` is ``module`` (``main_module``) as Lightning reads it while the block runs: a
    job run in a process of a launcher's own (``hydra/launcher=submitit_local``: ``python -m
    submitit.core._submit <folder>``) had Lightning start its DDP run's other processes as that,
    which refused the job's overrides. Nothing changes in the process that read the command."""
    from importlib.machinery import ModuleSpec

    import __main__

    before = getattr(__main__, "__spec__", None)
    if (None if before is None else before.name) == module:
        yield
        return
    __main__.__spec__ = None if module is None else ModuleSpec(module, None)
    try:
        yield
    finally:
        __main__.__spec__ = before


def run_name_of(cfg: DictConfig) -> list[str]:
    """``run_name=<this job's>`` as an override (none where it does not resolve: the job says why):
    run again alone, a multirun job's overrides would name it without its sweep tag
    (``identity.sweep_tag``: ``..._lr0.001_seed0`` in the sweep, ``..._seed0`` alone)."""
    try:
        name = str(cfg.run_name)
    except Exception:
        return []
    return ["run_name='{}'".format(name.replace("'", "\\'"))]  # a quoted string of Hydra's grammar


@contextlib.contextmanager
def run_dir(folder: str):
    """Hydra's ``run.dir`` is ``folder`` while the block runs: where Lightning's DDP points the other
    processes of a multirun job (the job's own folder, not a new one)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import read_write

    hydra_cfg = HydraConfig.get()
    before = hydra_cfg.run.dir
    with read_write(hydra_cfg):
        hydra_cfg.run.dir = folder
    try:
        yield
    finally:
        with read_write(hydra_cfg):
            hydra_cfg.run.dir = before


def run(cfg: DictConfig, job: Launch) -> float | str:
    """The job, of ``cfg`` as Hydra launched it (``job``)."""
    multirun = job.sweep is not None
    rejected = False
    try:
        spec = check_config(cfg)  # plain Python: bad input answers before torch and Lightning load
        from swwae.training.process import set_torch_defaults
        from swwae.training.run import train

        set_torch_defaults(verbose=spec.verbose)
        return train(cfg, job, spec)
    except KeyboardInterrupt as err:  # Ctrl-C: where it stopped, what is kept, how to continue
        if not getattr(err, "said_elsewhere", False):  # under DDP, by rank 0 alone
            print(
                err if isinstance(err, Interrupted) else "interrupted before training started: nothing was saved",
                file=sys.stderr,
            )
            if multirun:
                print("(the sweep stops here; repeat the sweep command to continue every job)", file=sys.stderr)
        sys.exit(getattr(err, "exit_status", 130))
    except Exception as err:
        if multirun:
            info = {"model": job.choices.get("model"), "data": job.choices.get("data"), "seed": cfg.get("seed")}
            try:
                info = {"run_name": cfg.run_name} | info
            except Exception:  # the run name itself may be what failed to resolve
                pass
            return sweep_job_failed(job, info, err)
        if isinstance(err, UserError):
            print(f"error: {err}", file=sys.stderr)
            if callable(getattr(err, "caret", None)):  # a bad model.arch: point at the token
                print(err.caret(indent=len("error: ")), file=sys.stderr)
            rejected = not getattr(err, "during_training", False)
            sys.exit(2)
        raise
    finally:
        # a failed sweep job keeps its record
        tidy_output_folder(job.output_dir, rejected and not multirun, job.log_file)


def quote_layer_strings(argv: list[str]) -> list[str]:
    """``model.arch=(16)5c-2p``, as a shell leaves ``model.arch="(16)5c-2p"``, quoted again
    for Hydra, whose override grammar reads parentheses as syntax. (A sweep over several
    strings quotes each itself: 'model.arch="(8)3c-2p","(16)3c-2p"'.)"""
    quoted = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        if (
            sep
            and key.lstrip("+~") == "model.arch"
            and value[:1] not in ("'", '"')
            and "(" in value
            and "," not in value
        ):
            arg = f"{key}='{value}'"
        quoted.append(arg)
    return quoted


def flags_last(argv: list[str]) -> list[str]:
    """Hydra's flags (``-m``, ``--config-dir DIR``, ...) moved after the overrides: its parser
    takes the overrides as one list, so a flag between two of them (``model=x -m seed=0,1``) left
    the rest "unrecognized arguments" (and before them, ``--info`` would take an override for its
    value)."""
    split = overrides_and_flags(argv)
    return argv if split is None else [*split[0], *(word for flag in split[1] for word in flag)]


def hydra_flags(argv: list[str], but: tuple[str, ...] = ()) -> list[str]:
    """The words of ``argv`` that are Hydra's flags and their values, less the flags ``but`` names."""
    split = overrides_and_flags(argv)
    return [] if split is None else [word for flag in split[1] if flag[0].partition("=")[0] not in but for word in flag]


def overrides_and_flags(argv: list[str]) -> tuple[list[str], list[list[str]]] | None:
    """``argv`` as its overrides and Hydra's flags, each flag with its values; None where Hydra's
    parser cannot be read (another Hydra). The flags and how many values each takes are its parser's."""
    try:
        from hydra._internal.utils import get_args_parser

        takes = {option: a.nargs for a in get_args_parser()._actions for option in a.option_strings}
    except (ImportError, AttributeError):  # another Hydra: its parser as it is
        return None
    flags, overrides, i = [], [], 0
    while i < len(argv):
        arg = argv[i]
        name, inline, _ = arg.partition("=")
        if name not in takes:  # an override (every flag starts with -)
            overrides.append(arg)
            i += 1
            continue
        following = argv[i + 1] if i + 1 < len(argv) else "="
        if inline or takes[name] == 0:
            values = 0
        elif takes[name] == "?":  # --info [what]: a value only if the next word is no override nor flag
            values = int("=" not in following and not following.startswith("-"))
        else:
            values = 1
        flags.append(argv[i : i + 1 + values])
        i += 1 + values
    return overrides, flags


def main(argv: list[str] | None = None, configs: Path | None = None, prog: str = f"{PROG} train") -> int:
    """``swwae train <argv>``: Hydra's command line (overrides, ``-m`` sweeps, ``--help``,
    ``--config-dir``) over the shipped configs, or a clone's ``configs`` folder (``python
    train.py``: ``composing.config_path``); the exit status as ``run`` leaves it (0, or its
    ``sys.exit``). ``prog``: the command that Hydra's usage lines and tab completion name (from
    ``sys.argv[0]``, as argparse's ``prog``) where ``argv`` is given; ``python train.py`` is its own."""
    path, args = config_path(configs), sys.argv[1:] if argv is None else list(argv)
    try:
        if path == CONFIG_PATH:
            check_installed()
        load_plugins()  # a lab's own parts (swwae.plugins)
        register_resolvers()  # their settings in the schema's nodes before Hydra composes
        if asks_for_completion(args):
            request(args)  # Hydra's tab completion: what it takes, or one line
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    saved = sys.argv  # as the process was started: python train.py ..., swwae train ... (dispatch keeps it)
    before_args = len(saved) - len(args)
    program = saved[:before_args] if saved[before_args:] == args else saved[:1]  # its words before args
    sys.argv = [saved[0] if argv is None else prog, *flags_last(quote_layer_strings(args))]
    try:
        task = run_as_started(program, args, main_module())
        app = hydra.main(config_path=path, config_name=CONFIG_NAME, version_base="1.3")(task)
        run_with_one_line_errors(app)  # the override grammar's errors for common mistakes
    except Exception:
        after_the_sweeper_stopped()
        raise
    finally:
        sys.argv = saved
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
