"""The typed run spec (swwae.training.spec): one schema for the command line and for every
stored config. Its sections hold the arguments their classes take, with the same defaults; every
shipped config parses; a bad value is one line naming the key; a stored config parses the same
way, its classes only ones swwae ships."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from helpers.config import CONFIG_DIR, ROOT, compose_config
from swwae.datasets import DATA_SETS
from swwae.errors import CheckpointError, ConfigError
from swwae.training.spec import (
    OwnClass,
    TrainerSpec,
    check_config,
    data_spec,
    model_spec,
    parse_stored,
    plain_section,
)

TRAINER = "lightning.pytorch.Trainer"
EXPERIMENTS = sorted(
    str(p.relative_to(CONFIG_DIR / "experiment").with_suffix("")) for p in (CONFIG_DIR / "experiment").rglob("*.yaml")
)


def test_a_setting_set_on_the_command_line_reaches_the_class_that_uses_it(tmp_path):
    """Each setting is declared once (swwae.settings); the config, the spec and the classes all
    read it from there, so a value set on the command line is what the network is built with."""
    from swwae.training.data import MNISTSampleDataModule
    from swwae.training.module import SWWAEModule

    cfg = compose_config(tmp_path, ["model=swwae_soft", "model.beta=7", "data.val_size=300"])
    spec = check_config(cfg)
    assert spec.model.beta == 7 and spec.data.val_size == 300 and spec.model.wavelet == "haar"
    module = SWWAEModule(**{k: v for k, v in OmegaConf.to_container(cfg.model).items() if k != "_target_"})
    assert module.net.pools[0].beta == 7.0
    data = {k: v for k, v in OmegaConf.to_container(cfg.data, resolve=True).items() if k != "_target_"}
    assert MNISTSampleDataModule(**data).val_size == 300


def stored_again(monkeypatch):
    """For a fixture that changed the schema: the config's nodes stored from it while the test
    runs, the shipped schema's again after it."""
    from swwae.training import composing

    monkeypatch.setattr(composing, "_stored_for", ())  # store the nodes again
    yield
    monkeypatch.undo()
    composing._stored_for = ()
    composing.store_settings()


@pytest.fixture
def run_settings_default_changed(monkeypatch):
    """``verbose`` defaulting to true in the run's schema, and ``paths.sweep_root`` to ``sweeps``,
    while the test runs; the shipped schema stored again after it."""
    from pydantic import StrictBool

    from swwae.training import run_settings

    class Changed(run_settings.RunSettings):
        verbose: StrictBool = True

    class ChangedPaths(run_settings.PathSettings):
        sweep_root: str = "sweeps"

    monkeypatch.setattr(run_settings, "RunSettings", Changed)
    monkeypatch.setattr(run_settings, "PathSettings", ChangedPaths)
    yield from stored_again(monkeypatch)


def test_the_runs_own_settings_take_their_defaults_from_the_schema(tmp_path, run_settings_default_changed):
    """The top-level settings (seed, resume, verbose, ...) and the paths are declared once, in
    ``RunSettings`` and ``PathSettings``: a default changed there is the composed config's, and the
    command line still overrides it."""
    cfg = compose_config(tmp_path, quick=False)
    assert cfg.verbose is True and cfg.paths.sweep_root == "sweeps"
    assert compose_config(tmp_path, ["verbose=false"], quick=False).verbose is False


@pytest.fixture
def callback_default_changed(monkeypatch):
    """``k`` of the k-NN monitor defaulting to 7 in its schema while the test runs; the shipped
    schema stored again after it."""
    from swwae.training import callback_settings

    class Changed(callback_settings.KNNAccuracySettings):
        k: int = 7

    entry = callback_settings.CALLBACKS["knn_accuracy"]
    monkeypatch.setitem(callback_settings.CALLBACKS, "knn_accuracy", dataclasses.replace(entry, settings=Changed))
    yield from stored_again(monkeypatch)


def test_our_callbacks_take_their_defaults_from_the_schema(tmp_path, callback_default_changed):
    """swwae's own callbacks' settings are declared once (``swwae.training.callback_settings``): a
    default changed there is the composed config's and the class's, and the command line still
    overrides it."""
    from swwae.training.composing import build
    from swwae.training.knn_monitor import KNNAccuracy

    node = compose_config(tmp_path, quick=False).callbacks.knn_accuracy
    assert node.k == 7 and build(node).settings.k == 7 and KNNAccuracy().settings.k == 7
    assert compose_config(tmp_path, ["callbacks.knn_accuracy.k=3"], quick=False).callbacks.knn_accuracy.k == 3


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_every_shipped_config_parses(tmp_path, experiment):
    overrides = [] if experiment is None else [f"experiment={experiment}"]
    spec = check_config(compose_config(tmp_path, overrides, quick=False))
    assert isinstance(spec.model, model_spec()) and spec.data.target.endswith("DataModule")


@pytest.mark.parametrize("model", sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml")))
@pytest.mark.parametrize("data", sorted(p.stem for p in (CONFIG_DIR / "data").glob("*.yaml")))
def test_every_model_parses_on_every_data_set(tmp_path, model, data):
    folder = []
    if (
        data == "image_folder"
    ):  # scanned as the config is checked: a folder of two classes (empty files: none is opened)
        for label in ("a", "b"):
            (tmp_path / "images" / label).mkdir(parents=True)
            for i in range(3):
                (tmp_path / "images" / label / f"{i}.png").touch()
        folder = [f"data.root={tmp_path / 'images'}", "data.val_size=2", "data.test_size=2"]
    spec = check_config(compose_config(tmp_path, [f"model={model}", f"data={data}", *folder]))
    assert type(spec.data) is data_spec(DATA_SETS[data])


def resolved(cfg) -> dict:
    """A job config as plain values, as ``check_config`` reads it: resolved, but its loggers and
    callbacks as written (swwae's own callbacks resolved)."""
    return {key: plain_section(cfg, key) for key in cfg}


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
        ("data", "on_device", "yes", "data.on_device='yes' is not allowed: write true, false or auto"),
        ("data", "labelled_per_batch", 40, None),  # with every label known, it is not used
        ("data", "root", "./data", "data.root is not a setting of data; the settings are: _target_, augment,"),
        (None, "sed", 1, "sed is not a setting; did you mean seed?"),
        (None, "test", "yes", "test='yes' is not allowed: must be a valid boolean"),
        (None, "channels_last", "yes", "channels_last='yes' is not allowed: write true, false or auto"),
        (None, "channels_last", 1, "channels_last=1 is not allowed: write true, false or auto"),
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


@pytest.mark.parametrize(
    "every, validation, message",
    [
        (
            0,
            1,
            "optimized_metric=val/knn_acc is measured by the k-NN monitor, which this run leaves off: turn it on "
            "at every validation with callbacks.knn_accuracy.every_n_epochs=1, or pick best.ckpt by another metric",
        ),
        (
            2,
            1,
            "optimized_metric=val/knn_acc picks best.ckpt at every validation, and callbacks.knn_accuracy."
            "every_n_epochs=2 measures it once in 2 epochs (a validation without it would stop the run): set "
            "callbacks.knn_accuracy.every_n_epochs=1, or validate only where it is measured with "
            "trainer.check_val_every_n_epoch=2",
        ),
        (2, 3, "optimized_metric=val/knn_acc picks best.ckpt at every validation, and callbacks.knn_accuracy."),
        (
            2,
            None,
            "optimized_metric=val/knn_acc picks best.ckpt at every validation, and callbacks.knn_accuracy."
            "every_n_epochs=2 measures it once in 2 epochs (a validation without it would stop the run): set "
            "callbacks.knn_accuracy.every_n_epochs=1",
        ),
        (1, None, None),
        (2, 4, None),  # every validation (epochs 4, 8, ...) is an epoch it is measured in
    ],
)
def test_val_knn_acc_as_the_monitor_is_measured_at_every_validation_or_one_line(config, every, validation, message):
    """Else Lightning's ModelCheckpoint stops the run at the first validation without it, an epoch in
    (a MisconfigurationException); the line names the setting, before torch loads."""
    config["optimized_metric"], config["optimized_mode"] = "val/knn_acc", "max"
    config["callbacks"]["knn_accuracy"]["every_n_epochs"] = every
    config["trainer"]["check_val_every_n_epoch"], config["trainer"]["max_epochs"] = validation, 12
    if message is None:
        assert check_config(config).optimized_metric == "val/knn_acc"
        return
    with pytest.raises(ConfigError) as err:
        check_config(config)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)
    if validation is None:
        assert str(err.value) == message  # no epochs to validate in: the monitor's own setting only


def test_an_accuracy_a_callback_logs_is_maximised():
    from swwae.training.composing import monitor_mode

    assert [monitor_mode(m) for m in ("val/acc", "val/knn_acc", "val/recon_mse", "val/loss")] == [
        "max",
        "max",
        "min",
        "min",
    ]


@pytest.mark.parametrize(
    "key, value",
    [("checkpoint_dir", "c" * 120_000), ("log_dir", "logs/" + "n" * 256), ("output_dir", "o/" * 2048)],
)
def test_a_path_too_long_for_the_file_system_is_one_short_line(config, key, value):
    """It would pass every other check and fail at the run's first write ("File name too long",
    after Hydra made the output folder); the line shows a few hundred characters of it, not all."""
    config["paths"][key] = value
    with pytest.raises(ConfigError) as err:
        check_config(config)
    line = str(err.value)
    assert line.startswith(f"paths.{key}=") and "too long for a path" in line
    assert "\n" not in line and len(line) < 400


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
