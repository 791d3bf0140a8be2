"""The training job behind ``train.py``: config in, trained model, logs, checkpoints and
``metrics.json`` out. Data flows one way: config -> datamodule + module -> Trainer ->
callbacks/loggers -> files.

The job's parts, each in its own module: ``building`` (the Trainer, loggers, Hydra's view of
the run), ``ownership`` (one run, one owner: the run's lock), ``folders`` (writable folders, disk
errors), ``resume`` (fresh or continued), ``preemption`` (SIGTERM/SIGUSR1), ``finished`` (a run
asked again after it finished), ``reporting`` (metrics.json, the done: line).
"""

from __future__ import annotations

import logging
import signal
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerStatus
from omegaconf import DictConfig, OmegaConf

from swwae.errors import ConfigError, DiskError, Interrupted, NonFiniteError, Preempted
from swwae.training.building import build, build_loggers, build_trainer, choices
from swwae.training.callbacks import BatchSeed, LogRunConfig, SaveRunConfig
from swwae.training.compiling import compile_network
from swwae.training.devices import check_devices
from swwae.training.finished import report_finished
from swwae.training.folders import check_writable
from swwae.training.host_memory import keep_freed_memory
from swwae.training.loggers import check_extras, run_params
from swwae.training.monitor import check_monitor
from swwae.training.ownership import own_run
from swwae.training.preemption import Preemption, PreemptionSaved, mid_epoch_position
from swwae.training.reporting import evaluate_best, log_final, monitored_value, run_summary, shown, write_metrics
from swwae.training.resume import (choose_start, continue_command, kept_checkpoint, move_old_run_aside, resume_mode,
                                   run_folder)

log = logging.getLogger(__name__)

# checks before anything runs


def check_seed(seed) -> None:
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**32):
        raise ConfigError(f"seed must be an integer in 0..{2**32 - 1} (or null), got {seed!r}")


def check_length(trainer_cfg: DictConfig) -> None:
    """A run that trains nothing would test an untrained model and report it as a result."""
    for key in ("max_epochs", "max_steps"):
        if trainer_cfg.get(key) == 0:
            raise ConfigError(f"trainer.{key}=0 trains nothing: give it at least 1 (to evaluate a checkpoint "
                              f"without training, use python scripts/evaluate.py <checkpoint>)")


def check_settings(cfg: DictConfig) -> None:
    check_seed(cfg.get("seed"))
    resume_mode(cfg)
    check_length(cfg.trainer)
    check_devices(cfg.trainer)  # a GPU asked for and not there: one line, before the data
    check_extras(cfg)  # a tracker whose optional package is missing: one line, before the data


def check_folders(cfg: DictConfig) -> None:
    """Every folder the run writes to, before any data is read; folders it had to create for
    the test are removed again (a file where the run's own checkpoint folder should be is found
    under the run's lock, in ``train``)."""
    check_writable(Path(cfg.paths.checkpoint_dir), "checkpoints", "paths.checkpoint_dir", keep=False)
    check_writable(Path(cfg.paths.log_dir), "logs", "paths.log_dir", keep=False)
    check_writable(Path(cfg.paths.output_dir), "the run's output", "hydra.run.dir")


def set_process_defaults(cfg: DictConfig) -> None:
    """Process-wide CPU speed settings: the job's call, not the library's (README "Performance")."""
    if cfg.get("keep_freed_memory") and keep_freed_memory():
        log.debug("glibc keeps freed memory for reuse (keep_freed_memory=true)")
    if cfg.get("flush_denormal") and torch.set_flush_denormal(True):  # False where the CPU cannot
        log.debug("denormal floats flush to zero (flush_denormal=true)")


@contextmanager
def quiet():
    """No log record at INFO or below inside the block (Lightning's device lines, tips)."""
    was = logging.root.manager.disable
    logging.disable(logging.INFO)
    try:
        yield
    finally:
        logging.disable(was)


def logged_val_metrics(module) -> list[str]:
    return ["val/loss", *(f"val/{name}" for name in module.metrics["val"])]


# the job


def train(cfg: DictConfig) -> float:
    """Train, test, write ``metrics.json``; return ``cfg.optimized_metric`` for sweepers."""
    started = time.perf_counter()
    set_process_defaults(cfg)
    check_settings(cfg)
    check_folders(cfg)
    if cfg.get("seed") is not None:
        L.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule = build(cfg.data, _convert_="all")
    datamodule.prepare_data()
    datamodule.setup("fit")  # load now: data errors stop the run before any training
    module = build(cfg.model, image_shape=datamodule.image_shape, num_classes=datamodule.num_classes,
                   pixel_mean=datamodule.pixel_mean(), _convert_="all")  # plain lists: checkpoints load weights_only
    compile_network(module, cfg.get("compile"))  # compile=true: in place, checkpoints unchanged
    check_monitor(cfg.optimized_metric, cfg.optimized_mode, logged_val_metrics(module))
    folder = run_folder(cfg)
    preemption = Preemption(folder)
    callbacks = job_callbacks(cfg, module, datamodule, preemption)
    with quiet():  # the Trainer's and callbacks' config errors: before the lock
        build_trainer(cfg, [], callbacks)
    with own_run(folder, cfg.run_name):  # a second run of this name ends here, before it reads or moves a file
        check_writable(folder, f"the checkpoints of {cfg.run_name}", "run_name")
        return train_owned(cfg, folder, module, datamodule, callbacks, preemption, started)


def train_owned(cfg: DictConfig, folder: Path, module, datamodule, callbacks: list, preemption: Preemption,
                started: float) -> float:
    """The part of the job that runs holding the run's lock."""
    start = choose_start(cfg, module, datamodule)
    if start.finished:  # a repeated or re-queued command
        return report_finished(cfg, module, datamodule, start.path, start.checkpoint)
    trainer = build_trainer(cfg, build_loggers(cfg, resuming=start.path is not None), callbacks)
    if start.path is None:  # every check passed: only now touch what is on disk
        move_old_run_aside(folder)
    elif (position := mid_epoch_position(start.checkpoint)) is not None:
        datamodule.resume_at(*position, world_size=trainer.world_size)

    with ExitStack() as stack:
        stack.callback(preemption.install().restore)
        metrics, best = fit_and_test(cfg, trainer, module, datamodule, start.path, preemption)
    metrics["train_time_s"] = time.perf_counter() - started
    summary = run_summary(cfg, module.net.arch, trainer.current_epoch, best, metrics)
    if trainer.is_global_zero:
        write_metrics(cfg, summary)
        log_final(trainer, cfg, summary)
        print(f"done: {cfg.run_name}: {shown(metrics, cfg.optimized_metric)} ({metrics['train_time_s']:.0f} s) "
              f"-> {cfg.paths.output_dir}")
    return monitored_value(cfg, metrics)


def job_callbacks(cfg: DictConfig, module, datamodule, preemption: Preemption) -> list:
    """The config's callbacks plus the job's own: the run config in checkpoints and trackers,
    per-batch seeds, pre-emption."""
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values()]
    run_config = OmegaConf.to_container(cfg, resolve=True)
    callbacks.append(SaveRunConfig(run_config))
    # the trackers get the run config (model/lr, data/batch_size, ...), not Lightning's flat
    # copy of the module's and datamodule's arguments on top of it
    module._log_hyperparams = datamodule._log_hyperparams = False
    callbacks.append(LogRunConfig(run_params(run_config, module.net.arch, choices())))
    if cfg.get("seed") is not None:
        callbacks.append(BatchSeed(cfg.seed))  # a resumed run replays the uninterrupted one
    return [*callbacks, preemption]


def fit_and_test(cfg: DictConfig, trainer: L.Trainer, module, datamodule, ckpt_path: Path | None,
                 preemption: Preemption) -> tuple[dict, str | None]:
    """Fit, then test the best checkpoint; every way of stopping early as one line naming what
    is kept and how to go on."""
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path))
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        return evaluate_best(trainer, module, datamodule, cfg, best), best or None
    except (NonFiniteError, DiskError) as err:  # one line for train.py, saying what is left to resume from
        raise type(err)(f"{err}; {kept_checkpoint(cfg)}") from None
    except PreemptionSaved:
        raise Preempted(preempted_line(cfg, preemption), preemption.received) from None
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
        if trainer.state.status != TrainerStatus.INTERRUPTED:
            raise
        if preemption.received is not None:  # SIGTERM during validation: Lightning stopped it there
            raise Preempted(preempted_line(cfg, preemption), preemption.received) from None
        raise Interrupted(f"interrupted at epoch {trainer.current_epoch}, step {trainer.global_step}; "
                          f"{kept_checkpoint(cfg)}; continue with: {continue_command(cfg)}") from None


def preempted_line(cfg: DictConfig, preemption: Preemption) -> str:
    """'pre-empted by SIGUSR1; saved <path> (epoch e, step s, k batches into the epoch); what next'."""
    name = signal.Signals(preemption.received).name
    saved = preemption.saved
    if saved is None:
        kept = kept_checkpoint(cfg)
    else:
        kept = (f"saved {saved['path']} (epoch {saved['epoch']}, step {saved['step']}, {saved['batches_done']} "
                f"batches into the epoch)")
    requeue = saved.get("requeue") if saved else None
    after = f"{requeue}: it continues by itself" if requeue and requeue.startswith("requeued") else (
        f"{requeue + '; ' if requeue else ''}the same command continues it (resume=auto)")
    return f"pre-empted by {name}; {kept}; {after}"


def set_torch_defaults() -> None:
    """Quieter, faster defaults for in-memory tensors on CPU."""
    import warnings

    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    # a pre-empted epoch resumes exactly (the batch samplers skip what was trained: swwae.training.preemption)
    warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch ended.*")
    # on Ctrl-C train.py says what is kept and how to continue, instead of Lightning's line
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: "Detected KeyboardInterrupt" not in record.getMessage())
    torch.set_float32_matmul_precision("high")
