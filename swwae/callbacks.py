"""Lightning callbacks: reconstruction images in TensorBoard, the run config in checkpoints."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger

from swwae.images import reconstruction_panels


class ReconstructionImages(L.Callback):
    """Every ``every_n_epochs``, on the same first ``num_images`` validation images, log the
    panels of ``swwae.images.reconstruction_panels`` to every TensorBoard logger."""

    def __init__(self, num_images: int = 8, every_n_epochs: int = 1):
        self.num_images, self.every_n_epochs = num_images, every_n_epochs
        self._images = None

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.sanity_checking or trainer.current_epoch % self.every_n_epochs:
            return
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        if not loggers or not trainer.is_global_zero:
            return
        if self._images is None:  # fixed once: the same digits every epoch
            self._images = trainer.datamodule.val_x[: self.num_images]
        panels = reconstruction_panels(module.net, self._images.to(module.device))
        for logger in loggers:
            for name, image in panels.items():
                logger.experiment.add_image(name, image, global_step=trainer.current_epoch)


class SaveRunConfig(L.Callback):
    """Store the resolved run config in every checkpoint, so that evaluation and projection
    scripts can rebuild the data and the model from the checkpoint alone."""

    def __init__(self, config: dict):
        self.config = config

    def on_save_checkpoint(self, trainer, module, checkpoint: dict) -> None:
        checkpoint["swwae_config"] = self.config
