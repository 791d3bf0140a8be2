"""The training job behind ``train.py``: config in, trained model, logs, checkpoints and
``metrics.json`` out. ``train`` reads top to bottom, in the order a run lives:

1. check: the settings (the typed run spec), the trackers' packages, every folder it writes;
   the process settings (freed memory, denormals) from the spec;
2. build: the data, the model, the callbacks and the one Trainer, before the lock, so that bad
   input stops here and touches nothing (its loggers come after the decision);
3. own the run's folder (``runs.folder``: the lock; a second run of the name ends here);
4. decide: continue, start over, refuse, or report a run that already finished (its metrics
   again, evaluated on the same Trainer, on the run's devices, when its metrics.json is gone);
5. fit, then test the best checkpoint; every way of stopping early as one line;
6. report: ``metrics.json``, ``test_outcomes.csv``, the final metrics to every logger, the
   ``done:`` line, the monitored value for sweepers.

Below it, in that order: the steps' helpers, the report, and the process settings. Each step
hands the config to the module that owns it: the checks (``spec``, ``folders``), the
run's identity (``runs``), the parts built from their config nodes (``composing``), the job's
callbacks and the trackers (``callbacks``), the Trainer (``checkpoints.build_trainer``, whose
every checkpoint load is the safe reader); following the config from ``train``, no module is
entered more than twice (tests/test_job_path.py). Hydra's own state (the choices, the
overrides, the sweep) comes in as ``Launch`` values, read once at the entry
(``composing.launch``); every function below ``train`` takes the sections or values it uses,
never the whole config.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import math
import shlex
import shutil
import signal
import sys
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerStatus
from omegaconf import DictConfig, OmegaConf

from swwae import threads
from swwae.errors import CheckpointError, ConfigError, DiskError, Interrupted, NonFiniteError, Preempted
from swwae.training.callbacks import job_callbacks, log_final, run_params
from swwae.training.checkpoints import build_trainer, check_fits_model
from swwae.training.composing import Launch, build, build_all, build_loggers, check_monitor, launch
from swwae.training.folders import check_folders, check_writable, write_failed
from swwae.training.preemption import Preemption, PreemptionSaved
from swwae.training.runs.decision import Decision
from swwae.training.runs.folder import (
    RunFolder,
    batches,
    describe_checkpoint,
    identity_of,
    mid_epoch_position,
    stored_output_dir,
)
from swwae.training.runs.sweep_claim import claim
from swwae.training.spec import check_config
from swwae.training.trainer_settings import check_epoch

log = logging.getLogger(__name__)

SHOWN = ("test/recon_mse", "test/acc")  # the done: line's metrics, or the monitor's when not tested
MAX_OUTCOMES_BYTES = 16 * 2**20  # test_outcomes.csv of a test split of ~300,000 images

# the job


def train(cfg: DictConfig, hydra: Launch | None = None) -> float:
    """Train, test, write ``metrics.json``; return ``cfg.optimized_metric`` for sweepers.
    ``hydra``: what Hydra knows of the job (``composing.launch()``, read here when not given)."""
    started = time.perf_counter()
    hydra = hydra if hydra is not None else launch()

    # 1. check (train.py parses the spec before Lightning loads; again here for train() called alone)
    spec = check_config(cfg)  # from here on, the job's functions take its sections and values
    set_process_defaults(spec.keep_freed_memory, spec.flush_denormal)
    check_folders(spec.paths)
    stored = OmegaConf.to_container(cfg, resolve=True)  # the run config as checkpoints store it, resolved once
    identity = identity_of(
        stored.get("model"),
        stored.get("data"),
        stored.get("trainer"),
        spec.seed,
        spec.optimized_metric,
        spec.optimized_mode,
    )
    folder = RunFolder(spec.paths.checkpoint_dir, spec.run_name, identity, spec.paths.output_dir)
    if hydra.sweep is not None:  # a multirun's jobs never write into one run folder (runs.sweep_claim)
        claim(folder.path, *hydra.sweep)

    # 2. build: the data (loaded now: data errors stop the run before any training), the model, the Trainer
    if spec.seed is not None:
        L.seed_everything(spec.seed, workers=True, verbose=False)
    datamodule = build(cfg.data, _convert_="all")
    datamodule.prepare_data()
    datamodule.setup("fit")
    module = build(
        cfg.model,
        image_shape=datamodule.image_shape,
        num_classes=datamodule.num_classes,
        pixel_mean=datamodule.pixel_mean(),
        _convert_="all",
    )  # plain lists: checkpoints load weights_only
    configured = build_all(cfg.get("callbacks"))
    compile_network(module, spec.compile)  # compile=true: in place, checkpoints unchanged
    check_monitor(spec.optimized_metric, spec.optimized_mode, logged_val_metrics(module))
    settings = {k: v for k, v in stored.items() if not isinstance(v, (dict, list))}  # seed, run_name, ...
    params = run_params(
        settings, stored.get("model"), stored.get("data"), stored.get("trainer"), module.net.arch, hydra.choices
    )
    stamp = {"identity": identity, "digest": folder.digest}  # the checkpoints' record of the run identity
    own = job_callbacks(configured, stored, params, stamp, module, datamodule, spec.seed)
    preemption = Preemption(folder.path)
    held: list = []  # its lines (devices, tips) are said once the run is known to go on
    with held_lines(held):
        trainer = build_trainer(spec.trainer, [], [*own, preemption])
    check_epoch(spec.trainer, datamodule, trainer.world_size)  # batch settings against the data, before the folder
    # the process that trains owns the run: rank 0 of a DDP run, or a process alone in its run
    # whatever rank variables its environment holds
    trains = trainer.world_size == 1 or trainer.global_rank == 0
    who = {
        "run_name": spec.run_name,
        "model": hydra.choices.get("model"),
        "data": hydra.choices.get("data"),
        "seed": spec.seed,
    }
    monitor = {"metric": spec.optimized_metric, "mode": spec.optimized_mode}

    # 3. own the folder: a second run of this name ends here, before it reads or moves a file
    with folder.own(trains):
        check_writable(folder.path, f"the checkpoints of {spec.run_name}", "run_name")

        # 4. decide
        decision = start_of(folder, module, spec.resume, spec.trainer.max_epochs, spec.trainer.max_steps)
        path, checkpoint = folder.checkpoint(decision.checkpoint) if decision.checkpoint else (None, None)
        if decision.action == "finished":  # a repeated or re-queued command: its metrics, nothing trained
            epochs = checkpoint.get("epoch", -1) + 1
            wanted = [spec.optimized_metric] + (["test/recon_mse"] if spec.test else [])
            summary, source = folder.own_metrics(checkpoint, wanted)
            if summary is None:  # e.g. killed after its last checkpoint, before it wrote metrics.json
                # evaluated again by the job's Trainer as the run was (a DDP run on its devices),
                # without its callbacks: nothing is saved, shown or logged
                replay(held)
                trainer.callbacks = []
                trainer.validate(module, datamodule=datamodule, ckpt_path=str(path), verbose=False)
                best = path.with_name("best.ckpt") if path.with_name("best.ckpt").is_file() else path
                metrics = evaluate_best(trainer, module, datamodule, spec.test, str(best))
                summary = run_summary(who, module.net.arch, epochs, str(best.absolute()), monitor, metrics)
                source = f"evaluated again from {best.name}"
                write_test_outcomes(folder.output_dir, module)
            elif trains:  # the outcomes the run wrote beside its metrics.json, if any (a sweep reads them per job)
                copy_test_outcomes(checkpoint, folder.output_dir)
            if trains:  # the run's owner reports it (one process alone, or rank 0 of a DDP run)
                folder.write_metrics(summary)
                print(
                    f"done: {spec.run_name} had already finished: {epochs} of {spec.trainer.max_epochs} epochs "
                    f"trained; {shown(summary['metrics'], spec.optimized_metric)} ({source}); nothing was retrained "
                    f"or logged again (resume=false trains it again, under the loggers now asked for) "
                    f"-> {spec.paths.output_dir}"
                )
            return monitored_value(spec.optimized_metric, summary["metrics"])
        continuing = decision.action == "continue"
        loggers = build_loggers(cfg.get("logger"), resuming=continuing)
        replay(held)
        trainer.loggers = loggers  # the Trainer's loggers, now that the run goes on (Lightning reads them from fit on)
        if decision.action == "start_over" and trains:  # every check passed: only now touch what is on disk
            folder.move_aside()
        if continuing and (position := mid_epoch_position(checkpoint)) is not None:
            datamodule.resume_at(*position, world_size=trainer.world_size)

        # 5. fit and test
        with ExitStack() as stack:
            stack.callback(preemption.install().restore)
            metrics, best = fit_and_test(
                folder,
                trainer,
                module,
                datamodule,
                path if continuing else None,
                preemption,
                spec.test,
                hydra.overrides,
            )

        # 6. report
        metrics["train_time_s"] = time.perf_counter() - started
        summary = run_summary(who, module.net.arch, trainer.current_epoch, best, monitor, metrics)
        if trainer.is_global_zero:
            folder.write_metrics(summary)
            write_test_outcomes(folder.output_dir, module)
            log_final(trainer.loggers, stored["model"], spec.seed, summary, trainer.global_step)
            print(
                f"done: {spec.run_name}: {shown(metrics, spec.optimized_metric)} ({metrics['train_time_s']:.0f} s) "
                f"-> {spec.paths.output_dir}"
            )
        return monitored_value(spec.optimized_metric, metrics)


# 2. build


def logged_val_metrics(module) -> list[str]:
    return ["val/loss", *(f"val/{name}" for name in module.metrics["val"])]


@contextmanager
def held_lines(held: list):
    """Log records at INFO or below (Lightning's device lines and tips, as the Trainer is built)
    are held in ``held`` instead of written, each with the handler that would write it; warnings
    pass. ``replay(held)`` writes them later: a run refused at its lock prints none of them."""

    class Hold(logging.Filter):
        def __init__(self, handler: logging.Handler):
            super().__init__()
            self.handler = handler

        def filter(self, record: logging.LogRecord) -> bool:
            if record.levelno > logging.INFO:
                return True
            held.append((self.handler, record))
            return False

    loggers = [logging.root, *(lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger))]
    holds = [(handler, Hold(handler)) for handler in {h for lg in loggers for h in lg.handlers}]
    for handler, hold in holds:
        handler.addFilter(hold)
    try:
        yield held
    finally:
        for handler, hold in holds:
            handler.removeFilter(hold)


def replay(held: list) -> None:
    """Write the records ``held_lines`` held, in order, through the handlers that would have."""
    for handler, record in held:
        handler.handle(record)
    held.clear()


# 4. decide


def start_of(folder: RunFolder, module, resume: str, max_epochs: int | None, max_steps: int | None) -> Decision:
    """The resume decision, said in one line where it continues or passes files over; a
    refusal as one error line naming the folder, what it holds and the ways out."""
    decision = folder.decide(resume, max_epochs, max_steps)
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
        warn_about_schedule(path, checkpoint, max_epochs)
        if decision.warnings:
            log.warning("resuming from %s instead", describe_checkpoint(path, checkpoint))
        elif decision.action == "continue":
            log.info("resume=%s: continuing this run from %s", resume, describe_checkpoint(path, checkpoint))
    return decision


def warn_about_schedule(path: Path, checkpoint: dict, max_epochs: int | None) -> None:
    for scheduler in checkpoint.get("lr_schedulers") or []:
        if scheduler.get("T_max") not in (None, max_epochs):
            log.warning(
                "%s holds a cosine schedule over %s epochs; this run has trainer.max_epochs=%s: the "
                "learning rate keeps the old schedule (0 after epoch %s, rising after)",
                path,
                scheduler["T_max"],
                max_epochs,
                scheduler["T_max"],
            )


# 5. fit and test


def fit_and_test(
    folder: RunFolder,
    trainer: L.Trainer,
    module,
    datamodule,
    ckpt_path: Path | None,
    preemption: Preemption,
    test: bool,
    overrides: tuple[str, ...],
) -> tuple[dict, str | None]:
    """Fit, then (``test``) test the best checkpoint; every way of stopping early as one line
    naming what is kept and how to go on (the command's ``overrides`` plus resume=true)."""
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path))
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        return evaluate_best(trainer, module, datamodule, test, best), best or None
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
            f"{folder.kept()}; continue with: {continue_command(overrides)}"
        ) from None


def final_metrics(trainer: L.Trainer, prefix: str) -> dict[str, float]:
    return {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith(prefix) and not k.endswith("loss")}


def evaluate_best(trainer: L.Trainer, module, datamodule, test: bool, best: str | None) -> dict[str, float]:
    """The run's validation metrics as ``trainer`` holds them, and (``test``) the test
    metrics of ``best`` (loaded through the trainer's checkpoint IO: the safe reader)."""
    metrics = final_metrics(trainer, "val/")
    if test:
        trainer.test(module, datamodule=datamodule, ckpt_path=best or None, verbose=False)
        metrics |= final_metrics(trainer, "test/")
    return metrics


def continue_command(overrides: tuple[str, ...]) -> str:
    """The command line that continues this run: its own overrides, plus resume=true."""
    kept = [o for o in overrides if o.split("=", 1)[0].lstrip("+~") != "resume"]
    return " ".join(["python train.py", *map(shlex.quote, kept), "resume=true"])


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


# 6. report: metrics.json (written by the run's folder), test_outcomes.csv, every logger, the
# done: line, the value returned to sweepers; a finished run's report is built by the same code


def run_summary(who: dict, arch: str, epochs: int, checkpoint: str | None, monitor: dict, metrics: dict) -> dict:
    """The contents of ``metrics.json``: what tells runs apart in tables (``who``: the run name,
    model, data and seed; the network in the paper's notation), how it ended, and its metrics."""
    return {
        **who,
        "arch": arch,
        "status": "ok",
        "epochs": epochs,
        "checkpoint": checkpoint,
        "monitor": monitor,
        "metrics": metrics,
    }


def write_test_outcomes(folder: Path, module) -> Path | None:
    """``<output dir>/test_outcomes.csv``: one row per test image, in the split's order (label,
    predicted class or -1 without a classifier, reconstruction MSE), so that two runs tested
    on the same images can be compared image by image (McNemar's test) without reading the
    test split again. Written by a run alone in its process (a DDP rank sees a shard)."""
    if not module.test_outcomes or module.trainer.world_size != 1:
        return None
    rows = torch.cat(module.test_outcomes).tolist()
    path = folder / "test_outcomes.csv"
    try:
        with path.open("w", newline="") as f:
            f.write("index,label,prediction,recon_mse\n")
            f.writelines(f"{i},{int(y)},{int(p)},{mse:.6g}\n" for i, (y, p, mse) in enumerate(rows))
    except OSError as err:
        raise write_failed(path, err) from None
    return path


def copy_test_outcomes(checkpoint: dict, folder: Path) -> Path | None:
    """A finished run reported again into another folder (a sweep repeated) brings its
    ``test_outcomes.csv`` along, from the output folder its checkpoint names: a regular file of
    bounded size, copied as bytes, never parsed here."""
    stored = stored_output_dir(checkpoint)
    if stored is None:
        return None
    source, target = stored / "test_outcomes.csv", folder / "test_outcomes.csv"
    try:
        if not source.is_file() or source.stat().st_size > MAX_OUTCOMES_BYTES or source.resolve() == target.resolve():
            return None
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as err:
        raise write_failed(target, err) from None
    return target


def shown(metrics: dict, monitor: str) -> str:
    """The done: line's metrics: the test metrics, or the monitored one when the run was not
    tested; never an empty list."""
    keys = [k for k in SHOWN if k in metrics] or [k for k in (monitor,) if k in metrics]
    return " ".join(f"{k}={metrics[k]:.4f}" for k in keys) or "no metric was computed"


def monitored_value(metric: str, metrics: dict) -> float:
    value = metrics.get(metric, math.nan)
    if not math.isfinite(value):
        raise ConfigError(f"{metric} was not computed (is it a metric this run logs?)")
    return value


# the process: CPU settings, torch's defaults, compiling. The CPU threads are chosen earlier,
# before torch loads (swwae.threads, the first line of train.py's entry); logged here


def set_process_defaults(keep_freed: bool, flush_denormal: bool) -> None:
    """Process-wide CPU speed settings: the job's call, not the library's (README "Performance")."""
    if keep_freed and keep_freed_memory():
        log.debug("glibc keeps freed memory for reuse (keep_freed_memory=true)")
    if flush_denormal and torch.set_flush_denormal(True):  # False where the CPU cannot
        log.debug("denormal floats flush to zero (flush_denormal=true)")
    log.debug(threads.describe(torch.get_num_threads()))  # chosen before torch loaded (swwae.threads)


# keep freed host memory for reuse, instead of handing it back to the OS after every step.
#
# glibc returns large freed blocks to the OS: mmap-ed ones at once, and the top of the heap once
# more than a trim threshold of it is free. A training step on CPU frees its activations at the
# end and allocates them again in the next, so every step then faults them back in, page by page,
# each page zeroed by the kernel: for a cheap element-wise op that costs more than its arithmetic
# (soft pooling runs many of them: its training step went from 1.54x to 1.24x native with this,
# scripts/bench_training.py). jemalloc and tcmalloc keep freed memory by default; this asks glibc
# to do the same. It is process-wide, so it is the application's call, never the library's: the
# training job makes it (keep_freed_memory: true in configs/train.yaml), swwae.pooling does not.

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


# compile=true: the network trains through torch.compile. nn.Module.compile compiles the network
# in place: its state-dict keys stay as they are (no _orig_mod. prefix), so the checkpoints of a
# compiled run are those of an eager one, and either kind resumes the other. Every pooling mode
# compiles without a graph break (tests/test_compile.py). Compiling costs time once per graph
# (training, evaluation, a smaller last batch); whether it pays depends on the machine
# (docs/performance.md).

DEFAULT_BACKEND = "inductor"


def compile_backend(setting) -> str | None:
    """The torch.compile backend that ``compile`` asks for: ``false`` none, ``true`` the
    default (inductor), or a backend's name (``aot_eager``: traced, not code-generated)."""
    if setting is None or setting is False:
        return None
    if setting is True:
        return DEFAULT_BACKEND
    backends = torch._dynamo.list_backends(exclude_tags=())
    if not isinstance(setting, str) or setting not in backends:
        raise ConfigError(
            f"compile={setting!r}: write true, false, or a torch.compile backend "
            f"({', '.join(b for b in backends if 'TESTING' not in b)})"
        )
    return setting


def compile_network(module: torch.nn.Module, setting) -> bool:
    """Compile ``module.net`` in place when ``setting`` (the config's ``compile``) asks for it;
    whether it did."""
    backend = compile_backend(setting)
    if backend is None:
        return False
    module.net.compile(backend=backend, dynamic=False)
    log.info("torch.compile: the network compiles (backend %s) on its first batches", backend)
    return True


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
