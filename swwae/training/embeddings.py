"""The code space in TensorBoard's projector: the top what of test images, one point per
image, coloured by its label, shown as its thumbnail (``SummaryWriter.add_embedding``: the
vectors, the labels as metadata, the images as the sprite).

``Embeddings`` (``configs/callbacks/default.yaml``) writes it once, when training ends, to
the run's TensorBoard logger; ``scripts/evaluate.py --embeddings`` writes the same for a
checkpoint. TensorBoard's PROJECTOR tab shows it (PCA, t-SNE, UMAP; colour by ``label``).
"""

from __future__ import annotations

import lightning as L
import torch
from lightning.pytorch.loggers import TensorBoardLogger
from torch import Tensor

from swwae.model import SWWAE, eval_mode
from swwae.training.callback_settings import parse_callback

TAG = "top_what"

# helpers


@torch.no_grad()
def top_codes(net: SWWAE, images: Tensor, batch_size: int = 250) -> Tensor:
    """The top stage's what of every image, flattened: (N, C * h * w), in eval mode."""
    with eval_mode(net):
        return torch.cat([net.encode(x)[0][-1].flatten(1) for x in images.split(batch_size)])


def label_names(labels: Tensor, names: tuple[str, ...] = ()) -> list[str]:
    """Each label as the projector's legend shows it: its class's name where the data name their
    classes (a folder's: ``cat``, not ``0``), else its number; one line of the metadata file each."""
    shown = [names[y] if 0 <= y < len(names) else str(y) for y in map(int, labels)]
    return [" ".join(name.split()) or "?" for name in shown]  # a tab or line break would split the file's rows


def write_embedding(
    writer, net: SWWAE, images: Tensor, labels: Tensor, *, names: tuple[str, ...] = (), step: int = 0, tag: str = TAG
) -> int:
    """Hand the projector the top whats of ``images`` (floats in [0, 1], on the network's
    device), ``labels`` (named by ``names``: ``label_names``) as metadata and the images as
    thumbnails; the number of points."""
    codes = top_codes(net, images)
    metadata = label_names(labels, names)
    writer.add_embedding(codes.cpu(), metadata=metadata, label_img=images.cpu(), global_step=step, tag=tag)
    writer.flush()
    return len(codes)


# classes


class Embeddings(L.Callback):
    """With ``enabled``, when training ends, the top what of the first ``num_images`` images
    of ``split`` to the projector of every TensorBoard logger of the run (weights as
    training left them).

    Off by default: TensorBoard's ``add_embedding`` writes the vectors as text one number at
    a time, 1.4-1.6 s of CPU for the bundled sample's 500 test images and the default
    network's 3,136-number top what: a few percent of a default run, for a tab few runs open. Its settings:
    ``swwae.training.callback_settings.EmbeddingsSettings``."""

    def __init__(self, **settings):
        self.settings = parse_callback("embeddings", settings)

    def on_fit_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, TensorBoardLogger)]
        if not self.settings.enabled or not loggers or not trainer.is_global_zero:
            return
        data, split, count = trainer.datamodule, self.settings.split, self.settings.num_images
        images = data.images(split, count).to(module.device, module.dtype)
        labels = getattr(data, f"{split}_y")[:count]
        for logger in loggers:
            names = tuple(getattr(data, "class_names", ()))
            write_embedding(logger.experiment, module.net, images, labels, names=names, step=trainer.global_step)
