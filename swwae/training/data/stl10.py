"""STL-10: 5,000 labelled training images in 10 predefined folds of 1,000, 100,000 unlabelled
images, 8,000 test images, 96x96 colour (torchvision's binary files under
``<root>/stl10_binary``).

The unlabelled images train the reconstruction terms only: they join the training split
with the label -1, so every batch holds ``labelled_per_batch`` labelled images and
unlabelled ones for the rest. They are read in chunks straight into their place in the
training tensor, as uint8: 2.8 GB, where torchvision's reader would hold a second copy
while we gather them (and float32 would take 11 GB).
"""

from __future__ import annotations

import os

import numpy as np
import torch
from torch import Tensor

from swwae.training.data.base import Splits
from swwae.training.data.batching import UNLABELLED
from swwae.training.data.torchvision_sets import TorchvisionDataModule

IMAGE_BYTES = 3 * 96 * 96


def read_stl10_images(path: str, out: Tensor, chunk: int = 4096) -> Tensor:
    """STL-10's binary image format (uint8, each image 3 x 96 x 96 column-major) read into
    ``out`` (N, 3, 96, 96), ``chunk`` images at a time."""
    size = os.path.getsize(path)
    if size != len(out) * IMAGE_BYTES:
        raise ValueError(f"{os.path.basename(path)} holds {size} bytes, not {len(out)} images of {IMAGE_BYTES}")
    with open(path, "rb") as f:
        for start in range(0, len(out), chunk):
            count = min(chunk, len(out) - start)
            raw = np.fromfile(f, dtype=np.uint8, count=count * IMAGE_BYTES)
            if len(raw) != count * IMAGE_BYTES:
                raise EOFError(f"{os.path.basename(path)} ends after {start} images")
            out[start : start + count] = torch.from_numpy(raw.reshape(count, 3, 96, 96).transpose(0, 1, 3, 2))
    return out


class STL10DataModule(TorchvisionDataModule):
    """STL-10 for semi-supervised training. ``fold`` (0-9) keeps the 1,000 labelled training
    images of that predefined fold (the paper's protocol; null: all 5,000); ``val_size`` of
    them are held out, stratified, for validation. ``unlabelled`` adds the 100,000 unlabelled
    images to training."""

    def _open(self, part: str):
        from torchvision.datasets import STL10

        return STL10(self.root, split=part, folds=self.fold if part == "train" else None, download=self.download)

    def _folder(self) -> str:
        return os.path.join(self.root, "stl10_binary")

    def _files(self) -> list[str]:
        from torchvision.datasets import STL10

        return [name for name, _ in STL10.train_list + STL10.test_list] + [STL10.folds_list_file]

    def _archives(self) -> list[str]:
        from torchvision.datasets import STL10

        return [os.path.join(self.root, STL10.filename)]

    def load(self) -> Splits:
        splits = super().load()
        if not self.unlabelled:
            return splits
        with self._reading():
            path = os.path.join(self._folder(), "unlabeled_X.bin")
            count = os.path.getsize(path) // IMAGE_BYTES
            labelled = len(splits.train_x)
            train_x = torch.empty(labelled + count, *self.image_shape, dtype=torch.uint8)
            train_x[:labelled] = splits.train_x
            read_stl10_images(path, train_x[labelled:])
        train_y = torch.cat([splits.train_y, torch.full((count,), UNLABELLED, dtype=torch.long)])
        return splits._replace(train_x=train_x, train_y=train_y)
