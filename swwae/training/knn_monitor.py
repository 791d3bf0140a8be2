"""``val/knn_acc``: a k-NN probe of the top what during training, as self-supervised
libraries log it (off by default: ``callbacks.knn_accuracy.every_n_epochs=5`` turns it on).

It says how good the frozen features are for classes the loss may never have seen (a pure
auto-encoder has no labels at all) without training a classifier: each validation image
takes the distance-weighted vote of its k cosine-nearest labelled training images
(``swwae.probe.knn_probe``).
"""

from __future__ import annotations

import lightning as L
import torch

from swwae.errors import ConfigError
from swwae.probe import features, knn_probe


class KNNAccuracy(L.Callback):
    """Every ``every_n_epochs`` (0: never), after validation, log ``val/knn_acc``: the k-NN
    accuracy (cosine, ``k``, distance-weighted) of the validation images against the first
    ``max_train_images`` labelled training images, on the top what in eval mode."""

    def __init__(self, every_n_epochs: int = 0, k: int = 20, max_train_images: int = 10_000):
        if every_n_epochs < 0 or k < 1 or max_train_images < 1:
            raise ConfigError("callbacks.knn_accuracy: every_n_epochs must be >= 0, k and max_train_images >= 1")
        self.every_n_epochs, self.k, self.max_train_images = every_n_epochs, k, max_train_images

    def due(self, trainer: L.Trainer) -> bool:
        return (
            bool(self.every_n_epochs)
            and not trainer.sanity_checking
            and (trainer.current_epoch + 1) % self.every_n_epochs == 0
        )

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if not self.due(trainer):
            return
        data = trainer.datamodule
        labelled = torch.nonzero(data.train_y >= 0).flatten()[: self.max_train_images]
        if len(labelled) == 0:  # no training label to vote with
            return
        train = features(module.net, data.train_x[labelled])
        val = features(module.net, data.val_x)
        acc = knn_probe(train, data.train_y[labelled], val, data.val_y, k=self.k)
        module.log("val/knn_acc", acc, prog_bar=False)
