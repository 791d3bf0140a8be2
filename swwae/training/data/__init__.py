"""LightningDataModules: the bundled MNIST sample, MNIST, CIFAR-10/100, SVHN, STL-10, a folder of images.

Every dataset lives in memory as uint8 and is served as whole batches, float per batch
(``base``, ``batching``); splits and label subsets are seeded (``splits``); augmentation runs
on whole batches on the training device (``augment``). Configs name these classes as
``swwae.training.data.<Class>`` (``configs/data/``).
"""

from swwae.training.data.base import InMemoryDataModule, Splits
from swwae.training.data.image_folder import ImageFolderDataModule
from swwae.training.data.sample import MNISTSampleDataModule
from swwae.training.data.stl10 import STL10DataModule
from swwae.training.data.torchvision_sets import (
    CIFAR10DataModule,
    CIFAR100DataModule,
    MNISTDataModule,
    SVHNDataModule,
    TorchvisionDataModule,
)

__all__ = [
    "CIFAR10DataModule",
    "CIFAR100DataModule",
    "ImageFolderDataModule",
    "InMemoryDataModule",
    "MNISTDataModule",
    "MNISTSampleDataModule",
    "STL10DataModule",
    "SVHNDataModule",
    "Splits",
    "TorchvisionDataModule",
]
