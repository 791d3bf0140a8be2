"""A lab's own parts (swwae.plugins), seen by every command: a pooling mode with its own setting,
a data set and a loss term, in a module of the lab's (tests/helpers/lab_parts.py, copied into a
folder of its own), found through ``SWWAE_PLUGINS`` by train, the same command again, evaluate,
export and ``swwae.load``, and through a ``swwae.plugins`` entry point of an installed package.
A run that uses none of the lab's parts holds none of them: it reads back without the plugin, and
loading the plugin leaves its identity as it was."""

from __future__ import annotations

import shutil
import sys

import pytest

import swwae
from helpers.cli import TESTS, swwae_here, train_args
from helpers.config import QUICK, compose_config
from swwae.errors import ConfigError


def forget_lab() -> None:
    """The lab's parts out of this process again, as a new process starts without them: each
    command below loads them itself (the commands run in the test's process, ``swwae_here``)."""
    from swwae import plugins
    from swwae.datasets import DATA_SETS
    from swwae.loss_terms import TERMS
    from swwae.pooling.modes import POOL_MODES
    from swwae.training.composing import register_resolvers

    POOL_MODES.unregister("gain")
    DATA_SETS.unregister("lab_images")
    TERMS.unregister("lambda_rough")
    plugins._loaded.discard("lab_parts")
    sys.modules.pop("lab_parts", None)
    register_resolvers()  # the schema's nodes without the lab's setting


@pytest.fixture
def lab(tmp_path, monkeypatch):
    """``SWWAE_PLUGINS=lab_parts`` with the module on the path; forgotten after each command."""
    folder = tmp_path / "lab"
    folder.mkdir()
    shutil.copy(TESTS / "helpers" / "lab_parts.py", folder / "lab_parts.py")
    monkeypatch.syspath_prepend(str(folder))
    yield {"SWWAE_PLUGINS": "lab_parts"}
    forget_lab()


@pytest.mark.slow
def test_a_labs_data_set_and_pooling_mode_work_in_every_command(tmp_path, lab):
    def command(*args, env=lab):
        try:
            return swwae_here(*args, cwd=tmp_path, env=env)
        finally:
            forget_lab()

    overrides = ["data=lab_images", "model.pool_mode=gain", "model.gain=3", "model.widths=[4]"]
    first = command("train", *train_args(tmp_path, overrides, "run", QUICK))
    assert first.returncode == 0, first.stderr
    again = command("train", *train_args(tmp_path, overrides, "again", QUICK))
    assert again.returncode == 0 and "had already finished" in again.stdout, again.stderr
    [best] = (tmp_path / "checkpoints").rglob("best.ckpt")
    evaluated = command("evaluate", best, "--out", tmp_path / "recon.png")
    assert evaluated.returncode == 0 and "test/recon_mse" in evaluated.stdout, evaluated.stderr
    exported = command("export", best, "--to", tmp_path / "m")
    assert exported.returncode == 0, exported.stderr
    with pytest.MonkeyPatch.context() as env:  # swwae.load, in a script, loads the lab's parts too
        env.setenv("SWWAE_PLUGINS", "lab_parts")
        net = swwae.load(tmp_path / "m")
    assert type(net.pools[0]).__name__ == "GainPool" and net.pools[0].gain == 3.0
    forget_lab()
    without = command("evaluate", best, env={})  # the lab's parts not there: one line
    assert without.returncode == 2 and len(without.stderr.strip().splitlines()) == 1, without.stderr


def test_an_installed_packages_entry_point_is_loaded_once(tmp_path, monkeypatch):
    """An installed package declares ``[project.entry-points."swwae.plugins"]``; its metadata is
    what ``pip install`` leaves (a dist-info folder with entry_points.txt)."""
    from swwae import plugins
    from swwae.datasets import DATA_SETS
    from swwae.pooling.modes import POOL_MODES

    site = tmp_path / "site"
    (site / "mylab-0.1.dist-info").mkdir(parents=True)
    (site / "mylab-0.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: mylab\nVersion: 0.1\n")
    (site / "mylab-0.1.dist-info" / "entry_points.txt").write_text("[swwae.plugins]\nmylab = lab_parts\n")
    shutil.copy(TESTS / "helpers" / "lab_parts.py", site / "lab_parts.py")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(plugins.ENVIRONMENT, raising=False)
    try:
        assert plugins.load_plugins() == ["lab_parts"] and plugins.load_plugins() == []
        assert "gain" in POOL_MODES and "lab_images" in DATA_SETS
    finally:
        forget_lab()


def test_a_plugin_that_fails_is_one_line_naming_it(monkeypatch):
    from swwae import plugins

    monkeypatch.setenv(plugins.ENVIRONMENT, "no_such_lab_module")
    with pytest.raises(ConfigError, match="^the swwae plugin no_such_lab_module \\(SWWAE_PLUGINS\\) failed to load: "):
        plugins.load_plugins()


# a run that uses none of the lab's parts: stored, read back and known without them


def load_lab(monkeypatch) -> None:
    """The lab's parts in this process, as every command loads them first (``lab``: forgotten after)."""
    from swwae import plugins

    monkeypatch.setenv(plugins.ENVIRONMENT, "lab_parts")
    assert plugins.load_plugins() == ["lab_parts"]


def unload_lab(monkeypatch) -> None:
    """This process as one that never had the lab's parts (a colleague's, without the plugin)."""
    from swwae import plugins

    forget_lab()
    monkeypatch.delenv(plugins.ENVIRONMENT)


HARD = ["model=swwae_hard", "model.widths=[4]"]


def run_folder_of(cfg, **model):
    """The run folder of a composed config, named and identified as the job does it; ``model``:
    settings of the model section to set first, in place, as ``model.<key>=<value>`` would."""
    from swwae.training.composing import Launch
    from swwae.training.run import run_folder, stored_config
    from swwae.training.spec import check_config

    for key, value in model.items():
        cfg.model[key] = value
    return run_folder(check_config(cfg), stored_config(cfg), Launch())


def stored_run(folder, cfg):
    """The module of ``cfg``'s run, as the job builds it, and its last.ckpt in ``folder``, of the
    run finished (debug=quick: one epoch) as the job writes it: the module's settings and weights,
    the stored run config, the identity; nothing trained."""
    from swwae.checkpoint_file import with_checksum
    from swwae.training.checkpoints import atomic_torch_save
    from swwae.training.composing import build
    from swwae.training.run import stored_config
    from swwae.training.runs.identity import IDENTITY_KEY

    module = build(cfg.model, image_shape=(1, 28, 28), num_classes=10, pixel_mean=0.13, _convert_="all")
    checkpoint = {
        "epoch": 0,
        "global_step": 1,
        "state_dict": module.state_dict(),
        "hyper_parameters": dict(module.hparams),
        "swwae_config": stored_config(cfg),
        IDENTITY_KEY: {"identity": folder.identity, "digest": folder.digest},
    }
    folder.path.mkdir(parents=True)
    atomic_torch_save(with_checksum(checkpoint), folder.path / "last.ckpt")
    return module


def test_a_hard_run_trained_with_a_labs_plugin_reads_back_without_it(tmp_path, lab, monkeypatch):
    """Stored with every registered mode's setting and term's weight, it needed the plugin to be
    evaluated, resumed or loaded from its model folder: a colleague without it could not read it."""
    from swwae.training.checkpoints import load_model

    load_lab(monkeypatch)
    cfg = compose_config(tmp_path, HARD)
    folder = run_folder_of(cfg)
    swwae.save_pretrained(stored_run(folder, cfg).net, tmp_path / "m")  # its network, saved with the lab's parts
    unload_lab(monkeypatch)
    last = folder.path / "last.ckpt"
    module, config = load_model(last)  # evaluate's, probe's and project's reader
    assert module.net.pool_mode == "hard" and config["model"]["pool_mode"] == "hard"
    assert swwae.load(tmp_path / "m").settings == swwae.load(last).settings
    again = run_folder_of(compose_config(tmp_path, HARD))  # the same command, without the plugin, finds its run
    assert again.identity == folder.identity and again.decide("true", 1, -1).action == "finished"


def test_loading_a_labs_plugin_leaves_the_identity_of_a_run_that_uses_none_of_its_parts(tmp_path, lab, monkeypatch):
    """The same command finds its own run whether the lab's plugin was installed since or not; a
    run that weighs the lab's term, or pools by its mode, is known by their settings."""
    cfg = compose_config(tmp_path, HARD)
    before = run_folder_of(cfg)
    stored_run(before, cfg)
    load_lab(monkeypatch)
    cfg = compose_config(tmp_path, HARD)
    after = run_folder_of(cfg)
    assert after.digest == before.digest and after.decide("true", 1, -1).action == "finished"
    weighed = {w: run_folder_of(cfg, lambda_rough=w).digest for w in (0.5, 1.0, 0)}
    assert weighed[0] == before.digest and len(set(weighed.values())) == 3
    gains = [run_folder_of(cfg, pool_mode="gain", gain=g).identity["model"] for g in (2.0, 3.0)]
    assert [g["gain"] for g in gains] == [2.0, 3.0] and "beta" not in gains[0]
