"""The training job behind ``train.py``: config in, trained model, logs, checkpoints and
``metrics.json`` out. Data flows one way: config -> datamodule + module -> Trainer ->
callbacks/loggers -> files.

The job's parts, each in its own module: ``building`` (the Trainer, loggers, Hydra's view of
the run), ``runs`` (the run's folder: its name, identity, lock, resume decision, moving aside,
metrics.json), ``folders`` (writable folders, disk errors), ``preemption`` (SIGTERM/SIGUSR1),
``finished`` (a run asked again after it finished), ``reporting`` (the metrics, the done: line).
"""

from __future__ import annotations

import logging
import shlex
import signal
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerStatus
from omegaconf import DictConfig, OmegaConf

from swwae import threads
from swwae.errors import CheckpointError, DiskError, Interrupted, NonFiniteError, Preempted
from swwae.training.building import build, build_loggers, build_trainer, choices, task_overrides
from swwae.training.callbacks import BatchSeed, LogRunConfig, SaveRunConfig
from swwae.training.checkpoints import check_fits_model
from swwae.training.checks import check_config
from swwae.training.compiling import compile_network
from swwae.training.finished import report_finished
from swwae.training.folders import check_writable
from swwae.training.host_memory import keep_freed_memory
from swwae.training.loggers import check_extras, run_params
from swwae.training.monitor import check_monitor
from swwae.training.preemption import Preemption, PreemptionSaved
from swwae.training.reporting import (
    evaluate_best,
    log_final,
    monitored_value,
    run_summary,
    shown,
    write_test_outcomes,
)
from swwae.training.runs.decision import Decision, resume_mode
from swwae.training.runs.folder import RunFolder, batches, describe, mid_epoch_position
from swwae.training.runs.sweep_claim import claim_for_sweep_job
from swwae.training.spec import RunSpec

log = logging.getLogger(__name__)

# checks before anything runs


def check_settings(cfg: DictConfig) -> RunSpec:
    """The typed run spec (train.py parses it before Lightning loads; here for train() called
    alone), and the trackers' optional packages."""
    spec = check_config(cfg)
    check_extras(cfg)  # a tracker whose optional package is missing: one line, before the data
    return spec


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
    log.debug(threads.describe(torch.get_num_threads()))  # chosen before torch loaded (swwae.threads)


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


def continue_command() -> str:
    """The command line that continues this run: its own overrides, plus resume=true."""
    kept = [o for o in task_overrides() if o.split("=", 1)[0].lstrip("+~") != "resume"]
    return " ".join(["python train.py", *map(shlex.quote, kept), "resume=true"])


def warn_about_schedule(path: Path, checkpoint: dict, cfg: DictConfig) -> None:
    for scheduler in checkpoint.get("lr_schedulers") or []:
        if scheduler.get("T_max") not in (None, cfg.trainer.get("max_epochs")):
            log.warning(
                "%s holds a cosine schedule over %s epochs; this run has trainer.max_epochs=%s: the "
                "learning rate keeps the old schedule (0 after epoch %s, rising after)",
                path,
                scheduler["T_max"],
                cfg.trainer.get("max_epochs"),
                scheduler["T_max"],
            )


# the job


def train(cfg: DictConfig) -> float:
    """Train, test, write ``metrics.json``; return ``cfg.optimized_metric`` for sweepers."""
    started = time.perf_counter()
    set_process_defaults(cfg)
    spec = check_settings(cfg)  # parsed once, here: the job's functions take its sections from here on
    check_folders(cfg)
    run_config = OmegaConf.to_container(cfg, resolve=True)  # plain values: checkpoints, trackers, identity
    folder = RunFolder.of(run_config)
    claim_for_sweep_job(folder.path)  # a multirun's jobs never write into one run folder
    if spec.seed is not None:
        L.seed_everything(spec.seed, workers=True, verbose=False)
    datamodule = build(cfg.data, _convert_="all")
    datamodule.prepare_data()
    datamodule.setup("fit")  # load now: data errors stop the run before any training
    module = build(
        cfg.model,
        image_shape=datamodule.image_shape,
        num_classes=datamodule.num_classes,
        pixel_mean=datamodule.pixel_mean(),
        _convert_="all",
    )  # plain lists: checkpoints load weights_only
    compile_network(module, cfg.get("compile"))  # compile=true: in place, checkpoints unchanged
    check_monitor(cfg.optimized_metric, cfg.optimized_mode, logged_val_metrics(module))
    preemption = Preemption(folder.path)
    callbacks = job_callbacks(cfg, run_config, folder, module, datamodule, preemption)
    with quiet():  # the Trainer's and callbacks' config errors: before the lock
        trainer = build_trainer(cfg, [], callbacks)
    # the process that trains owns the run: rank 0 of a DDP run, or a process alone in its run
    # whatever rank variables its environment holds
    trains = trainer.world_size == 1 or trainer.global_rank == 0
    with folder.own(trains):  # a second run of this name ends here, before it reads or moves a file
        check_writable(folder.path, f"the checkpoints of {cfg.run_name}", "run_name")
        return train_owned(cfg, folder, trains, module, datamodule, callbacks, preemption, started)


def start_of(cfg: DictConfig, folder: RunFolder, module) -> Decision:
    """The resume decision, said in one line where it continues or passes files over; a
    refusal as one error line naming the folder, what it holds and the ways out."""
    decision = folder.decide(
        resume_mode(cfg.get("resume", "auto")), cfg.trainer.get("max_epochs"), cfg.trainer.get("max_steps")
    )
    for warning in decision.warnings:
        log.warning("%s %s", folder.path, warning)
    if decision.action == "refuse":  # (a folder locked by another run was refused by folder.own already)
        raise CheckpointError(
            f"{folder.path} {decision.reason}: give this run its own folder with run_name=..., or "
            f"resume=false to start over (the old run is moved aside, not deleted)"
        )
    if decision.action == "start_over":
        log.warning("%s: starting a fresh run (%s)", folder.path, decision.reason)
    if decision.checkpoint is not None:
        path, checkpoint = folder.checkpoint(decision.checkpoint)
        check_fits_model(path, checkpoint, module)
        warn_about_schedule(path, checkpoint, cfg)
        if decision.warnings:
            log.warning("resuming from %s instead", describe(path, checkpoint))
        elif decision.action == "continue":
            log.info(
                "resume=%s: continuing this run from %s",
                resume_mode(cfg.get("resume", "auto")),
                describe(path, checkpoint),
            )
    return decision


def train_owned(
    cfg: DictConfig,
    folder: RunFolder,
    trains: bool,
    module,
    datamodule,
    callbacks: list,
    preemption: Preemption,
    started: float,
) -> float:
    """The part of the job that runs holding the run's lock."""
    decision = start_of(cfg, folder, module)
    path, checkpoint = folder.checkpoint(decision.checkpoint) if decision.checkpoint else (None, None)
    if decision.action == "finished":  # a repeated or re-queued command
        return report_finished(cfg, folder, module, datamodule, path, checkpoint)
    continuing = decision.action == "continue"
    trainer = build_trainer(cfg, build_loggers(cfg, resuming=continuing), callbacks)
    if decision.action == "start_over" and trains:  # every check passed: only now touch what is on disk
        folder.move_aside()
    if continuing and (position := mid_epoch_position(checkpoint)) is not None:
        datamodule.resume_at(*position, world_size=trainer.world_size)

    with ExitStack() as stack:
        stack.callback(preemption.install().restore)
        metrics, best = fit_and_test(cfg, folder, trainer, module, datamodule, path if continuing else None, preemption)
    metrics["train_time_s"] = time.perf_counter() - started
    summary = run_summary(cfg, module.net.arch, trainer.current_epoch, best, metrics)
    if trainer.is_global_zero:
        folder.write_metrics(summary)
        write_test_outcomes(folder.output_dir, module)
        log_final(trainer, cfg, summary)
        print(
            f"done: {cfg.run_name}: {shown(metrics, cfg.optimized_metric)} ({metrics['train_time_s']:.0f} s) "
            f"-> {cfg.paths.output_dir}"
        )
    return monitored_value(cfg, metrics)


def job_callbacks(
    cfg: DictConfig, run_config: dict, folder: RunFolder, module, datamodule, preemption: Preemption
) -> list:
    """The config's callbacks plus the job's own: the run config (``cfg`` resolved) in checkpoints
    and trackers, per-batch seeds, pre-emption."""
    callbacks = [build(c) for c in (cfg.get("callbacks") or {}).values()]
    callbacks.append(SaveRunConfig(run_config, {"identity": folder.identity, "digest": folder.digest}))
    # the trackers get the run config (model/lr, data/batch_size, ...), not Lightning's flat
    # copy of the module's and datamodule's arguments on top of it
    module._log_hyperparams = datamodule._log_hyperparams = False
    callbacks.append(LogRunConfig(run_params(run_config, module.net.arch, choices())))
    if cfg.get("seed") is not None:
        callbacks.append(BatchSeed(cfg.seed))  # a resumed run replays the uninterrupted one
    return [*callbacks, preemption]


def fit_and_test(
    cfg: DictConfig,
    folder: RunFolder,
    trainer: L.Trainer,
    module,
    datamodule,
    ckpt_path: Path | None,
    preemption: Preemption,
) -> tuple[dict, str | None]:
    """Fit, then test the best checkpoint; every way of stopping early as one line naming what
    is kept and how to go on."""
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path))
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        return evaluate_best(trainer, module, datamodule, cfg, best), best or None
    except (NonFiniteError, DiskError) as err:  # one line for train.py, saying what is left to resume from
        stopped = type(err)(f"{err}; {folder.kept()}")
        stopped.during_training = True  # not a rejected input: train.py keeps the run's output folder
        raise stopped from None
    except PreemptionSaved:
        raise Preempted(preempted_line(folder, preemption), preemption.received) from None
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
        if trainer.state.status != TrainerStatus.INTERRUPTED:
            raise
        if preemption.received is not None:  # SIGTERM during validation: Lightning stopped it there
            raise Preempted(preempted_line(folder, preemption), preemption.received) from None
        raise Interrupted(
            f"interrupted in epoch {trainer.current_epoch + 1} (step {trainer.global_step}); "
            f"{folder.kept()}; continue with: {continue_command()}"
        ) from None


def preempted_line(folder: RunFolder, preemption: Preemption) -> str:
    """'pre-empted by SIGUSR1; saved <path> (in epoch e, after k batches; step s); what next'."""
    name = signal.Signals(preemption.received).name
    saved = preemption.saved
    if saved is None:
        kept = folder.kept()
    else:
        kept = (
            f"saved {saved['path']} (in epoch {saved['epoch'] + 1}, after {batches(saved['batches_done'])}; "
            f"step {saved['step']})"
        )
    requeue = saved.get("requeue") if saved else None
    after = (
        f"{requeue}: it continues by itself"
        if requeue and requeue.startswith("requeued")
        else (f"{requeue + '; ' if requeue else ''}the same command continues it (resume=auto)")
    )
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
        lambda record: "Detected KeyboardInterrupt" not in record.getMessage()
    )
    # Lightning's device lines and tips on stderr, plain, as when it is imported before Hydra sets
    # up logging (train.py imports it after its checks: it would log them through Hydra's handler)
    for name in ("lightning.pytorch", "lightning.fabric"):
        logger = logging.getLogger(name)
        if logger.propagate and not logger.handlers:
            logger.addHandler(logging.StreamHandler())
            logger.setLevel(logging.INFO)
            logger.propagate = False
    torch.set_float32_matmul_precision("high")
