"""What users add is one entry of one table (docs/architecture.md): a pooling mode
(``swwae.pooling.modes``) and a data set (``swwae.datasets``), each defined here as a toy and
registered in one line, train a quick run, become a model folder with its card and load back.
Each registration is undone after its test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from hydra.core.global_hydra import GlobalHydra

import swwae
import swwae.pooling
from helpers.config import compose_config
from swwae.datasets import DATA_SETS, DataSet
from swwae.errors import ConfigError
from swwae.pooling import POOLS, Pool, make_pool  # MODES: read as swwae.pooling.MODES, the table now
from swwae.pooling.modes import POOL_MODES, PoolMode
from swwae.training.data.base import InMemoryDataModule, Splits
from swwae.training.run import train


class ToyPool(Pool):
    """A mode the package does not ship: the mean of each window, doubled."""

    def pool(self, x: torch.Tensor):
        g = self.geometry
        return 2 * F.avg_pool2d(x, g.kernel, g.stride, g.padding), None


class ToyDataModule(InMemoryDataModule):
    """A data set the package does not ship: 96 random 8x8 images of two classes, in memory."""

    name = "toy"
    image_shape = (1, 8, 8)
    num_classes = 2

    def __init__(self, val_size: int = 16, test_size: int = 16, **common):
        super().__init__(**common)
        self.val_size, self.test_size = val_size, test_size

    def load(self) -> Splits:
        seeded = torch.Generator().manual_seed(self.split_seed)
        x = torch.randint(0, 256, (96, *self.image_shape), dtype=torch.uint8, generator=seeded)
        y = torch.arange(96) % self.num_classes
        val, test, train_ = self._split_seeded(x, y, {"val_size": self.val_size, "test_size": self.test_size})
        return Splits(*train_, *val, *test)


@pytest.fixture
def toy_mode():
    with POOL_MODES.registered(PoolMode("toy", ToyPool, "no where: the tests' toy pooling, nearest upsampling")):
        yield


@pytest.fixture
def toy_data():
    with DATA_SETS.registered(DataSet.of(ToyDataModule, title="the tests' toy images")):
        yield


def trained(tmp_path: Path, overrides: list[str]) -> Path:
    """best.ckpt of a quick run."""
    train(compose_config(tmp_path, ["model.widths=[4]", *overrides]))
    GlobalHydra.instance().clear()
    [best] = (tmp_path / "checkpoints").rglob("best.ckpt")
    return best


def saved_and_loaded(best: Path, folder: Path):
    """The run's network, saved as a model folder with its card, and loaded back: (network,
    card metadata, card body)."""
    net = swwae.load(best)
    swwae.save_pretrained(net, folder)
    _, block, body = (folder / "README.md").read_text().split("---\n", 2)
    again = swwae.load(folder)
    x = torch.rand(2, *net.image_shape)
    assert torch.equal(again(x).recon, net(x).recon) and again.settings == net.settings
    return again, yaml.safe_load(block), body


# a registration is one line, and undone


def test_a_registered_mode_shows_everywhere_and_goes_again():
    with POOL_MODES.registered(PoolMode("toy", ToyPool, "no where: toy")):
        assert "toy" in swwae.pooling.MODES and POOLS["toy"] is ToyPool and "toy" in swwae.settings.POOL_MODES
        pool = make_pool("toy", channels=3, kernel_size=2, beta=1.0, wavelet="db2")  # takes what it names
        assert type(pool) is ToyPool
        with pytest.raises(ValueError, match="already registered"):
            POOL_MODES.register(PoolMode("toy", ToyPool, "again"))
    assert "toy" not in swwae.pooling.MODES and "toy" not in POOLS
    with pytest.raises(ConfigError, match="^model.pool_mode='toy' is unknown"):
        swwae.settings.check_network(3, "toy", 100.0, "relu", 0.0, (1, 28, 28))


def test_a_registered_data_set_shows_in_the_registry_and_goes_again():
    from swwae.training.registry import DATASETS, data_spec

    with DATA_SETS.registered(DataSet.of(ToyDataModule)) as entry:
        assert entry.image_shape == (1, 8, 8) and entry.target == f"{__name__}.ToyDataModule"
        assert data_spec(entry.target) is entry and DATASETS["ToyDataModule"].load() is ToyDataModule
    assert "ToyDataModule" not in DATASETS and "toy" not in DATA_SETS


# a toy of each, trained, saved and loaded


@pytest.mark.slow
def test_a_pooling_mode_added_in_one_line_trains_saves_and_loads(toy_mode, tmp_path):
    best = trained(tmp_path, ["model.pool_mode=toy"])
    net, metadata, body = saved_and_loaded(best, tmp_path / "m")
    assert all(type(pool) is ToyPool for pool in net.pools) and net.pool_mode == "toy"
    assert "Pooling: no where: the tests' toy pooling, nearest upsampling." in body
    assert "without a where" in body and metadata["datasets"] == ["mnist"]


@pytest.mark.slow
def test_a_data_set_added_in_one_line_trains_saves_and_loads(toy_data, tmp_path):
    best = trained(tmp_path, [f"data._target_={__name__}.ToyDataModule", "data.val_size=16", "data.test_size=16"])
    net, metadata, body = saved_and_loaded(best, tmp_path / "m")
    assert net.image_shape == (1, 8, 8) and net.classifier[-1].out_features == 2
    assert "## Training data\n\nthe tests' toy images." in body and "datasets" not in metadata  # not on the Hub


def test_a_registered_data_set_is_checked_against_the_network_before_the_run(toy_data, tmp_path):
    """Its table entry's image shape meets the network in the run's checks (as a shipped
    data set's does): four 2x2 pools leave 1x1 maps of 8x8 images."""
    from swwae.training.spec import check_config

    target = f"data._target_={__name__}.ToyDataModule"
    with pytest.raises(ConfigError, match="^model stage 4 of 4: its 3x3 conv kernel is larger than the 1x1 maps"):
        check_config(compose_config(tmp_path, [target, "model.widths=[4,4,4,4]", "data.val_size=16"]))
