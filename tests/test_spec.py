"""The typed run spec (swwae.training.spec): one schema for the command line and for every
stored config. Its sections hold the arguments their classes take, with the same defaults; every
shipped config parses; a bad value is one line naming the key; a stored config parses the same
way, its classes only ones swwae ships."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from helpers.config import CONFIG_DIR, ROOT, compose_config
from swwae.errors import CheckpointError, ConfigError
from swwae.training.registry import DATASETS, MODELS, constructor_parameters
from swwae.training.runs.folder import DERIVED_MODEL_KEYS
from swwae.training.spec import (
    AS_WRITTEN,
    DATA_SPECS,
    ModelSpec,
    OwnClass,
    TrainerSpec,
    check_config,
    parse_stored,
)

TRAINER = "lightning.pytorch.Trainer"
EXPERIMENTS = sorted(
    str(p.relative_to(CONFIG_DIR / "experiment").with_suffix("")) for p in (CONFIG_DIR / "experiment").rglob("*.yaml")
)


def fields(spec) -> dict:
    return {name: field.default for name, field in spec.model_fields.items() if name != "target"}


def arguments(*classes) -> dict:
    found = {}
    for cls in classes:
        for name, p in constructor_parameters(cls)[0].items():
            found.setdefault(name, p.default)
    return {k: (tuple(v) if isinstance(v, list) else v) for k, v in found.items() if k not in DERIVED_MODEL_KEYS}


def test_the_model_section_holds_the_arguments_of_the_model_and_its_network_with_their_defaults():
    from swwae.model import SWWAE

    assert fields(ModelSpec) == arguments(MODELS["SWWAEModule"].load(), SWWAE)


@pytest.mark.parametrize("name", sorted(DATASETS))
def test_each_data_section_holds_the_arguments_of_its_data_set_with_their_defaults(name):
    assert fields(DATA_SPECS[name]) == arguments(DATASETS[name].load())


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_every_shipped_config_parses(tmp_path, experiment):
    overrides = [] if experiment is None else [f"experiment={experiment}"]
    spec = check_config(compose_config(tmp_path, overrides, quick=False))
    assert isinstance(spec.model, ModelSpec) and spec.data.target.endswith("DataModule")


@pytest.mark.parametrize("model", sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml")))
@pytest.mark.parametrize("data", sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml")))
def test_every_model_parses_on_every_data_set(tmp_path, model, data):
    spec = check_config(compose_config(tmp_path, [f"model={model}", f"data={data}"]))
    assert type(spec.data) is DATA_SPECS[spec.data.target.rpartition(".")[2]]


def resolved(cfg) -> dict:
    """A job config as plain values, as ``check_config`` reads it: resolved, but its loggers and
    callbacks as written."""
    return {
        key: OmegaConf.to_container(cfg[key], resolve=key not in AS_WRITTEN)
        if OmegaConf.is_config(cfg[key])
        else cfg[key]
        for key in cfg
    }


@pytest.fixture
def config(tmp_path) -> dict:
    return resolved(compose_config(tmp_path))


@pytest.mark.parametrize(
    "section, key, value, message",
    [
        ("trainer", "max_epochs", True, "trainer.max_epochs=True is not allowed: a whole number of epochs >= 1"),
        ("trainer", "max_steps", -2, "trainer.max_steps=-2 is not allowed: a whole number of steps >= 1, or -1"),
        ("trainer", "limit_val_batches", 1.5, "trainer.limit_val_batches=1.5 is not allowed: an integer >= 0"),
        ("trainer", "precision", "8-bit", "trainer.precision='8-bit' is not allowed: one of 64, 32, 16, bf16,"),
        ("trainer", "gradient_clip_algorithm", "l1", "trainer.gradient_clip_algorithm='l1' is not allowed: must be"),
        ("trainer", "max_epoch", 3, "trainer.max_epoch is not a setting; did you mean trainer.max_epochs?"),
        ("model", "lr", "0.1", "model.lr='0.1' is not allowed: must be a finite number"),
        ("model", "beta", float("nan"), "model.beta=nan is not allowed: must be a finite number"),
        ("model", "widths", [8, "x"], "model.widths.1='x' is not allowed: must be a valid integer"),
        ("model", "kernel_size", 4, "model.kernel_size must be a positive odd int"),
        ("data", "batch_size", 2.0, "data.batch_size=2.0 is not allowed: must be a valid integer"),
        ("data", "labelled_per_batch", 40, None),  # with every label known, it is not used
        ("data", "root", "./data", "data.root is not a setting of data; the settings are: _target_, augment,"),
        (None, "sed", 1, "sed is not a setting; did you mean seed?"),
        (None, "test", "yes", "test='yes' is not allowed: must be a valid boolean"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_key(config, section, key, value, message):
    (config if section is None else config[section])[key] = value
    if message is None:
        check_config(config)
        return
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_a_class_of_your_own_keeps_its_section_as_written(config):
    config["model"] = {"_target_": "my_lab.MyModule", "depth": 3}
    spec = check_config(config)
    assert isinstance(spec.model, OwnClass) and spec.model.model_extra == {"depth": 3}


def test_the_spec_is_frozen(config):
    spec = check_config(config)
    with pytest.raises(Exception, match="frozen"):
        spec.trainer.max_epochs = 3


def test_a_config_stored_by_swwae_0_1_parses_by_the_same_schema():
    stored = torch.load(ROOT / "tests/data/checkpoint_v0_1.ckpt", weights_only=True)["swwae_config"]
    spec = parse_stored(stored, "checkpoint_v0_1.ckpt")  # its classes under their pre-0.2 module paths
    assert spec.model.widths == (4, 8) and spec.data.batch_size == 32 and spec.trainer.max_epochs == 2
    assert spec.model.weight_decay == 0.0 and spec.data.num_unlabelled is None  # settings it predates: defaults


@pytest.mark.parametrize(
    "change, message",
    [
        ({"data": {"_target_": "builtins.open", "file": "/etc/passwd"}}, "asks for the data class 'builtins.open'"),
        ({"model": "SWWAEModule"}, "holds a run config that does not parse: model must be a mapping of settings"),
        ({"trainer": {"_target_": TRAINER, "max_epochs": "2"}}, "does not parse: trainer.max_epochs='2'"),
        ({"trainer": {"_target_": TRAINER, "max_epoch": 2}}, "does not parse: trainer.max_epoch is not a setting"),
    ],
)
def test_a_stored_config_that_does_not_parse_is_one_checkpoint_error(change, message):
    stored = torch.load(ROOT / "tests/data/checkpoint_v0_1.ckpt", weights_only=True)["swwae_config"]
    with pytest.raises(CheckpointError) as err:
        parse_stored(stored | change, "crafted.ckpt")
    assert message in str(err.value) and str(err.value).startswith("crafted.ckpt") and "\n" not in str(err.value)


def test_parsing_a_run_loads_neither_torch_nor_lightning():
    code = (
        "import sys; from swwae.training.spec import check_config; "
        "assert not {'torch', 'lightning'} & set(sys.modules), sorted(m for m in sys.modules if 'torch' in m)[:5]"
    )
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]


def test_the_resolved_config_keeps_loggers_and_callbacks_as_written(tmp_path):
    spec = check_config(compose_config(tmp_path))
    assert isinstance(spec.trainer, TrainerSpec) and isinstance(spec.callbacks, dict)
    assert spec.callbacks["model_checkpoint"]["dirpath"] == "${paths.checkpoint_dir}/${run_name}"  # as written
