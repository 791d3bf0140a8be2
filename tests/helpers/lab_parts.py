"""A lab's own parts, as a plugin module would hold them (``SWWAE_PLUGINS=lab_parts`` or a
``swwae.plugins`` entry point): a pooling mode with a setting of its own, a data set and a loss
term, each a class or function and one registering line. tests/test_plugins.py copies this file
into a folder of its own."""

import torch
import torch.nn.functional as F
from pydantic import Field

from swwae.datasets import DATA_SETS, DataSet
from swwae.loss_terms import TERMS, LossTerm
from swwae.pooling import Pool
from swwae.pooling.modes import POOL_MODES, PoolMode, Setting
from swwae.settings import DataSettings
from swwae.training.data.base import InMemoryDataModule, Splits


class GainPool(Pool):
    """The mean of each window, times ``gain``; no where."""

    def __init__(self, kernel_size=2, stride=None, padding=0, gain: float = 2.0):
        super().__init__(kernel_size, stride, padding)
        self.gain = gain

    def pool(self, x):
        g = self.geometry
        return self.gain * F.avg_pool2d(x, g.kernel, g.stride, g.padding), None


class LabSettings(DataSettings):
    val_size: int = Field(16, description="validation images")
    test_size: int = Field(16, description="test images")


class LabImages(InMemoryDataModule):
    """96 random 8x8 images of two classes."""

    def load(self) -> Splits:
        seeded = torch.Generator().manual_seed(self.split_seed)
        x = torch.randint(0, 256, (96, *self.image_shape), dtype=torch.uint8, generator=seeded)
        y = torch.arange(96) % self.num_classes
        val, test, train = self._split_seeded(x, y, {"val_size": self.val_size, "test_size": self.test_size})
        return Splits(*train, *val, *test)


def roughness(out, x, y, middle_targets=None):
    """The mean absolute difference of neighbouring pixels of the reconstruction."""
    image = out.recon
    rows, columns = image[..., 1:, :] - image[..., :-1, :], image[..., 1:] - image[..., :-1]
    return {"rough": rows.abs().mean() + columns.abs().mean()}


POOL_MODES.register(
    PoolMode("gain", GainPool, "no where: window means times {gain:g}", settings={"gain": Setting(2.0, "gain", gt=0)})
)
DATA_SETS.register(DataSet("lab_images", LabImages, (1, 8, 8), 2, settings=LabSettings, title="the lab's images"))
TERMS.register(LossTerm("lambda_rough", 0.0, "rough", "reconstruction", "roughness of the reconstruction", roughness))
