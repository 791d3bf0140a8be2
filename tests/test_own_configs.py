"""A lab's own config folder (docs/configs.md, "Your own presets"): its presets join the shipped
groups and override their values, through ``swwae train`` and ``python train.py``; the page's
own YAML and command are what runs."""

from __future__ import annotations

import shlex

import pytest
import yaml

from helpers.cli import run_cli
from helpers.config import CONFIG_DIR, ROOT
from helpers.docs import code_blocks

PAGE = ROOT / "docs" / "configs.md"
PRESET = next(b.source for b in code_blocks("yaml", pages=[PAGE]) if "override /model" in b.source)
COMMAND = next(
    line for b in code_blocks("bash", pages=[PAGE]) for line in b.source.splitlines() if "--config-dir" in line
)


def composed(tmp_path, entry: list, args: list[str]) -> dict:
    """The job config the command would run (``--cfg job``: printed, nothing trained or written)."""
    result = run_cli(*entry, *args, "--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    return yaml.safe_load(result.stdout)


@pytest.mark.slow
@pytest.mark.parametrize("entry", [["-m", "swwae", "train"], [ROOT / "train.py"]], ids=["swwae train", "train.py"])
def test_a_preset_in_your_own_folder_builds_on_a_shipped_one_and_overrides_it(tmp_path, entry):
    (tmp_path / "my_configs" / "experiment").mkdir(parents=True)
    (tmp_path / "my_configs" / "experiment" / "soft_slow.yaml").write_text(PRESET)
    args = shlex.split(COMMAND.split("#")[0])[2:]  # after "swwae train"
    cfg = composed(tmp_path, entry, args)
    shipped = yaml.safe_load((CONFIG_DIR / "model" / "swwae_soft.yaml").read_text())
    assert cfg["model"]["pool_mode"] == shipped["pool_mode"] == "soft"  # the shipped model it builds on
    assert (cfg["model"]["beta"], cfg["model"]["lr"], cfg["seed"]) == (10, 0.001, 7)  # its own values
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my_configs"]


@pytest.mark.slow
def test_a_file_named_as_a_shipped_one_does_not_replace_it(tmp_path):
    """As the page says: Hydra reads the shipped configs first."""
    (tmp_path / "my_configs" / "model").mkdir(parents=True)
    (tmp_path / "my_configs" / "model" / "swwae_hard.yaml").write_text("lr: 0.5\n")
    cfg = composed(tmp_path, ["-m", "swwae", "train"], ["--config-dir", "my_configs", "model=swwae_hard"])
    assert cfg["model"]["lr"] == 2e-3  # the schema's default, as the shipped preset leaves it
