"""Lightning callbacks: reconstruction images for every logger that takes images (TensorBoard,
MLflow, W&B), the run config in checkpoints and in the experiment trackers,
per-batch random streams (so that a resumed run replays an uninterrupted one), and progress
output that suits where it goes (a live bar on a terminal, a line per epoch in a log file)."""

from __future__ import annotations

import random
import sys
import time

import lightning as L
import numpy as np
import torch
from lightning.pytorch.callbacks import ProgressBar, TQDMProgressBar

from swwae.images import Picture, reconstruction_panels
from swwae.training.loggers import log_config, log_image, takes_images
from swwae.training.runs.identity import IDENTITY_KEY


class ReconstructionImages(L.Callback):
    """Every ``every_n_epochs``, on the same first ``num_images`` validation images, log the
    panels of ``swwae.images.reconstruction_panels`` (labelled rows, magnified so an image
    is at least 84 pixels wide) to every logger that takes images (``swwae.training.loggers.log_image``:
    TensorBoard, MLflow, W&B; not CSV)."""

    def __init__(self, num_images: int = 8, every_n_epochs: int = 1):
        self.num_images, self.every_n_epochs = num_images, every_n_epochs
        self._images = None

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.current_epoch % self.every_n_epochs:
            return
        loggers = [lg for lg in trainer.loggers if takes_images(lg)]
        if not loggers or not trainer.is_global_zero:
            return
        if self._images is None:  # fixed once: the same digits every epoch
            self._images = trainer.datamodule.images("val", self.num_images)
        panels = {
            name: Picture(image)
            for name, image in reconstruction_panels(module.net, self._images.to(module.device)).items()
        }
        for logger in loggers:
            for name, picture in panels.items():
                log_image(logger, name, picture, step=trainer.current_epoch)


class SaveRunConfig(L.Callback):
    """Store the resolved run config, and the run's identity (``swwae.training.runs``), in every
    checkpoint, so that the scripts can rebuild the data and the model from the checkpoint alone
    and a later run can tell whether the checkpoint is its own."""

    def __init__(self, config: dict, identity: dict | None = None):
        self.config, self.identity = config, identity

    def on_save_checkpoint(self, trainer, module, checkpoint: dict) -> None:
        checkpoint["swwae_config"] = self.config
        if self.identity is not None:
            checkpoint[IDENTITY_KEY] = self.identity


class LogRunConfig(L.Callback):
    """Hand the run config (``swwae.training.loggers.run_params``) to every logger when training
    starts (``swwae.training.loggers.log_config``: MLflow params, W&B config, hparams.yaml of CSV and
    TensorBoard; TensorBoard's hparams table comes at the end, with the final metrics)."""

    def __init__(self, params: dict):
        self.params = params

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                log_config(logger, self.params)


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


def progress_bar(refresh_rate: int = 5) -> ProgressBar:
    """A live tqdm bar when stdout is a terminal; otherwise (nohup, SLURM, CI logs) one line
    per epoch, instead of thousands of carriage-return updates."""
    if refresh_rate > 0 and sys.stdout.isatty():
        return LiveBar(refresh_rate=refresh_rate)
    return EpochLines()


class ShowsTrainLoss:
    """Progress-bar metrics plus ``train/loss`` (the step's, or the epoch's at its end), read
    when a bar shows them. The module logs it without ``prog_bar=True``: with it, Lightning
    would read the step's loss back from the device after every step, a host sync."""

    def get_metrics(self, trainer: L.Trainer, module: L.LightningModule) -> dict:
        metrics = super().get_metrics(trainer, module)
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            metrics["train/loss"] = loss.item()
        return metrics


class LiveBar(ShowsTrainLoss, TQDMProgressBar):
    """Lightning's tqdm bar, with the training loss."""


class EpochLines(ShowsTrainLoss, ProgressBar):
    """Progress as one line per training epoch, with the epoch's progress-bar metrics::

    epoch 3/20: train/loss=0.0231 val/recon_mse=0.0052 val/acc=0.9640 (4.4 s)
    """

    def __init__(self):
        super().__init__()
        self._enabled, self._started = True, 0.0

    def disable(self) -> None:
        self._enabled = False

    def enable(self) -> None:
        self._enabled = True

    def on_train_epoch_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self._started = time.perf_counter()

    def on_train_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if not self._enabled or not trainer.is_global_zero:
            return
        shown = {
            name.removesuffix("_epoch"): value
            for name, value in self.get_metrics(trainer, module).items()
            if name != "v_num" and not name.endswith("_step")
        }
        values = " ".join(
            f"{name}={value:.4f}" if isinstance(value, float) else f"{name}={value}"
            for name, value in sorted(shown.items(), key=lambda item: not item[0].startswith("train"))
        )
        print(
            f"epoch {trainer.current_epoch + 1}/{trainer.max_epochs}: {values} "
            f"({time.perf_counter() - self._started:.1f} s)",
            flush=True,
        )
