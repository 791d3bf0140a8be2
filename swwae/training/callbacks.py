"""Lightning callbacks: reconstruction images for every logger that takes images (TensorBoard,
MLflow, W&B), the run config in checkpoints and in the experiment trackers,
per-batch random streams (so that a resumed run replays an uninterrupted one), and progress
output that suits where it goes (a live bar on a terminal, a line per epoch in a log file).

Experiment trackers (``configs/logger/``), Lightning's own loggers, and the one code path that
hands each of them what the training job logs beyond Lightning's scalars:

* ``log_image(logger, name, image, step)``: a panel of ``swwae.images`` (a ``Picture``,
  converted once for all loggers) to any logger that takes images (TensorBoard, MLflow,
  W&B, or any logger with Lightning's ``log_image``); CSV takes none.
* ``log_config(logger, params)``: the run config (``run_params``), at the start of a run:
  MLflow params, W&B config, the ``hparams.yaml`` of CSV and TensorBoard. (The training job
  turns off Lightning's own logging of the module's and datamodule's arguments, which would
  give every model setting twice, flat and as ``model/...``.)
* ``log_summary(logger, params, metrics, step)``: at the end of a run, the final metrics as
  ``hp/<metric>``: TensorBoard's hparams table (with ``params``), MLflow metrics, W&B
  history and summary, a row of the CSV file.

The OmegaConf resolver ``${swwae.wandb_offline:}`` (``configs/logger/wandb.yaml``) keeps W&B
offline unless the user chose a mode (``WANDB_MODE``) or logged in (``WANDB_API_KEY``, or
the ``wandb login`` entry in ``~/.netrc``).
"""

from __future__ import annotations

import csv
import logging
import netrc
import os
import random
import sys
import time
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from pathlib import Path
from urllib.parse import urlparse

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import DeviceStatsMonitor, LearningRateMonitor, ProgressBar, TQDMProgressBar
from lightning.pytorch.loggers import CSVLogger, Logger, MLFlowLogger, TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_only
from lightning.pytorch.utilities.model_helpers import is_overridden
from omegaconf import OmegaConf
from torch import Tensor

from swwae.images import Picture, card_panels, panel_rows
from swwae.training.callback_settings import parse_callback
from swwae.training.runs.identity import IDENTITY_KEY

log = logging.getLogger(__name__)

TRACKER_RUNS_KEY = "swwae_tracker_runs"  # in every checkpoint: tracker_runs

# helpers


def wandb_offline() -> bool:
    """W&B runs offline unless ``WANDB_MODE`` is set (W&B then reads it itself) or an API key
    is at hand (``WANDB_API_KEY``, or ``wandb login``'s entry in ``~/.netrc`` or ``$NETRC``)."""
    if os.environ.get("WANDB_MODE") or os.environ.get("WANDB_API_KEY"):
        return False
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    try:
        return netrc.netrc(os.environ.get("NETRC") or None).authenticators(host) is None
    except (OSError, netrc.NetrcParseError):
        return True


def mlflow_key(name: str) -> str:
    """MLflow image keys: ``where/stage_1`` -> ``where_stage_1`` (a slash in a key made the
    image undownloadable in some MLflow versions)."""
    return name.replace("/", "_")


def takes_images(logger: Logger) -> bool:
    return isinstance(logger, (TensorBoardLogger, MLFlowLogger)) or callable(getattr(logger, "log_image", None))


def _tensorboard_image(writer, name: str, picture: Picture, step: int) -> None:
    """Hand TensorBoard the picture's PNG. ``add_image`` would convert the pixels to float and
    back and encode them again at zlib's default level, three times the work."""
    from torch.utils.tensorboard import SummaryWriter

    if not (isinstance(writer, SummaryWriter) and hasattr(writer, "_get_file_writer")):  # tensorboardX: own protobufs
        writer.add_image(name, picture.pixels, global_step=step, dataformats="HW" if picture.channels == 1 else "HWC")
        return
    from tensorboard.compat.proto.summary_pb2 import Summary

    height, width = picture.pixels.shape[:2]
    image = Summary.Image(height=height, width=width, colorspace=picture.channels, encoded_image_string=picture.png)
    # what add_image itself does with the summary it builds
    writer._get_file_writer().add_summary(Summary(value=[Summary.Value(tag=name, image=image)]), step)


def _final(metrics: dict[str, float]) -> dict[str, float]:
    return {f"hp/{k}": float(v) for k, v in metrics.items()}


# logging


def log_image(logger: Logger, name: str, image: Tensor | Picture, step: int) -> bool:
    """Log ``image`` (a ``Picture``, or a (3, H, W) tensor in [0, 1]) as ``name`` at ``step``
    (the epoch) to ``logger``; False for a logger that takes no images (CSV). W&B places it
    at the trainer's global step (its x-axis for everything Lightning logs)."""
    picture = image if isinstance(image, Picture) else Picture(image)
    if isinstance(logger, TensorBoardLogger):
        _tensorboard_image(logger.experiment, name, picture, step)
    elif isinstance(logger, MLFlowLogger):
        logger.experiment.log_image(logger.run_id, picture.pil, key=mlflow_key(name), step=step)
    elif isinstance(logger, WandbLogger):
        logger.log_image(key=name, images=[picture.pil])
    elif callable(getattr(logger, "log_image", None)):  # Lightning's signature: (key, images, step)
        logger.log_image(key=name, images=[picture.pil], step=step)
    else:
        return False
    return True


def log_config(logger: Logger, params: dict) -> None:
    """The run config at the start of a run."""
    if isinstance(logger, MLFlowLogger):  # params cannot change once logged: add only new keys
        from lightning.fabric.utilities.logger import _convert_params, _flatten_dict

        held = logger.experiment.get_run(logger.run_id).data.params
        params = {k: v for k, v in _flatten_dict(_convert_params(params)).items() if k not in held}
        if not params:
            return
    logger.log_hyperparams(params)


def tracker_runs(loggers: list) -> dict[str, str]:
    """The runs the trackers opened for this run (``{"mlflow": <run id>, "wandb": <run id>}``), which
    every checkpoint keeps so that the run, resumed, goes on logging into the same ones
    (``mlflow_run_to_continue``, ``stored_run_id``)."""
    runs = {}
    for logger in loggers:
        if isinstance(logger, MLFlowLogger) and logger.run_id:
            runs.setdefault("mlflow", logger.run_id)
        elif isinstance(logger, WandbLogger) and logger.version:
            runs.setdefault("wandb", logger.version)
    return runs


def stored_run_id(checkpoint: Mapping, tracker: str) -> str | None:
    """The id of the ``tracker``'s run that logged ``checkpoint`` (``tracker_runs``), parsed, never
    trusted: a name of letters, digits, ``-`` and ``_`` (what MLflow and W&B make), else None."""
    runs = checkpoint.get(TRACKER_RUNS_KEY)
    run_id = runs.get(tracker) if isinstance(runs, Mapping) else None
    if isinstance(run_id, str) and 0 < len(run_id) <= 64 and run_id.replace("-", "").replace("_", "").isalnum():
        return run_id
    return None  # an older swwae's checkpoint, or not ours


def mlflow_run_to_continue(node: Mapping, checkpoint: Mapping) -> str | None:
    """The MLflow run that logged ``checkpoint``, reopened (RUNNING again), for the run that continues
    from it: else its curves would restart in a second run of the same name, the first left FAILED
    with half of them. None (a new run) where the checkpoint names none, or the store ``node`` logs to
    does not hold it (another ``MLFLOW_TRACKING_URI``, a deleted run). (W&B continues the run of the id
    it is given by itself: ``resume="allow"``, Lightning's default.)"""
    run_id = stored_run_id(checkpoint, "mlflow")
    if run_id is None:
        return None
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=node.get("tracking_uri"))
    try:
        if client.get_run(run_id).info.lifecycle_stage != "active":
            return None
        client.update_run(run_id, status="RUNNING")
    except MlflowException:
        return None
    return run_id


def continue_csv(logger: CSVLogger, step: int) -> None:
    """A resumed run's CSV logger (of its newest version: ``build_loggers``) writes on in the
    ``metrics.csv`` it finds, so that one file holds the whole run; Lightning's writer would delete
    it. The rows written at or after ``step`` (the checkpoint's: a process killed after its last
    save) go: the resumed run logs those steps again."""
    if rank_zero_only.rank != 0:  # the one process that writes the file
        return
    path = Path(logger.log_dir) / "metrics.csv"
    try:
        with path.open(newline="") as file:
            reader = csv.DictReader(file)
            rows = [row for row in reader if not _at_or_after(row.get("step"), step)]
            columns = sorted(reader.fieldnames or [])
    except FileNotFoundError:
        return
    writer = logger.experiment  # deletes the file
    writer.metrics_keys = columns
    with path.open("w", newline="") as file:
        table = csv.DictWriter(file, fieldnames=columns)
        table.writeheader()
        table.writerows(rows)


def _at_or_after(value: str | None, step: int) -> bool:
    try:
        return int(float(value)) >= step
    except (TypeError, ValueError):
        return False


def log_summary(logger: Logger, params: dict, metrics: dict[str, float], step: int) -> None:
    """The final metrics, as ``hp/<metric>``; TensorBoard's hparams table pairs them with
    ``params`` (the other loggers got the whole run config from ``log_config``)."""
    if isinstance(logger, TensorBoardLogger):  # the hparams table
        logger.log_hyperparams(params, metrics=_final(metrics))
        logger.experiment.flush()
        return
    logger.log_metrics(_final(metrics), step=step)
    logger.save()


def run_params(
    settings: Mapping,
    model: Mapping,
    data: Mapping,
    trainer: Mapping,
    arch: str | None = None,
    choices: dict | None = None,
) -> dict:
    """The run config as tracker params: its top-level plain ``settings`` (``seed``, ``run_name``,
    ...), the model, data and trainer groups (``model/lr``, ``data/batch_size``,
    ``trainer/max_epochs``, ...; ``model/arch`` is the network trained, in the paper's
    notation) and the config chosen in each group (``choice/model``: ``swwae_hard``, ...)."""
    params = dict(settings)
    for group, values in (("model", model), ("data", data), ("trainer", trainer)):
        params[group] = {k: v for k, v in (values or {}).items() if k != "_target_"}
    if arch is not None:
        params["model"]["arch"] = arch
    chosen = {
        k: v if isinstance(v, str) else str(list(v))
        for k, v in (choices or {}).items()
        if k in ("model", "data", "trainer", "logger", "experiment") and v is not None
    }
    if chosen:
        params["choice"] = chosen
    return params


def job_callbacks(
    configured: list,
    stored: dict,
    params: dict,
    identity: dict,
    module: L.LightningModule,
    datamodule: L.LightningDataModule,
    seed: int | None,
) -> list:
    """The config's callbacks (built: ``configured``) plus the job's own: the run config as
    resolved (``stored``) and its ``identity`` in checkpoints, its tracker ``params`` in the
    trackers, per-batch seeds."""
    callbacks = [*configured, SaveRunConfig(stored, identity), RunClock()]
    # the trackers get the run config (model/lr, data/batch_size, ...), not Lightning's flat
    # copy of the module's and datamodule's arguments on top of it
    module._log_hyperparams = datamodule._log_hyperparams = False
    callbacks.append(LogRunConfig(params))
    if seed is not None:
        callbacks.append(BatchSeed(seed))  # a resumed run replays the uninterrupted one
    return callbacks


def log_final(loggers: list, run_config: Mapping, seed: int | None, summary: dict, step: int) -> None:
    """The final metrics to every logger (TensorBoard's hparams table, MLflow, W&B, CSV), with
    ``table_params`` as their params."""
    hparams = table_params(run_config.get("model") or {}, run_config.get("data") or {}, seed, summary)
    for logger in loggers:
        log_summary(logger, hparams, summary["metrics"], step=step)


def table_params(model: Mapping, data: Mapping, seed: int | None, summary: dict) -> dict:
    """The hparams table's columns: the model's settings, the data's (``data/num_labels``: the rows
    of a semi-supervised sweep differ there), the seed, the model and data chosen and the network.
    Not the classes the settings build (``_target_``): a column that says nothing."""
    settings = {k: v for k, v in model.items() if k != "_target_"}
    settings |= {f"data/{k}": v for k, v in data.items() if k != "_target_"}
    return settings | {"seed": seed, "model": summary.get("model"), "data": summary["data"], "arch": summary["arch"]}


def register_tracker_resolvers() -> None:
    if not OmegaConf.has_resolver("swwae.wandb_offline"):
        OmegaConf.register_new_resolver("swwae.wandb_offline", wandb_offline)


register_tracker_resolvers()


# callbacks


class ReconstructionImages(L.Callback):
    """Every ``every_n_epochs`` (0: never), on the same first ``num_images`` validation images, log the
    panels of ``swwae.images.reconstruction_panels`` (labelled rows, magnified so an image
    is at least 84 pixels wide, drawn to be read in TensorBoard's card) to every logger that
    takes images (``log_image``: TensorBoard, MLflow, W&B; not CSV). Its settings, their defaults
    and help: ``swwae.training.callback_settings.ReconstructionImagesSettings``.

    The network's pass stays in the training thread; where the panels go to TensorBoard alone,
    drawing them, their PNGs and the writes can be a thread's of their own (``in_background``),
    one epoch's at a time, all done before the loggers close. For a GPU, whose small networks wait
    for the host between their launches: what the painter takes off the training thread is what
    it does without holding Python's GIL (PNG encoding, torch's ops), and whether that shortens a
    GPU's epoch is for the device check to measure; on the CPU, training's own threads fill the
    cores, and a painter beside them made epochs no shorter (docs/performance.md)."""

    def __init__(self, **settings):
        self.settings = parse_callback("reconstruction_images", settings)
        self._images = None
        self._painter: ThreadPoolExecutor | None = None
        self._painting: Future | None = None  # the panels handed to the painter last

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        every = self.settings.every_n_epochs
        if trainer.sanity_checking or not every or trainer.current_epoch % every:
            return
        loggers = [lg for lg in trainer.loggers if takes_images(lg)]
        if not loggers or not trainer.is_global_zero:
            return
        if self._images is None:  # fixed once: the same digits every epoch
            self._images = trainer.datamodule.images("val", self.settings.num_images)
        x = self._images.to(module.device, module.dtype)
        rows = panel_rows(module.net, x)  # in host memory
        paint = partial(_paint, rows, tuple(x.shape[-2:]), loggers, trainer.current_epoch)
        if not self._in_background(module.device, loggers):
            paint()
            return
        self.wait()  # the last epoch's panels (written long since): one epoch's at a time
        if self._painter is None:
            self._painter = ThreadPoolExecutor(1, "swwae-panel-painter", initializer=_one_openmp_thread)
        self._painting = self._painter.submit(paint)

    def _in_background(self, device: torch.device, loggers: list[Logger]) -> bool:
        chosen = self.settings.in_background
        wanted = device.type == "cuda" if chosen == "auto" else chosen
        # TensorBoard's writer takes events from any thread; MLflow's and W&B's clients are left to the training's
        return wanted and all(isinstance(logger, TensorBoardLogger) for logger in loggers)

    def wait(self) -> None:
        """Until the panels handed to the painter are written; the error of painting them, if any."""
        painting, self._painting = self._painting, None
        if painting is not None:
            painting.result()

    def _stop(self) -> None:
        try:
            self.wait()
        finally:
            if self._painter is not None:
                self._painter.shutdown(wait=True)
                self._painter = None

    def teardown(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        self._stop()  # before the loggers close (Lightning finalizes them after the callbacks' teardown)

    def on_exception(self, trainer: L.Trainer, module: L.LightningModule, exception: BaseException) -> None:
        try:
            self._stop()
        except Exception as err:  # the run's own error goes on; this one in a line of the log
            log.error("the reconstruction panels of the last epoch were not written: %s", err)


def _one_openmp_thread() -> None:
    """The painter's torch ops on one OpenMP thread (this thread's setting alone): a second team of
    them beside training's makes libgomp count more threads than CPUs and cut the training team's
    waiting short, every CPU step about 20% slower (docs/performance.md). torch sets a thread's
    OpenMP threads to its own count the first time the thread asks for them: asked first, then one."""
    from threadpoolctl import threadpool_limits

    torch.get_num_threads()
    threadpool_limits(limits=1, user_api="openmp")


def _paint(rows: dict, size: tuple[int, int], loggers: list[Logger], epoch: int) -> None:
    """Draw the panels of ``rows`` (``swwae.images.panel_rows``) and log each to ``loggers`` at ``epoch``."""
    for name, figure in card_panels(rows, size).items():
        picture = Picture(figure)
        for logger in loggers:
            log_image(logger, name, picture, step=epoch)


class SaveRunConfig(L.Callback):
    """Store the resolved run config, and the run's identity (``swwae.training.runs``), in every
    checkpoint, so that the scripts can rebuild the data and the model from the checkpoint alone
    and a later run can tell whether the checkpoint is its own; and the trackers' runs
    (``tracker_runs``), which the run, resumed, goes on logging into."""

    def __init__(self, stored: dict, identity: dict | None = None):
        self.stored, self.identity = stored, identity  # data to store, as the job resolved it once

    def on_save_checkpoint(self, trainer, module, checkpoint: dict) -> None:
        checkpoint["swwae_config"] = self.stored
        if self.identity is not None:
            checkpoint[IDENTITY_KEY] = self.identity
        if runs := tracker_runs(trainer.loggers):
            checkpoint[TRACKER_RUNS_KEY] = runs


class LogRunConfig(L.Callback):
    """Hand the run config (``run_params``) to every logger when training
    starts (``log_config``: MLflow params, W&B config, hparams.yaml of CSV and
    TensorBoard; TensorBoard's hparams table comes at the end, with the final metrics)."""

    def __init__(self, params: dict):
        self.params = params

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                log_config(logger, self.params)


class RunClock(L.Callback):
    """A run's training time over all its processes: every checkpoint carries the seconds so far
    (the whole run's, and the current epoch's), so that a run continued after a pre-emption
    reports epoch times and ``train_time_s`` for the run, not for its last process."""

    def __init__(self):
        self.started = self.epoch_started = time.perf_counter()  # this process's share
        self.before = self.epoch_before = 0.0  # earlier processes' shares
        self.saved_in_epoch: int | None = None  # the epoch a restored save was made in
        self.restored: dict | None = None  # a checkpoint's state, until training starts from it
        self.trainer: L.Trainer | None = None

    @staticmethod
    def of(trainer: L.Trainer) -> RunClock | None:
        return next((c for c in trainer.callbacks if isinstance(c, RunClock)), None)

    def setup(self, trainer: L.Trainer, module: L.LightningModule, stage: str) -> None:
        self.trainer = trainer

    def seconds(self) -> float:
        return self.before + time.perf_counter() - self.started

    def epoch_seconds(self) -> float:
        return self.epoch_before + time.perf_counter() - self.epoch_started

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.epoch_started = time.perf_counter()
        if trainer.current_epoch != self.saved_in_epoch:  # a new epoch, not the one a save was made in
            self.epoch_before = 0.0
        self.saved_in_epoch = None

    def state_dict(self) -> dict:
        epoch = self.trainer.current_epoch if self.trainer is not None else None
        return {"seconds": self.seconds(), "epoch": epoch, "epoch_seconds": self.epoch_seconds()}

    def load_state_dict(self, state: dict) -> None:
        self.restored = state  # taken by training only: a test of the best checkpoint restores it too

    def on_train_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        state, self.restored = self.restored, None
        if state:
            self.before = float(state.get("seconds", 0.0))
            self.epoch_before = float(state.get("epoch_seconds", 0.0))
            self.saved_in_epoch = state.get("epoch")


class BatchSeed(L.Callback):
    """Reseed torch, numpy and ``random`` before every training batch from (seed, epoch,
    batch, rank), so that dropout and anything else drawing from the global random
    generators depends on where training is, not on the history of the process.

    Why not save the generator states in the checkpoint, or reseed once an epoch:
    ``last.ckpt`` is written at the end of validation, and between that save and the next
    training batch Lightning draws from the global torch generator a different number of
    times in a resumed run than in an uninterrupted one (a sanity-check pass; each
    DataLoader iterator seeds itself from it, and a resumed run creates its first training
    iterator before ``on_train_epoch_start``, an uninterrupted one after). Reseeding right
    before each batch makes a resumed run bit-identical to one that never stopped (with
    ``trainer.deterministic=true``). The data order needs nothing: the sampler is a pure
    function of (seed, epoch) (``swwae.training.data.batching``).
    """

    def __init__(self, seed: int):
        self.seed = int(seed)

    def on_train_batch_start(self, trainer: L.Trainer, module: L.LightningModule, batch, batch_idx: int) -> None:
        key = [self.seed, trainer.current_epoch, batch_idx, trainer.global_rank]
        torch_seed, numpy_seed = (int(s) for s in np.random.SeedSequence(key).generate_state(2))
        # not torch.manual_seed: it visits every backend (~0.2 ms); this is ~0.05 ms a batch
        torch.default_generator.manual_seed(torch_seed)
        if module.device.type == "cuda":
            with torch.cuda.device(module.device):
                torch.cuda.manual_seed(torch_seed)
        elif module.device.type != "cpu":
            torch.manual_seed(torch_seed)
        np.random.seed(numpy_seed)
        random.seed(numpy_seed)


# Lightning's callbacks that only write to loggers, and refuse to start without one
FOR_LOGGERS_ONLY = (LearningRateMonitor, DeviceStatsMonitor)


def for_the_loggers(callbacks: list[L.Callback], loggers: list) -> list[L.Callback]:
    """``callbacks``, less those that only write to loggers where there is none (``~logger``)."""
    return callbacks if loggers else [cb for cb in callbacks if not isinstance(cb, FOR_LOGGERS_ONLY)]


# the hooks Lightning calls on every callback at every batch (and step of the optimiser)
BATCH_HOOKS = (
    *(f"on_{stage}_batch_{when}" for stage in ("train", "validation", "test", "predict") for when in ("start", "end")),
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_before_zero_grad",
)


def skip_empty_hooks(callbacks: list[L.Callback]) -> None:
    """Set to None, on each callback, the per-batch hooks that are still ``Callback``'s own
    (which do nothing), so that Lightning skips them: it calls a callback's hook only where the
    attribute is callable. Otherwise it calls each of a run's dozen callbacks at each of these
    hooks, with a profiler record and the callback's ``state_key`` each time: about 0.1 ms of
    host time a training step, which a GPU waits for. A hook a class defines, or an instance
    (Lightning's ``LambdaCallback``), stays."""
    for callback in callbacks:
        for hook in BATCH_HOOKS:
            if not is_overridden(hook, callback, L.Callback):
                setattr(callback, hook, None)


def progress_bar(**settings) -> ProgressBar:
    """A live tqdm bar when stdout is a terminal; otherwise (nohup, SLURM, CI logs) one line
    per epoch, instead of thousands of carriage-return updates. Its settings:
    ``swwae.training.callback_settings.ProgressBarSettings``."""
    refresh_rate = parse_callback("progress_bar", settings).refresh_rate
    if refresh_rate > 0 and sys.stdout.isatty():
        return LiveBar(refresh_rate=refresh_rate)
    return EpochLines()


class ShowsTrainLoss:
    """Progress-bar metrics plus ``train/loss`` (the bar's ``shown_loss``: the last logged step's,
    or the epoch's), read when a bar shows it. The module logs it without ``prog_bar=True``: with
    it, Lightning would read the loss back from the device at once, a host sync."""

    shown_loss = "train/loss_epoch"

    def get_metrics(self, trainer: L.Trainer, module: L.LightningModule) -> dict:
        metrics = super().get_metrics(trainer, module)
        loss = trainer.callback_metrics.get(self.shown_loss)
        if loss is not None:
            metrics["train/loss"] = loss.item()
        return metrics


class LiveBar(ShowsTrainLoss, TQDMProgressBar):
    """Lightning's tqdm bar, with the training loss of the last step the loggers wrote."""

    shown_loss = "train/loss_step"


class EpochLines(ShowsTrainLoss, ProgressBar):
    """Progress as one line per training epoch, with the epoch's progress-bar metrics::

    epoch 3/20: train/loss=0.0231 val/recon_mse=0.0052 val/acc=0.9640 (4.4 s)
    """

    def __init__(self):
        super().__init__()
        self._enabled, self._started = True, time.perf_counter()
        self._validated = False  # in this epoch: else its line shows no val/ metric (they are an earlier epoch's)

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._started, self._validated = time.perf_counter(), False

    def on_validation_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._validated = self._validated or not trainer.sanity_checking

    def epoch_seconds(self, trainer: L.Trainer) -> float:
        """The epoch's time, its earlier processes' share included (``RunClock``, in a job)."""
        clock = RunClock.of(trainer)
        return clock.epoch_seconds() if clock is not None else time.perf_counter() - self._started

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        # an epoch cut short (max_time): its training means, which the module logs in its own hook,
        # after the callbacks', logged now (in every process) so that its line shows them, not the last epoch's
        getattr(module, "log_epoch_means", lambda: None)()
        if not self._enabled or not trainer.is_global_zero:
            return
        shown = {
            name.removesuffix("_epoch"): value
            for name, value in self.get_metrics(trainer, module).items()
            if name != "v_num" and not name.endswith("_step") and (self._validated or not name.startswith("val/"))
        }
        values = " ".join(
            f"{name}={value:.4f}" if isinstance(value, float) else f"{name}={value}"
            for name, value in sorted(shown.items(), key=lambda item: not item[0].startswith("train"))
        )
        print(
            f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}: {values} ({self.epoch_seconds(trainer):.1f} s)",
            flush=True,
        )
