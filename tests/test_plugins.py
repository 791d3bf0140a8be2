"""A lab's own parts (swwae.plugins), seen by every command: a pooling mode with its own setting
and a data set, in a module of the lab's (tests/helpers/lab_parts.py, copied into a folder of its
own), found through ``SWWAE_PLUGINS`` by train, the same command again, evaluate, export and
``swwae.load``, and through a ``swwae.plugins`` entry point of an installed package."""

from __future__ import annotations

import shutil
import sys

import pytest

import swwae
from helpers.cli import TESTS, swwae_here, train_args
from helpers.config import QUICK
from swwae.errors import ConfigError


def forget_lab() -> None:
    """The lab's parts out of this process again, as a new process starts without them: each
    command below loads them itself (the commands run in the test's process, ``swwae_here``)."""
    from swwae import plugins
    from swwae.datasets import DATA_SETS
    from swwae.pooling.modes import POOL_MODES
    from swwae.training.composing import register_resolvers

    POOL_MODES.unregister("gain")
    DATA_SETS.unregister("lab_images")
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
