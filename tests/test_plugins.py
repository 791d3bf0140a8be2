"""A lab's own parts (swwae.plugins), seen by every command: a pooling mode with its own setting
and a data set, in a module of the lab's (tests/helpers/lab_parts.py, copied into a folder of its
own), found through ``SWWAE_PLUGINS`` by train, the same command again, evaluate and export, and
through a ``swwae.plugins`` entry point of an installed package."""

from __future__ import annotations

import shutil
import sys

import pytest

from helpers.cli import TESTS, run_cli, train_cli
from swwae.errors import ConfigError


@pytest.fixture
def lab(tmp_path):
    folder = tmp_path / "lab"
    folder.mkdir()
    shutil.copy(TESTS / "helpers" / "lab_parts.py", folder / "lab_parts.py")
    return {"PYTHONPATH": str(folder), "SWWAE_PLUGINS": "lab_parts"}


@pytest.mark.slow
def test_a_labs_data_set_and_pooling_mode_work_in_every_command(tmp_path, lab):
    overrides = ["data=lab_images", "model.pool_mode=gain", "model.gain=3", "model.widths=[4]"]
    first = train_cli(tmp_path, *overrides, env=lab)
    assert first.returncode == 0, first.stderr
    again = train_cli(tmp_path, *overrides, name="again", env=lab)
    assert again.returncode == 0 and "had already finished" in again.stdout, again.stderr
    [best] = (tmp_path / "checkpoints").rglob("best.ckpt")
    evaluated = run_cli("-m", "swwae", "evaluate", best, "--out", tmp_path / "recon.png", cwd=tmp_path, env=lab)
    assert evaluated.returncode == 0 and "test/recon_mse" in evaluated.stdout, evaluated.stderr
    exported = run_cli("-m", "swwae", "export", best, "--to", tmp_path / "m", cwd=tmp_path, env=lab)
    assert exported.returncode == 0, exported.stderr
    code = "import swwae; net = swwae.load('m'); print(type(net.pools[0]).__name__, net.pools[0].gain)"
    loaded = run_cli("-c", code, cwd=tmp_path, env=lab)
    name, gain = loaded.stdout.split()
    assert name == "GainPool" and float(gain) == 3.0, loaded.stderr
    without = run_cli("-m", "swwae", "evaluate", best, cwd=tmp_path)  # the lab's parts not there: one line
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
        POOL_MODES.unregister("gain")
        DATA_SETS.unregister("lab_images")
        plugins._loaded.discard("lab_parts")
        sys.modules.pop("lab_parts", None)


def test_a_plugin_that_fails_is_one_line_naming_it(monkeypatch):
    from swwae import plugins

    monkeypatch.setenv(plugins.ENVIRONMENT, "no_such_lab_module")
    with pytest.raises(ConfigError, match="^the swwae plugin no_such_lab_module \\(SWWAE_PLUGINS\\) failed to load: "):
        plugins.load_plugins()
