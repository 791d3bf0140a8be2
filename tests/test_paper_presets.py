"""The paper's experiments (configs/experiment/paper/): every preset runs end to end
(a batch of each split) on files the tests write in its dataset's real format, and says in its
comment what the paper reported."""

from __future__ import annotations

import math
import re

import pytest

from helpers.config import CONFIG_DIR, ONE_BATCH, ROOT
from helpers.datasets import write_cifar, write_mnist, write_stl10, write_svhn
from swwae.arch import parse
from swwae.datasets import DATA_SETS
from swwae.training.run import train

PRESETS = sorted(p.stem for p in (CONFIG_DIR / "experiment" / "paper").glob("*.yaml"))
# what each preset needs to run on a few written images: the data files, and smaller splits
SMALL = {
    "mnist_pool_size": (None, []),
    "mnist_semi": (lambda root, mp: write_mnist(root), ["data.num_labels=20", "data.val_size=20"]),
    "svhn_1000": (write_svhn, ["data.num_labels=20", "data.val_size=20"]),
    "stl10": (lambda root, mp: write_stl10(root, mp, n_train=300), ["data.val_size=10"]),
    "cifar10": (lambda root, mp: write_cifar(root, mp), ["data.val_size=20"]),
    "cifar100": (lambda root, mp: write_cifar(root, mp, classes=100, per_batch=300), ["data.val_size=100"]),
}


def test_every_paper_preset_is_covered():
    assert set(PRESETS) == set(SMALL)


@pytest.mark.parametrize("preset", PRESETS)
def test_each_preset_quotes_the_papers_number(preset):
    text = (CONFIG_DIR / "experiment" / "paper" / f"{preset}.yaml").read_text()
    comment = " ".join(line for line in text.splitlines() if line.startswith("#"))
    assert "Zhao et al. 2016" in comment and ("%" in comment or "figure" in comment)
    assert "swwae train" in comment


@pytest.mark.parametrize("preset", PRESETS)
@pytest.mark.slow
def test_each_preset_runs_on_files_in_its_datasets_format(preset, make_config, tmp_path, monkeypatch):
    write, overrides = SMALL[preset]
    if write is not None:
        write(tmp_path / "data", monkeypatch)
        overrides = [f"data.root={tmp_path / 'data'}", *overrides]
    cfg = make_config(f"experiment=paper/{preset}", *ONE_BATCH, "data.batch_size=4", *overrides)
    spec = parse(cfg.model.arch)
    assert math.isfinite(train(cfg))
    assert (cfg.optimized_metric == "val/acc") == (spec.classes is not None)
    assert re.fullmatch(r"[a-z_0-9]+", cfg.run_name.replace("swwae_hard_", "")) is not None


CLASSIFYING = [p for p in PRESETS if p != "mnist_pool_size"]  # mnist_pool_size: reconstruction only, no labels


@pytest.mark.parametrize("preset", CLASSIFYING)
def test_a_preset_run_on_fewer_labels_is_named_for_them(preset, make_config):
    """``experiment=paper/cifar10 data.num_labels=4000`` ran as ``swwae_hard_cifar10_seed0``, the
    name of the preset's all-label run, whose folder then refused it (or, with ``resume=false``,
    was moved aside for it): a preset that names its run says its labels, as the default name does."""
    own = str(make_config(f"experiment=paper/{preset}").run_name)
    fewer = str(make_config(f"experiment=paper/{preset}", "data.num_labels=500").run_name)
    assert fewer == re.sub(r"_labels[0-9]+", "", own).replace("_seed0", "_labels500_seed0")


def trains_table() -> dict[str, list[str]]:
    """The rows of docs/paper.md's "What each preset trains", by preset: their cells."""
    text = (ROOT / "docs" / "paper.md").read_text().split("## What each preset trains", 1)[1].split("\n## ", 1)[0]
    rows = [line.strip("|").split(" | ") for line in text.splitlines() if line.startswith("| `")]
    return {cells[0].strip(" `"): [c.strip() for c in cells[1:]] for cells in rows}


def first_number(cell: str) -> int:
    return int(re.search(r"[0-9][0-9,]*", cell)[0].replace(",", ""))


def test_the_docs_table_of_what_each_preset_trains_is_the_presets(make_config):
    """docs/paper.md says what each preset trains (network, labels, validation, batch, epochs) for
    a reader who reproduces the paper without opening the YAML: it says what the presets say."""
    table = trains_table()
    assert sorted(table) == PRESETS
    for preset, (network, _, labels, held_out, batches) in table.items():
        cfg = make_config(f"experiment=paper/{preset}", quick=False)
        arch = re.search(r"`([^`]*(?:c-|fc)[^`]*)`", network)[1].replace("Pp", f"{cfg.model.pool_size}p")
        start, _, end = arch.partition("...")
        assert cfg.model.arch == arch if not end else cfg.model.arch.startswith(start) and cfg.model.arch.endswith(end)
        if cfg.data.get("num_labels") is not None:
            assert first_number(labels) == cfg.data.num_labels
        elif cfg.data.get("fold") is not None:  # STL-10: a fold's 1,000 labels, less those validating
            assert first_number(labels) == 1000 - cfg.data.val_size
        elif labels.startswith("none"):
            assert cfg.model.lambda_nll == 0 and parse(cfg.model.arch).classes is None
        else:
            assert labels.startswith("all") and first_number(labels) == DATA_SETS[data_of(cfg)].epoch_images
        assert first_number(held_out) == cfg.data.val_size
        assert [int(n) for n in batches.split(", ")] == [cfg.data.batch_size, cfg.trainer.max_epochs]


def data_of(cfg) -> str:
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get().runtime.choices.data
