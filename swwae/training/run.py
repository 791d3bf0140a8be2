"""The training job behind ``train.py``: config in, trained model, logs, checkpoints and
``metrics.json`` out. ``train`` tells the story of a run, one named step a line:

1. check: the settings (the typed run spec, parsed once: ``swwae train`` parses it before torch
   loads and hands it over), the process settings, every folder it writes;
2. build: the data, the model, the callbacks and the one Trainer, before the lock, so that bad
   input stops here and touches nothing (its loggers come once the run is known to go on);
3. own the run's folder (``runs.folder``: the lock; a second run of the name ends here);
4. decide: continue, start over, refuse, or report a run that already finished (its metrics
   again, evaluated on the same Trainer, on the run's devices, when its metrics.json is gone);
5. fit, then test the best checkpoint; every way of stopping early as one line;
6. report: ``metrics.json``, ``test_outcomes.csv``, the final metrics to every logger, the
   ``done:`` line, the monitored value for sweepers.

The job reads its settings from the spec; the Hydra config's nodes are only instantiated
(``composing.build``: the data, the model, the callbacks, the loggers), and its resolved form is
what checkpoints store. Hydra's own state (the choices, the overrides, the sweep) comes in as
``Launch`` values, read once at the entry (``composing.launch``). The process settings (CPU speed,
compiling, a quiet console) are ``swwae.training.process``'s.
"""

from __future__ import annotations

import copy
import logging
import math
import shlex
import shutil
import signal
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn, TrainerStatus
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from swwae.checkpoint_file import mid_epoch_means
from swwae.errors import CheckpointError, ConfigError, DiskError, Interrupted, NonFiniteError, Preempted
from swwae.install import this_command
from swwae.settings import own_settings
from swwae.training.callbacks import RunClock, for_the_loggers, job_callbacks, log_final, run_params
from swwae.training.checkpoints import build_trainer, check_fits_model, check_launcher, check_sync_batchnorm
from swwae.training.composing import Launch, build, build_all, build_loggers, check_monitor, launch
from swwae.training.folders import check_folders, check_writable, write_failed
from swwae.training.preemption import Preemption, PreemptionSaved
from swwae.training.process import compile_network, set_process_defaults, use_channels_last
from swwae.training.runs.decision import Decision
from swwae.training.runs.folder import (
    RunFolder,
    batches,
    describe_checkpoint,
    identity_of,
    mid_epoch_position,
    stored_output_dir,
)
from swwae.training.runs.identity import without_labels_tag
from swwae.training.runs.sweep_claim import claim
from swwae.training.spec import RunSpec, Section, check_config, table_entry
from swwae.training.trainer_settings import check_epoch

log = logging.getLogger(__name__)

SHOWN = ("test/recon_mse", "test/acc")  # the done: line's metrics, or the monitor's when not tested
MAX_OUTCOMES_BYTES = 16 * 2**20  # test_outcomes.csv of a test split of ~300,000 images


@dataclass
class Job:
    """What the job built: the run's parts, and what its reports say of it."""

    datamodule: L.LightningDataModule
    module: L.LightningModule
    trainer: L.Trainer
    preemption: Preemption
    owns_run: bool  # the process that trains owns the run: rank 0 of a DDP run, or a process alone
    run_info: dict  # what tells runs apart in tables: run name, model, data, seed
    monitor: dict  # the metric that picks best.ckpt, and its mode


# the job


def train(cfg: DictConfig, hydra: Launch | None = None, spec: RunSpec | None = None) -> float:
    """Train, test, write ``metrics.json``; return ``cfg.optimized_metric`` for sweepers.
    ``hydra``: what Hydra knows of the job (``composing.launch()``, read here when not given);
    ``spec``: the parsed config (parsed here when not given)."""
    started = time.perf_counter()
    hydra = hydra if hydra is not None else launch()
    spec = spec if spec is not None else check_config(cfg)
    set_process_defaults(spec.keep_freed_memory, spec.flush_denormal)
    check_folders(spec.paths)
    run_config = stored_config(cfg)
    folder = run_folder(spec, run_config, hydra)
    job = build_job(cfg, spec, run_config, folder, hydra)
    check_old_name(folder, name_before_labels(cfg), spec)  # before the run's folder is made
    with folder.own(job.owns_run):  # a second run of this name ends here, before it reads or moves a file
        check_writable(folder.path, f"the checkpoints of {spec.run_name}", "run_name")
        decision = resume_decision(folder, job.module, spec)
        if decision.action == "finished":  # a repeated or re-queued command: its metrics, nothing trained
            return report_finished_run(folder, job, decision, spec)
        resume_from = start_training(folder, job, decision, cfg.get("logger"))
        with ExitStack() as stack:
            stack.callback(job.preemption.install().restore)
            metrics, best = fit_and_test(folder, job, resume_from, spec, hydra.overrides)
        clock = RunClock.of(job.trainer)  # every process's share of the run, this one's setup included
        metrics["train_time_s"] = clock.seconds() + clock.started - started
        return report(folder, job, spec, run_config, metrics, best)


# 1. check and 2. build


def stored_config(cfg: DictConfig) -> dict:
    """The run config as checkpoints store it: resolved, its model the settings that made the
    weights (``own_settings``: no other pooling mode's, no lab's term the run does not weigh), so
    that a run that uses none of a lab's parts reads back without the lab's plugin."""
    run_config = OmegaConf.to_container(cfg, resolve=True)
    if isinstance(run_config.get("model"), dict):
        run_config["model"] = own_settings(run_config["model"])
    return run_config


def run_folder(spec: RunSpec, run_config: dict, hydra: Launch) -> RunFolder:
    """The run's folder, named and identified (the settings that made its weights); in a
    multirun, claimed for this job alone (``runs.sweep_claim``)."""
    sections = (run_config.get(key) for key in ("model", "data", "trainer"))
    identity = identity_of(
        *sections, spec.seed, spec.optimized_metric, spec.optimized_mode, run_config.get("callbacks")
    )
    entry = table_entry(spec.data.target) if isinstance(spec.data, Section) else None
    contents = entry.load().contents_of(spec.data) if entry is not None else None
    if contents is not None:  # a folder of the user's images: what it holds is part of the run
        identity["data"]["contents"] = contents
    folder = RunFolder(spec.paths.checkpoint_dir, spec.run_name, identity, spec.paths.output_dir, spec.keep_previous)
    if hydra.sweep is not None:
        claim(folder.path, *hydra.sweep)
    return folder


def build_job(cfg: DictConfig, spec: RunSpec, run_config: dict, folder: RunFolder, hydra: Launch) -> Job:
    """The data (loaded now: data errors stop the run before any training), the model, the
    callbacks and the one Trainer (its loggers come later: ``start_training``)."""
    L.seed_everything(spec.seed, workers=True, verbose=False)
    datamodule = build(cfg.data, _convert_="all")
    datamodule.prepare_data()
    datamodule.setup("fit")
    data = {"image_shape": datamodule.image_shape, "num_classes": datamodule.num_classes}
    module = build(cfg.model, **data, pixel_mean=datamodule.pixel_mean(), _convert_="all")  # plain lists
    configured = build_all(cfg.get("callbacks"))
    check_monitor(spec.optimized_metric, spec.optimized_mode, logged_val_metrics(module, configured, datamodule))
    settings = {k: v for k, v in run_config.items() if not isinstance(v, (dict, list))}  # seed, run_name, ...
    sections = (run_config.get(key) for key in ("model", "data", "trainer"))
    params = run_params(settings, *sections, module.net.arch, hydra.choices)
    identity_record = {"identity": folder.identity, "digest": folder.digest}  # in every checkpoint
    callbacks = job_callbacks(configured, run_config, params, identity_record, module, datamodule, spec.seed)
    preemption = Preemption(folder.path)
    trainer = build_trainer(spec.trainer, [], [*callbacks, preemption], verbose=spec.verbose)
    check_launcher(trainer, spec.trainer.strategy)
    check_sync_batchnorm(trainer, module)
    use_channels_last(module, spec.channels_last, trainer.strategy.root_device)  # a layout: the same checkpoints
    compile_network(module, spec.compile)  # compile=true: in place, checkpoints unchanged
    check_epoch(spec.trainer, datamodule, trainer.world_size)  # batch settings against the data, before the folder
    return Job(
        datamodule,
        module,
        trainer,
        preemption,
        owns_run=trainer.world_size == 1 or trainer.global_rank == 0,
        run_info={
            "run_name": spec.run_name,
            "model": hydra.choices.get("model"),
            "data": hydra.choices.get("data"),
            "seed": spec.seed,
        },
        monitor={"metric": spec.optimized_metric, "mode": spec.optimized_mode},
    )


def logged_val_metrics(module, callbacks=(), datamodule=None) -> list[str]:
    """The validation metrics of the run: the model's, and those a callback logs on this data
    (its ``val_metrics(datamodule)``: ``val/knn_acc``, where the k-NN monitor is on)."""
    own = [name for c in callbacks if hasattr(c, "val_metrics") for name in c.val_metrics(datamodule)]
    return [f"val/{name}" for name in module.metrics["val"]] + own


# 4. decide


def name_before_labels(cfg: DictConfig) -> str | None:
    """This run's default name as it was before the default name said the number of labels
    (swwae 0.3.0 and earlier named ``data.num_labels=100`` as its fully supervised twin,
    ``swwae_hard_mnist_sample_seed0``), where it differs from the name now; None for a fully
    supervised run and for a name the user or a preset gives (``identity.without_labels_tag``)."""
    if OmegaConf.select(cfg, "data.num_labels") is None:
        return None
    template = without_labels_tag(str(OmegaConf.to_container(cfg, resolve=False).get("run_name")))
    if template is None:
        return None
    old = copy.deepcopy(cfg)
    with read_write(old), open_dict(old):
        old.run_name = template
        name = str(old.run_name)
    return name if name != cfg.run_name else None


def check_old_name(folder: RunFolder, old_name: str | None, spec: RunSpec) -> None:
    """A run whose folder holds no checkpoint, and whose own run is in the folder of its old
    default name (``name_before_labels``): the same command would train it again beside it. One
    line, before anything is written (its folder, its lock), with the ways on: its old name, the
    folder moved, or a fresh start (``resume=false``, which asks for one: not checked)."""
    if old_name is None or spec.resume == "false" or folder.holds_checkpoints():
        return
    found = folder.this_run_in(old_name, spec.trainer.max_epochs, spec.trainer.max_steps)
    if found is None:
        return
    old = folder.root / old_name
    state = "finished" if found.action == "finished" else "unfinished"
    raise CheckpointError(
        f"this run ({state}) is in {old}, the folder of its name before the default run name said "
        f"its labels (swwae 0.3.0 and earlier): continue or report it with run_name={old_name}, or "
        f"move it to its name now (mv {shlex.quote(str(old))} {shlex.quote(str(folder.path))}), or "
        "resume=false to train it again here"
    )


def resume_decision(folder: RunFolder, module, spec: RunSpec) -> Decision:
    """Where the run starts, said in one line where it continues or passes files over; a
    refusal as one error line naming the folder, what it holds and the ways out."""
    decision = folder.decide(spec.resume, spec.trainer.max_epochs, spec.trainer.max_steps)
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
        if decision.warnings:
            log.warning("resuming from %s instead", describe_checkpoint(path, checkpoint))
        elif decision.action == "continue":
            log.info("resume=%s: continuing this run from %s", spec.resume, describe_checkpoint(path, checkpoint))
    return decision


def report_finished_run(folder: RunFolder, job: Job, decision: Decision, spec: RunSpec) -> float:
    """A run that already finished: its metrics again (from its metrics.json, or evaluated again
    from its checkpoints when that is gone), nothing trained or logged."""
    path, checkpoint = folder.checkpoint(decision.checkpoint)
    epochs = checkpoint.get("epoch", -1) + 1
    wanted = [spec.optimized_metric] + (["test/recon_mse"] if spec.test else [])
    summary, source = folder.own_metrics(checkpoint, wanted)
    if summary is None:  # e.g. killed after its last checkpoint, before it wrote metrics.json
        # evaluated again by the job's Trainer as the run was (a DDP run on its devices), without
        # its callbacks but those that measure a validation metric (val/knn_acc, which may be the
        # monitor): nothing is saved, shown or logged
        trainer = job.trainer
        trainer.callbacks = [c for c in trainer.callbacks if hasattr(c, "val_metrics")]
        trainer.validate(job.module, datamodule=job.datamodule, ckpt_path=str(path), verbose=False)
        best = path.with_name("best.ckpt") if path.with_name("best.ckpt").is_file() else path
        best = folder.tested(best) if spec.test else best
        metrics = evaluate_best(trainer, job.module, job.datamodule, spec.test, str(best))
        summary = run_summary(job, epochs, str(best.absolute()), metrics)
        source = f"evaluated again from {best.name}"
        if job.owns_run:  # under DDP each process holds every row: one writes them
            write_test_outcomes(folder.output_dir, job.module)
    elif job.owns_run:  # the outcomes the run wrote beside its metrics.json, if any (a sweep reads them per job)
        copy_test_outcomes(checkpoint, folder.output_dir)
    value = monitored_value(spec.optimized_metric, summary["metrics"])
    summary = dict(summary) | {"reported_again": source}  # a sweep's summary says this job trained nothing
    if job.owns_run:
        folder.write_metrics(summary)
        print(
            f"done: {spec.run_name} had already finished: {epochs} of {spec.trainer.max_epochs} epochs "
            f"trained; {metrics_line(summary['metrics'], spec.optimized_metric)} ({source}); nothing was "
            f"retrained or logged again (resume=false trains it again, under the loggers now asked for) "
            f"-> {spec.paths.output_dir}"
        )
    return value


def start_training(folder: RunFolder, job: Job, decision: Decision, logger_nodes) -> Path | None:
    """Every check passed and the run goes on: its loggers, the old run moved aside (a fresh
    start over it), a pre-empted epoch's position; the checkpoint it continues from, if any."""
    continuing = decision.action == "continue"
    path, checkpoint = folder.checkpoint(decision.checkpoint) if continuing else (None, None)
    job.trainer.loggers = build_loggers(logger_nodes, resumed=checkpoint)  # Lightning reads them from fit on
    job.trainer.callbacks = for_the_loggers(job.trainer.callbacks, job.trainer.loggers)
    if decision.action == "start_over" and job.owns_run:  # only now touch what is on disk
        folder.move_aside()
    if not continuing:
        return None
    if (position := mid_epoch_position(checkpoint)) is not None:
        job.datamodule.resume_at(*position)
        if job.owns_run and (means := mid_epoch_means(checkpoint)) is not None:  # every process's: one holds them
            job.module.term_means.restore(means)
    return path


# 5. fit and test


def fit_and_test(
    folder: RunFolder, job: Job, ckpt_path: Path | None, spec: RunSpec, overrides: tuple[str, ...]
) -> tuple[dict, str | None]:
    """Fit (from ``ckpt_path`` when continuing), then (``spec.test``) test the best checkpoint;
    every way of stopping early as one line naming what is kept and how to go on (the command's
    ``overrides`` plus resume=true)."""
    trainer, module, datamodule, preemption = job.trainer, job.module, job.datamodule, job.preemption
    try:
        trainer.fit(module, datamodule=datamodule, ckpt_path=None if ckpt_path is None else str(ckpt_path))
        best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
        return evaluate_best(trainer, module, datamodule, spec.test, best), best or None
    except (NonFiniteError, DiskError) as err:  # one line for train.py, saying what is left to resume from
        stopped = type(err)(f"{err}; {folder.kept()}")
        stopped.during_training = True  # not a rejected input: train.py keeps the run's output folder
        raise stopped from None
    except PreemptionSaved:
        line = preempted_line(folder, preemption, spec.resume, overrides)
        raise said_once(Preempted(line, preemption.received), job) from None
    except (KeyboardInterrupt, SystemExit):  # Lightning turns Ctrl-C into sys.exit(1)
        if trainer.state.status != TrainerStatus.INTERRUPTED:
            raise
        if preemption.received is not None:  # SIGTERM during validation: Lightning stopped it there
            line = preempted_line(folder, preemption, spec.resume, overrides)
            raise said_once(Preempted(line, preemption.received), job) from None
        line = f"interrupted {stopped_where(trainer)}; {folder.kept()}; continue with: {continue_command(overrides)}"
        raise said_once(Interrupted(line), job) from None


def said_once(stopped: Interrupted, job: Job) -> Interrupted:
    """``stopped``, its line said by the process that owns the run alone: under DDP every process
    stops alike (a pre-emption is agreed on), and each said the same line."""
    stopped.said_elsewhere = not job.owns_run
    return stopped


def stopped_where(trainer: L.Trainer) -> str:
    """Where a run stopped, counting epochs from 1: 'in epoch 2 (step 40)'; once training has
    ended, its test of the best checkpoint (the epoch count then stands one past the last)."""
    if trainer.state.fn == TrainerFn.TESTING:
        return f"while testing, after training ended (step {trainer.global_step})"
    return f"in epoch {trainer.current_epoch + 1} (step {trainer.global_step})"


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
    return " ".join([this_command("train"), *map(shlex.quote, kept), "resume=true"])


def preempted_line(folder: RunFolder, preemption: Preemption, resume: str = "auto", overrides=()) -> str:
    """'pre-empted by SIGUSR1; saved <path> (in epoch e, after k batches; step s); what next': the
    same command, or, where it says ``resume=false`` (it would start over, this run moved
    aside), the command that continues it."""
    name = signal.Signals(preemption.received).name
    saved = preemption.saved
    if saved is None:
        kept = folder.kept()
    else:
        kept = (
            f"saved {saved['path']} (in epoch {saved['epoch'] + 1}, after {batches(saved['batches_done'])}; "
            f"step {saved['step']})"
        )
    requeue = saved.get("requeue") if saved else None  # 'requeued SLURM job 7', or why it failed
    requeued = bool(requeue) and requeue.startswith("requeued")
    if resume == "false":
        said = f"{requeue}{' (resume=false: it starts over)' if requeued else ''}; " if requeue else ""
        return f"pre-empted by {name}; {kept}; {said}continue with: {continue_command(overrides)}"
    after = (
        f"{requeue}: it continues by itself"
        if requeued
        else (f"{requeue + '; ' if requeue else ''}the same command continues it (resume=auto)")
    )
    return f"pre-empted by {name}; {kept}; {after}"


# 6. report: metrics.json (written by the run's folder), test_outcomes.csv, every logger, the
# done: line, the value returned to sweepers; a finished run's report is built by the same code


def report(folder: RunFolder, job: Job, spec: RunSpec, run_config: dict, metrics: dict, best: str | None) -> float:
    """The trained run's report, by the process that owns it: metrics.json, test_outcomes.csv,
    the final metrics to every logger, the done: line; the monitored value for sweepers."""
    trainer = job.trainer
    value = monitored_value(spec.optimized_metric, metrics)  # a run that never validated reports nothing
    summary = run_summary(job, trainer.current_epoch, best, metrics)
    if trainer.is_global_zero:
        folder.write_metrics(summary)
        write_test_outcomes(folder.output_dir, job.module)
        log_final(trainer.loggers, run_config, spec.seed, summary, trainer.global_step)
        print(
            f"done: {spec.run_name}: {metrics_line(metrics, spec.optimized_metric)} "
            f"({metrics['train_time_s']:.0f} s) -> {spec.paths.output_dir}"
        )
    return value


def run_summary(job: Job, epochs: int, checkpoint: str | None, metrics: dict) -> dict:
    """The contents of ``metrics.json``: what tells runs apart in tables (the run name, model,
    data and seed; the network in the paper's notation), how it ended, and its metrics."""
    return {
        **job.run_info,
        "arch": job.module.net.arch,
        "status": "ok",
        "epochs": epochs,
        "checkpoint": checkpoint,
        "monitor": job.monitor,
        "metrics": metrics,
    }


def write_test_outcomes(folder: Path, module) -> Path | None:
    """``<output dir>/test_outcomes.csv``: one row per test image, in the split's order (label,
    predicted class or -1 without a classifier, reconstruction MSE), so that two runs tested
    on the same images can be compared image by image (McNemar's test) without reading the
    test split again; under DDP, those of every process (``SWWAEModule.every_process_outcomes``)."""
    if not module.test_outcomes:
        return None
    rows = torch.cat(module.test_outcomes).cpu().tolist()  # one copy from a GPU, not one a batch
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


def metrics_line(metrics: dict, monitor: str) -> str:
    """The done: line's metrics: the test metrics, or the monitored one when the run was not
    tested; never an empty list."""
    keys = [k for k in SHOWN if k in metrics] or [k for k in (monitor,) if k in metrics]
    return " ".join(f"{k}={metrics[k]:.4f}" for k in keys) or "no metric was computed"


def monitored_value(metric: str, metrics: dict) -> float:
    value = metrics.get(metric, math.nan)
    if not math.isfinite(value):
        raise ConfigError(
            f"{metric} was not computed: the run stopped before it validated once (trainer.max_time?), "
            f"so it has no result to report; its checkpoints are kept"
        )
    return value
