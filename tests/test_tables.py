"""What users add is a class, the one line that registers it, and a config (docs/architecture.md
"How to add"): a pooling mode with a setting of its own (``swwae.pooling.modes``), a data set
(``swwae.datasets``) and a loss term (``swwae.loss_terms``), each made here, in this file alone,
then trained, saved and loaded. Each registration is undone after its test."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
import yaml
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf
from pydantic import Field

import swwae
import swwae.pooling
from helpers.config import compose_config
from swwae.datasets import DATA_SETS, DataSet
from swwae.errors import ConfigError
from swwae.loss_terms import TERMS, LossTerm
from swwae.pooling import POOLS, Pool, make_pool
from swwae.pooling.modes import POOL_MODES, PoolMode, Setting
from swwae.settings import DataSettings, model_settings
from swwae.training.data.base import InMemoryDataModule, Splits
from swwae.training.run import train
from swwae.training.spec import check_config

# a pooling mode with a setting of its own


class ToyPool(Pool):
    """A mode the package does not ship: the mean of each window, times ``gain``."""

    def __init__(self, kernel_size=2, stride=None, padding=0, gain: float = 2.0):
        super().__init__(kernel_size, stride, padding)
        self.gain = gain

    def pool(self, x: torch.Tensor):
        g = self.geometry
        return self.gain * F.avg_pool2d(x, g.kernel, g.stride, g.padding), None


TOY_MODE = PoolMode(
    "toy", ToyPool, "no where: the tests' toy pooling (gain {gain:g})", settings={"gain": Setting(2.0, "gain", gt=0)}
)

# a data set


class ToySettings(DataSettings):
    val_size: int = Field(16, description="validation images")
    test_size: int = Field(16, description="test images")


class ToyDataModule(InMemoryDataModule):
    """A data set the package does not ship: 96 random 8x8 images of two classes, in memory."""

    def load(self) -> Splits:
        seeded = torch.Generator().manual_seed(self.split_seed)
        x = torch.randint(0, 256, (96, *self.image_shape), dtype=torch.uint8, generator=seeded)
        y = torch.arange(96) % self.num_classes
        val, test, train_ = self._split_seeded(x, y, {"val_size": self.val_size, "test_size": self.test_size})
        return Splits(*train_, *val, *test)


TOY_DATA = DataSet("toy", ToyDataModule, (1, 8, 8), 2, settings=ToySettings, title="the tests' toy images")

# a loss term


def total_variation(out, x, y, middle_targets=None) -> dict[str, torch.Tensor]:
    image = out.recon
    return {
        "tv": (image[..., 1:, :] - image[..., :-1, :]).abs().mean() + (image[..., 1:] - image[..., :-1]).abs().mean()
    }


TOY_TERM = LossTerm("lambda_tv", 0.0, "tv", "reconstruction", "total variation of the image", total_variation)


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


def test_a_registered_mode_and_its_setting_show_everywhere_and_go_again():
    with POOL_MODES.registered(TOY_MODE):
        assert "toy" in swwae.pooling.MODES and POOLS["toy"] is ToyPool and "gain" in model_settings().model_fields
        pool = make_pool("toy", channels=3, kernel_size=2, gain=3.0, beta=1.0)  # takes what it names
        assert type(pool) is ToyPool and pool.gain == 3.0
        with pytest.raises(ValueError, match="already registered"):
            POOL_MODES.register(PoolMode("toy", ToyPool, "again"))
    assert "toy" not in swwae.pooling.MODES and "toy" not in POOLS and "gain" not in model_settings().model_fields


def test_a_registered_data_set_shows_in_the_registry_and_goes_again():
    from swwae.training.registry import DATASETS, data_spec

    with DATA_SETS.registered(TOY_DATA) as entry:
        assert entry.target == f"{__name__}.ToyDataModule"
        assert data_spec(entry.target) is entry and DATASETS["ToyDataModule"].load() is ToyDataModule
    assert "ToyDataModule" not in DATASETS and "toy" not in DATA_SETS


class Poolless(Pool):
    """A lab's class that forgot ``pool``."""


@pytest.mark.parametrize(
    ("cls", "line"),
    [
        (Poolless, "Poolless defines no pool(x), which returns (what, where): a Pool subclass implements it"),
        (torch.nn.MaxPool2d, "'MaxPool2d' is no Pool subclass (swwae.pooling.Pool)"),
    ],
    ids=["no-pool", "no-Pool"],
)
def test_a_registered_class_that_cannot_pool_is_one_line_before_a_network_is_built(cls, line):
    """Not Pool's bare NotImplementedError from the model's first batch."""
    with POOL_MODES.registered(PoolMode("broken", cls, "x")), pytest.raises(TypeError, match=re.escape(line)):
        make_pool("broken", channels=3)


def shadow(name: str) -> PoolMode:
    """A mode whose one setting is called ``name``."""
    return PoolMode("shadow", ToyPool, "x", settings={name: Setting(1.0, "x")})


def weighing(weight: str) -> LossTerm:
    return LossTerm(weight, 0.0, "tv", "reconstruction", "x", total_variation)


MODE = "pooling mode 'shadow': its setting"


@pytest.mark.parametrize(
    ("table", "entry", "line"),
    [
        (POOL_MODES, shadow("lr"), f"{MODE} lr is already model.lr (Adam's learning rate)"),
        (POOL_MODES, shadow("beta"), f"{MODE} beta is already model.beta (the setting of pooling mode soft)"),
        (POOL_MODES, shadow("lambda_m"), f"{MODE} lambda_m is already model.lambda_m (a loss term's weight)"),
        (TERMS, weighing("dropout"), "loss term 'dropout': its weight dropout is already model.dropout"),
        (TERMS, weighing("beta"), "loss term 'beta': its weight beta is already model.beta (the setting of"),
    ],
    ids=["mode-lr", "mode-other-mode", "mode-weight", "term-dropout", "term-mode-setting"],
)  # fmt: skip
def test_a_registered_setting_named_as_one_the_model_has_is_refused(table, entry, line):
    """It would replace that setting (its type, default and bounds) in every run, silently."""
    with table.registered(entry), pytest.raises(ConfigError, match=f"^{re.escape(line)}.*: give it a name of its own$"):
        model_settings()
    shared = PoolMode("shared", ToyPool, "x", settings={"beta": POOL_MODES["soft"].settings["beta"]})
    with POOL_MODES.registered(shared):
        assert "beta" in model_settings().model_fields  # declared as the mode soft does: one setting


def test_a_registered_term_on_by_default_is_refused():
    """Loading its plugin would change what every run trains, and a run stored before it would
    count as trained with it (a setting a run predates counts as its default)."""
    on = LossTerm("lambda_tv", 0.5, "tv", "reconstruction", "x", total_variation)
    line = "loss term 'lambda_tv': its default weight is 0.5, not 0: a term of one's own is off unless a run weighs it"
    with TERMS.registered(on), pytest.raises(ConfigError, match=f"^{re.escape(line)}"):
        model_settings()
    with TERMS.registered(TOY_TERM):
        assert "lambda_tv" in model_settings().model_fields


def test_a_network_of_a_mode_not_registered_here_says_to_load_its_plugin(tmp_path):
    """A run of a lab's own mode read without its plugin: not 'not written by swwae' (its mode's
    settings unknown) nor an unknown model.pool_mode, but which mode, and what to load."""
    from swwae.checkpoint_file import network_of
    from swwae.errors import CheckpointError
    from swwae.model import SWWAE

    with POOL_MODES.registered(TOY_MODE):
        swwae.save_pretrained(
            SWWAE.from_settings({"widths": [4], "pool_mode": "toy", "gain": 3.0}, (1, 8, 8), 2), tmp_path / "m"
        )
    line = "was trained with the pooling mode 'toy', which is not registered here (hard, soft, "
    with pytest.raises(CheckpointError, match=f"^model folder {tmp_path / 'm'} {re.escape(line)}.*SWWAE_PLUGINS"):
        swwae.load(tmp_path / "m")
    checkpoint = {"hyper_parameters": {"widths": [4], "pool_mode": "toy", "gain": 3.0}, "state_dict": {}}
    with pytest.raises(CheckpointError, match=f"^checkpoint x.ckpt {re.escape(line)}"):
        network_of(checkpoint, "x.ckpt")


# each, set from the command line, checked before the run, trained, saved and loaded


def test_a_modes_own_setting_is_set_and_checked_on_the_command_line(tmp_path):
    with POOL_MODES.registered(TOY_MODE):
        spec = check_config(compose_config(tmp_path, ["model.pool_mode=toy", "model.gain=3"]))
        assert spec.model.gain == 3
        with pytest.raises(ConfigError, match="^model.gain=-1 is not allowed: must be > 0$"):
            check_config(compose_config(tmp_path, ["model.pool_mode=toy", "model.gain=-1"]))


@pytest.mark.slow
def test_a_pooling_mode_with_its_own_setting_trains_saves_and_loads(tmp_path):
    with POOL_MODES.registered(TOY_MODE):
        best = trained(tmp_path, ["model.pool_mode=toy", "model.gain=3"])
        net, metadata, body = saved_and_loaded(best, tmp_path / "m")
        assert all(type(pool) is ToyPool and pool.gain == 3 for pool in net.pools) and net.pool_mode == "toy"
        assert "Pooling: no where: the tests' toy pooling (gain 3)." in body
        assert "without a where" in body and metadata["datasets"] == ["mnist"]


def config_dir(tmp_path: Path) -> Path:
    """A lab's own config folder holding the toy data set's config."""
    folder = tmp_path / "my_configs"
    (folder / "data").mkdir(parents=True)
    (folder / "data" / "toy.yaml").write_text("defaults:\n  - /settings/data@_here_: toy\n")
    return folder


def test_the_config_of_a_registered_data_set_composes_without_hydras_schema_warning(tmp_path):
    """The config architecture.md asks for (``data/<name>.yaml``) meets the node stored for the
    set under the same name: the file wins, and Hydra's four-line deprecation warning is not shown."""
    with DATA_SETS.registered(TOY_DATA), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = compose_config(tmp_path, [f"hydra.searchpath=[file://{config_dir(tmp_path)}]", "data=toy"])
    assert cfg.data.val_size == 16 and cfg.data._target_.endswith("ToyDataModule")
    assert not [w for w in caught if "ConfigStore schema" in str(w.message)]


@pytest.mark.slow
def test_a_data_set_trains_saves_and_loads(tmp_path):
    with DATA_SETS.registered(TOY_DATA):
        best = trained(tmp_path, [f"hydra.searchpath=[file://{config_dir(tmp_path)}]", "data=toy", "data.val_size=20"])
        net, metadata, body = saved_and_loaded(best, tmp_path / "m")
        assert net.image_shape == (1, 8, 8) and net.classifier[-1].out_features == 2
        assert net.config["data"]["val_size"] == 20
        assert "## Training data\n\nthe tests' toy images." in body and "datasets" not in metadata  # not on the Hub


def test_a_registered_data_set_is_checked_against_the_network_before_the_run(tmp_path):
    """Its table entry's image shape meets the network in the run's checks (as a shipped
    data set's does): four 2x2 pools leave 1x1 maps of 8x8 images."""
    with DATA_SETS.registered(TOY_DATA):
        overrides = [f"hydra.searchpath=[file://{config_dir(tmp_path)}]", "data=toy", "model.widths=[4,4,4,4]"]
        with pytest.raises(ConfigError, match="^model stage 4 of 4: its 3x3 conv kernel is larger than the 1x1 maps"):
            check_config(compose_config(tmp_path, overrides))


@pytest.mark.slow
def test_a_loss_term_is_weighed_from_the_command_line_and_trains(tmp_path):
    from swwae.training.module import SWWAEModule

    with TERMS.registered(TOY_TERM):
        cfg = compose_config(tmp_path, ["model.widths=[4]", "model.lambda_tv=0.5"])
        settings = {k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "_target_"}
        module = SWWAEModule(**settings)
        x, y = torch.rand(4, 1, 28, 28), torch.zeros(4, dtype=torch.long)
        terms = module.losses(module(x), x, y)
        assert "tv" in terms and torch.allclose(
            terms["loss"] - 0.5 * terms["tv"],
            SWWAEModule(**settings | {"lambda_tv": 0.0}).losses(module(x), x, y)["loss"],
        )
        best = trained(tmp_path, ["model.lambda_tv=0.5"])
        assert torch.load(best, weights_only=True)["hyper_parameters"]["lambda_tv"] == 0.5
