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
from lightning.pytorch.trainer.states import TrainerFn

from swwae.training.callback_settings import KNN_METRIC, parse_callback


class KNNAccuracy(L.Callback):
    """Every ``every_n_epochs`` (0: never), after validation, log ``val/knn_acc``: the k-NN
    accuracy (cosine, ``k``, distance-weighted) of the validation images against the first
    ``max_train_images`` labelled training images, on the top what in eval mode; in a validation
    of its own (``trainer.validate``: a finished run evaluated again), always. Its settings:
    ``swwae.training.callback_settings.KNNAccuracySettings``.

    As the checkpoint monitor (``optimized_metric=val/knn_acc``) it must be measured at every
    validation: the command line's check (``callback_settings.check_knn_monitor``) asks for it."""

    def __init__(self, **settings):
        self.settings = parse_callback("knn_accuracy", settings)

    def val_metrics(self, data) -> list[str]:
        """The validation metrics it logs on ``data`` (a set-up data module): ``val/knn_acc`` when
        it is on and the data has labelled training images to vote with, else none."""
        labelled = bool((data.train_y >= 0).any()) if data.train_y is not None else False
        return [KNN_METRIC] if self.settings.every_n_epochs and labelled else []

    def due(self, trainer: L.Trainer) -> bool:
        every = self.settings.every_n_epochs
        if not every or trainer.sanity_checking:
            return False
        return trainer.state.fn == TrainerFn.VALIDATING or (trainer.current_epoch + 1) % every == 0

    def on_validation_epoch_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if not self.due(trainer):
            return
        data = trainer.datamodule
        labelled = torch.nonzero(data.train_y >= 0).flatten()[: self.settings.max_train_images]
        if len(labelled) == 0:  # no training label to vote with
            return
        # here, not at the top: swwae.probe imports scikit-learn, about 0.3 s at the start of every run
        # whose callbacks are built, the many that leave this monitor off
        from swwae.probe import features, knn_probe

        acc = None
        if trainer.is_global_zero:  # under DDP one process probes (each has the whole split) and tells the others
            train = features(module.net, data.train_x[labelled])
            val = features(module.net, data.val_x)
            acc = float(knn_probe(train, data.train_y[labelled], val, data.val_y, k=self.settings.k))
        acc = trainer.strategy.broadcast(acc, src=0)
        # the same value in every process: synced as their max, which is it (unsynced, Lightning warns)
        module.log(KNN_METRIC, acc, prog_bar=False, sync_dist=True, reduce_fx="max")
