"""The semi-supervised map: ``data.num_unlabelled`` changes the unlabelled pool and nothing
else, and every arm of ``experiment=semi_map`` trains for the same number of steps."""

from __future__ import annotations

import itertools

import pytest
import torch
from hydra.utils import instantiate
from omegaconf import OmegaConf

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
    (folder / "metrics.json").write_text(__import__("json").dumps(record))


@pytest.mark.slow
def test_the_map_pairs_each_seed_with_its_twin(tmp_path, capsys):
    from swwae.commands.semi_map import main as semi_map_main

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


def test_the_report_reads_a_jobs_saved_config_with_bounds(tmp_path):
    from swwae.commands.semi_map import saved_config
    from swwae.errors import Unreadable

    job = tmp_path / "0_job"
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "config.yaml").write_text("data:\n  num_labels: 100\n  seed: ${seed}\nseed: 3\n")
    assert saved_config(job).data.seed == 3  # interpolations kept, resolved as before
    for junk in ("- 1\n- 2\n", "just a string\n"):
        (job / ".hydra" / "config.yaml").write_text(junk)
        with pytest.raises(Unreadable, match="is unreadable: not a mapping"):
            saved_config(job)
    (job / ".hydra" / "config.yaml").unlink()
    (job / ".hydra" / "config.yaml").symlink_to("/dev/zero")
    with pytest.raises(Unreadable) as caught:
        saved_config(job)
    assert "\n" not in str(caught.value)
