"""``python train.py experiment=<preset> debug=quick`` works for every preset under
configs/experiment/ and for the arms of the multirun ones: the quick run adapts the batch
settings a preset sets for its full-size batches (configs/debug/quick.yaml).

Every preset and arm is composed and passes the checks the job runs before any data is read,
and the labelled-per-batch check its data module runs on loading; the presets that train on
the bundled sample (and the arms that change the data or the trainer) are trained for real."""

from __future__ import annotations

import math

import pytest
import yaml

from helpers.config import CONFIG_DIR
from swwae.settings import choose_labelled_per_batch
from swwae.training.composing import build
from swwae.training.run import train
from swwae.training.spec import check_config

EXPERIMENTS = CONFIG_DIR / "experiment"
ARM_FOLDERS = {p.name for p in EXPERIMENTS.iterdir() if p.is_dir() and p.name != "paper"}  # +experiment/<x>@_global_
PRESETS = sorted(
    str(p.relative_to(EXPERIMENTS).with_suffix(""))
    for p in EXPERIMENTS.rglob("*.yaml")
    if p.parent.name not in ARM_FOLDERS
)


def sweep_params(preset: str) -> dict[str, list[str]]:
    params = (yaml.safe_load((EXPERIMENTS / f"{preset}.yaml").read_text()).get("hydra") or {}).get("sweeper", {})
    return {key: str(values).split(",") for key, values in (params.get("params") or {}).items() if key != "seed"}


def arms(preset: str) -> list[list[str]]:
    """The preset alone, then each value of each swept key on its own (seed 0 stands for every seed)."""
    return [[]] + [[f"{key}={value}"] for key, values in sweep_params(preset).items() for value in values]


def arm_sets(arm: list[str]) -> set[str]:
    """The config groups an arm file sets (an ``+experiment/<x>@_global_`` arm comes after
    ``debug=quick`` in Hydra's defaults, so what it sets wins)."""
    groups = set()
    for override in arm:
        key, _, value = override.partition("=")
        if key.startswith("+experiment/"):
            folder = key.removeprefix("+experiment/").partition("@")[0]
            groups |= set(yaml.safe_load((EXPERIMENTS / folder / f"{value}.yaml").read_text()) or {})
    return groups


CASES = [(preset, arm) for preset in PRESETS for arm in arms(preset)]


def case_id(case) -> str:
    preset, arm = case
    return " ".join([preset, *arm])


def test_every_preset_is_covered():
    assert {"mnist_semi_100", "semi_map", "hard_vs_soft", "feature_study", "paper/stl10"} <= set(PRESETS)
    assert any("data" in arm_sets(arm) for _, arm in CASES)  # semi_map's arms set their batches


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_each_preset_and_arm_passes_the_jobs_checks_with_debug_quick(case, make_config):
    preset, arm = case
    cfg = make_config(f"experiment={preset}", *arm)
    assert cfg.trainer.limit_train_batches == 3  # quick, whatever the preset
    if "trainer" not in arm_sets(arm):  # semi_map's pool arms keep their epochs (of 3 batches each)
        assert cfg.trainer.max_epochs == 1
    check_config(cfg)
    datamodule = build(cfg.data, _convert_="all")
    if cfg.data.get("num_labels") is not None:  # the check setup() runs on the loaded data
        labelled = choose_labelled_per_batch(
            datamodule.labelled_per_batch, datamodule.batch_size, cfg.data.num_labels, f"{cfg.data.num_labels} labels"
        )
        assert 1 <= labelled < datamodule.batch_size


def data_of(preset: str) -> str:
    """The data config a preset trains on: its own ``override /data``, or that of the preset it
    extends, or the default (the bundled sample)."""
    for entry in yaml.safe_load((EXPERIMENTS / f"{preset}.yaml").read_text()).get("defaults") or []:
        if isinstance(entry, dict) and "override /data" in entry:
            return entry["override /data"]
        if isinstance(entry, str) and entry != "_self_":  # a preset it extends, beside it
            return data_of(str((EXPERIMENTS / preset).parent.relative_to(EXPERIMENTS) / entry))
    return "mnist_sample"


# the presets, and the arms that set their own data (batches), not their own epochs
TRAINED = [
    (p, a)
    for p, a in CASES
    if data_of(p) == "mnist_sample" and (not a or arm_sets(a) & {"data", "trainer"} == {"data"})
]


def test_the_trained_presets_include_the_one_that_failed():
    assert ("mnist_semi_100", []) in TRAINED and ("semi_map", []) in TRAINED


@pytest.mark.slow
@pytest.mark.parametrize("case", TRAINED, ids=case_id)
def test_each_preset_on_the_bundled_sample_trains_with_debug_quick(case, make_config):
    preset, arm = case
    cfg = make_config(f"experiment={preset}", *arm, "test=false")
    assert math.isfinite(train(cfg))
