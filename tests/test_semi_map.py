"""The semi-supervised map: ``data.num_unlabelled`` changes the unlabelled pool and nothing
else, and every arm of ``experiment=semi_map`` trains for the same number of steps."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
import torch
import yaml
from hydra.utils import instantiate
from omegaconf import OmegaConf

from swwae.commands.semi_map import main as semi_map_main
from swwae.errors import ConfigError
from swwae.training.data import MNISTSampleDataModule

ARMS = ["labels20", "labels50", "labels100", "pool500", "pool1000", "pool2000"]

# helpers


def sample(**settings) -> MNISTSampleDataModule:
    data = MNISTSampleDataModule(**settings)
    data.setup("fit")
    return data


def labelled_images_seen(data: MNISTSampleDataModule, steps: int) -> torch.Tensor:
    """The labelled images of the first ``steps`` training batches, in order, epoch after epoch."""
    seen, loader = [], data.train_dataloader()
    for epoch in itertools.count():
        loader.sampler.set_epoch(epoch)
        for batch in loader.sampler:
            seen.append(data.train_x[batch.labelled])
            if len(seen) == steps:
                return torch.cat(seen)


# the data key


def test_a_smaller_pool_keeps_the_labelled_validation_and_test_images():
    full = sample(num_labels=100, seed=1)
    for pool in (500, 1000, 2000):
        data = sample(num_labels=100, seed=1, num_unlabelled=pool)
        assert len(data.train_x) == 100 + pool and int((data.train_y < 0).sum()) == pool
        assert torch.equal(data.train_x[data.labelled], full.train_x[full.labelled])
        assert torch.equal(data.train_y[data.labelled], full.train_y[full.labelled])
        assert torch.equal(data.val_x, full.val_x) and torch.equal(data.test_x, full.test_x)
        assert torch.equal(data.val_y, full.val_y) and torch.equal(data.test_y, full.test_y)
    assert torch.equal(sample(num_labels=100, seed=1, num_unlabelled=3900).train_x, full.train_x)  # all of them


def test_smaller_pools_are_part_of_larger_ones():
    rows = lambda data: {bytes(image.flatten().tolist()) for image in data.train_x[data.train_y < 0]}  # noqa: E731
    small, large = (rows(sample(num_labels=100, num_unlabelled=n)) for n in (500, 2000))
    assert small < large


def test_every_pool_cycles_through_the_labels_in_the_same_order():
    full, small = (
        sample(num_labels=100, labelled_per_batch=64),
        sample(num_labels=100, labelled_per_batch=64, num_unlabelled=500),
    )
    assert len(small.train_dataloader()) == 10 and len(full.train_dataloader()) == 63
    assert torch.equal(labelled_images_seen(small, 70), labelled_images_seen(full, 70))  # across small epochs


def test_num_unlabelled_is_refused_when_it_cannot_work():
    with pytest.raises(ConfigError, match="set data.num_labels too"):
        sample(num_unlabelled=500)
    with pytest.raises(ConfigError, match="more than the 3900 label-hidden"):
        sample(num_labels=100, num_unlabelled=3901)
    with pytest.raises(ConfigError, match="data.num_unlabelled=0 is not allowed: must be >= 1"):
        MNISTSampleDataModule(num_labels=100, num_unlabelled=0)


def test_checkpoints_without_the_key_still_match_a_run_that_leaves_it_unset():
    assert "num_unlabelled" not in MNISTSampleDataModule(num_labels=100).hparams  # resume compares these
    assert MNISTSampleDataModule(num_labels=100, num_unlabelled=500).hparams["num_unlabelled"] == 500


# the preset


@pytest.mark.parametrize("arm", ARMS)
@pytest.mark.slow
def test_every_arm_trains_1260_steps_and_validates_every_63(make_config, arm):
    cfg = make_config("experiment=semi_map", f"+experiment/semi_map@_global_={arm}", quick=False)
    data = instantiate(OmegaConf.to_container(cfg.data, resolve=True))
    data.setup("fit")
    per_epoch = len(data.train_dataloader())
    steps = min(cfg.trainer.max_steps, cfg.trainer.max_epochs * per_epoch)
    assert steps == 1260 and cfg.trainer.val_check_interval == 63 and cfg.trainer.check_val_every_n_epoch is None
    assert cfg.trainer.max_epochs * per_epoch < 1260 + per_epoch  # no epoch more than it takes
    assert data.labelled_per_batch == min(64, cfg.data.num_labels)
    assert data.batch_size - data.labelled_per_batch == 64  # the same unlabelled images a step
    assert len(data.labelled) == cfg.data.num_labels


# the report (scripts/semi_map.py), from job folders alone


def fake_run(sweep, num, model, labels, pool, seed, error_pct):
    folder = sweep / f"{num}_job"
    (folder / ".hydra").mkdir(parents=True)
    (folder / ".hydra" / "overrides.yaml").write_text(f"- model={model}\n- seed={seed}\n")
    data = {
        "_target_": "swwae.training.data.MNISTSampleDataModule",
        "num_labels": labels,
        "num_unlabelled": pool,
        "val_size": 500,
        "test_size": 500,
        "seed": "${seed}",
    }  # as Hydra saves it: an interpolation
    (folder / ".hydra" / "config.yaml").write_text(OmegaConf.to_yaml({"seed": seed, "data": data}))
    record = {"run_name": f"run{num}", "model": model, "seed": seed, "metrics": {"test/acc": 1 - error_pct / 100}}
    (folder / "metrics.json").write_text(json.dumps(record))


@pytest.mark.slow
def test_the_map_pairs_each_seed_with_its_twin(tmp_path, capsys):
    labels, pools = tmp_path / "labels", tmp_path / "pools"
    num = itertools.count()
    for seed in range(3):
        for n, swwae_err, twin_err in [(20, 30.0 + seed, 35.0 + 2 * seed), (100, 9.0, 9.0 + seed)]:
            fake_run(labels, next(num), "swwae_hard", n, None, seed, swwae_err)
            fake_run(labels, next(num), "classifier_only", n, None, seed, twin_err)
        fake_run(pools, next(num), "swwae_hard", 100, 500, seed, 10.0 + seed)  # its twin: the full pool's
    assert semi_map_main([str(labels), str(pools), "--out", str(tmp_path / "map")]) == 0
    rows = {
        tuple(line.split("|")[1:3]): [c.strip() for c in line.split("|")[3:-1]]
        for line in (tmp_path / "map.md").read_text().splitlines()[2:]
    }
    assert rows[(" 20 ", " all (3,980) ")][:4] == ["31.00 ± 1.00", "37.00 ± 2.00", "+6.00 ± 1.00", "+5.0, +6.0, +7.0"]
    assert rows[(" 100 ", " 500 ")][2:] == ["-1.00 ± 0.00", "-1.0, -1.0, -1.0", "full pool (all (3,900))"]
    assert rows[(" 100 ", " all (3,900) ")][-1] == "same cell"
    assert (tmp_path / "map.png").stat().st_size > 1000


CHAIN = "a0: x\n" + "".join(f"a{i}: ${{a{i - 1}}}${{a{i - 1}}}\n" for i in range(1, 30))  # 2^29 x, resolved
BAD_JOBS = {  # what a job's records hold -> the why of its one line
    "a home read from the environment": ({"num_labels": "${oc.env:HOME}"}, {}, "data.num_labels is an interpolation"),
    "a 29-level interpolation chain": ({"num_labels": "${a29}"}, {}, "data.num_labels is an interpolation"),
    "a seed of abc": ({}, {"seed": "abc"}, "seed is str 'abc', not an integer"),
    "a null seed": ({}, {"seed": None}, "seed is null, not an integer"),
    "a NaN metric": ({}, {"metrics": {"test/acc": math.nan}}, "metrics.json: metric test/acc is nan, not a finite"),
    "an infinite metric": ({}, {"metrics": {"test/acc": -math.inf}}, "metrics.json: metric test/acc is -inf, not"),
    "an accuracy of 3": ({}, {"metrics": {"test/acc": 3}}, "metric test/acc is 3.0, not an accuracy in [0, 1]"),
    "data a string": ("x", {}, "data is str 'x', not a mapping"),
    "data.seed with no seed": ({}, {"config_seed": None}, "data.seed is ${seed}, and the config has no seed"),
    "junk YAML": (None, {}, ".hydra/config.yaml: not YAML"),
}


def bad_run(sweep, data, record):
    """A job of ``fake_run``'s whose saved config's data section is ``data`` (changes, or a
    value instead of a mapping; None: a config that is not YAML) and whose metrics.json has
    ``record``'s changes."""
    fake_run(sweep, 9, "swwae_hard", 100, None, 0, 10.0)
    folder = sweep / "9_job"
    config = yaml.safe_load((folder / ".hydra" / "config.yaml").read_text())
    config["data"] = config["data"] | data if isinstance(data, dict) else data
    if "config_seed" in record:
        del config["seed"]
    text = "{data: [1,\n" if data is None else yaml.safe_dump(config) + CHAIN
    (folder / ".hydra" / "config.yaml").write_text(text)
    saved = json.loads((folder / "metrics.json").read_text())
    (folder / "metrics.json").write_text(json.dumps(saved | {k: v for k, v in record.items() if k != "config_seed"}))
    return folder


@pytest.mark.parametrize("case", BAD_JOBS)
def test_a_jobs_records_are_read_as_data_and_a_bad_one_is_one_line(tmp_path, capsys, monkeypatch, case):
    """The saved config is plain YAML, never resolved: no ${oc.env:...} read and printed, no
    interpolation chain doubled 29 times; values are checked. With no job left: one line."""
    data, record, why = BAD_JOBS[case]
    monkeypatch.chdir(tmp_path)
    job = bad_run(tmp_path / "sweep", data, record)
    assert semi_map_main([str(tmp_path / "sweep")]) == 2
    out, err = capsys.readouterr()
    error = [line for line in err.splitlines() if not line.startswith("semi map: reading")]  # the progress lines
    assert len(error) == 1 and error[0].startswith(
        f"error: no finished semi-supervised job in {tmp_path / 'sweep'}; {job}: unreadable: {why}"
    )
    assert out == "" and "Traceback" not in err and str(Path.home()) not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # nothing written


@pytest.mark.slow
def test_a_bad_job_is_marked_and_the_map_of_the_rest_is_written_here(tmp_path, capsys, monkeypatch):
    sweep = tmp_path / "sweep"
    for num, model in enumerate(["swwae_hard", "classifier_only"]):
        fake_run(sweep, num, model, 100, None, 0, 10.0)
    job = bad_run(sweep, {}, {"seed": "abc"})
    before = sorted(p.name for p in sweep.iterdir())
    monkeypatch.chdir(tmp_path)
    assert semi_map_main([str(sweep)]) == 1  # a job was left out; the rest is reported
    out = capsys.readouterr().out.splitlines()
    assert f"{job}: unreadable: seed is str 'abc', not an integer" in out and out[-1] == "-> semi_map.md, semi_map.png"
    assert (tmp_path / "semi_map.md").is_file() and (tmp_path / "semi_map.png").is_file()
    assert sorted(p.name for p in sweep.iterdir()) == before  # the sweep folder is only read


def test_an_out_that_cannot_be_written_is_one_line_before_anything_is_read(tmp_path, capsys):
    (tmp_path / "a file").write_text("")
    assert semi_map_main([str(tmp_path / "no sweep"), "--out", str(tmp_path / "a file" / "map")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: cannot write the report map in {tmp_path / 'a file'}: {tmp_path / 'a file'} is a file, not a "
        "folder; set --out=... to write elsewhere"
    ]


def test_two_runs_of_one_cell_and_seed_are_one_line_not_the_later_kept(tmp_path, capsys, monkeypatch):
    """A seed run again into another sweep: the map cannot tell which to pair (it kept the later
    one without a word)."""
    fake_run(tmp_path / "a", 0, "swwae_hard", 100, None, 0, 10.0)
    fake_run(tmp_path / "a", 1, "classifier_only", 100, None, 0, 12.0)
    fake_run(tmp_path / "b", 0, "swwae_hard", 100, None, 0, 20.0)
    monkeypatch.chdir(tmp_path)
    assert semi_map_main(["a", "b"]) == 2
    error = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("semi map: reading")]
    assert error == [
        "error: b/0_job and a/0_job are both swwae_hard at 100 labels, unlabelled pool all, with seed 0: a cell has "
        "one run a seed, and the map cannot tell which of the two to pair"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]  # nothing written


def test_a_seed_without_its_twin_is_named_where_the_columns_would_not_subtract_to_the_gain():
    """The model's mean counts every seed, the gain only the paired ones: said in the row."""
    from swwae.commands.semi_map import TWIN, Cell, markdown, pairs

    cell = Cell(100, None)
    runs = {("swwae_hard", cell, seed): 10.0 + seed for seed in range(3)}
    runs |= {(TWIN, cell, seed): 12.0 for seed in range(2)}
    row = markdown(pairs(runs, "swwae_hard"), "swwae_hard", 4000).splitlines()[2]
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2:] == [
        "11.00 ± 1.00",
        "12.00 ± 0.00",
        "+1.50 ± 0.71",
        "+2.0, +1.0",
        "same cell; no twin at seed 2 (in its mean, not the gain's)",
    ]
