"""The training job (docs/architecture.md 4.3-4.6): configs, what a run leaves behind, resume, errors."""

from __future__ import annotations

import json
import math

import pytest
import torch
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from helpers.cli import command_here
from helpers.config import CONFIG_DIR, MODEL_CONFIGS, ONE_BATCH
from helpers.faults import Crash, crash_at
from swwae.errors import ConfigError
from swwae.training.run import train


def event_tags(log_dir):
    tags = {"images": set(), "scalars": set()}
    for events in log_dir.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events), size_guidance={"images": 0, "scalars": 0})
        acc.Reload()
        for kind in tags:
            tags[kind] |= set(acc.Tags()[kind])
    return tags


@pytest.mark.parametrize("model", MODEL_CONFIGS)
@pytest.mark.slow
def test_every_model_config_trains_a_batch(make_config, model):
    cfg = make_config(f"model={model}", *ONE_BATCH, "model.widths=[8,16]")
    value = train(cfg)
    assert math.isfinite(value)


@pytest.mark.slow
def test_experiment_presets_compose(make_config):
    folder = CONFIG_DIR / "experiment"
    for preset in sorted(p.relative_to(folder).with_suffix("").as_posix() for p in folder.rglob("*.yaml")):
        cfg = make_config(f"experiment={preset}")
        assert cfg.model.pool_mode and cfg.data._target_.startswith("swwae.training.data.")


@pytest.mark.slow
def test_a_short_run_leaves_logs_metrics_and_a_checkpoint_that_reloads(make_config, tmp_path):
    cfg = make_config("model.widths=[8,16]")
    value = train(cfg)

    metrics = json.loads((tmp_path / "output" / "metrics.json").read_text())
    assert metrics["model"] == "swwae_hard" and metrics["data"] == "mnist_sample" and metrics["seed"] == 0
    for name in ("val/recon_mse", "val/acc", "test/recon_mse", "test/acc", "test/middle_mse_1"):
        assert math.isfinite(metrics["metrics"][name]), name
    assert value == metrics["metrics"]["val/recon_mse"]

    tags = event_tags(tmp_path / "logs" / cfg.run_name)
    assert {"reconstructions", "where/stage_1", "where/stage_2", "middle/stage_1"} <= tags["images"]
    assert {
        "train/loss_epoch",
        "train/recon_mse",  # the other terms' epoch means (swwae.training.term_means)
        "train/middle_mse_1",
        "train/nll",
        "val/recon_mse",
        "val/acc",
        "val/middle_mse_1",
        "test/recon_mse",
        "hp/test/acc",
    } <= tags["scalars"]

    folder = tmp_path / "checkpoints" / cfg.run_name
    assert (folder / "best.ckpt").is_file() and (folder / "last.ckpt").is_file()
    from swwae.commands.evaluate import evaluate

    again = evaluate(folder / "best.ckpt", out=tmp_path / "recon.png")
    assert again["test/recon_mse"] == pytest.approx(metrics["metrics"]["test/recon_mse"], rel=1e-5)
    assert again["test/acc"] == pytest.approx(metrics["metrics"]["test/acc"])
    assert (tmp_path / "recon.png").stat().st_size > 1000


@pytest.mark.slow
def test_resume_continues_from_the_saved_epoch(make_config, tmp_path):
    with pytest.raises(Crash):  # a run of 2 epochs, stopped at the start of the second
        train(make_config("model.widths=[8]", "trainer.max_epochs=2", *crash_at(epoch=1)))
    last = tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "last.ckpt"
    assert torch.load(last, weights_only=True)["global_step"] == 3  # QUICK: 3 batches an epoch
    train(make_config("model.widths=[8]", "trainer.max_epochs=2", "resume=true"))
    assert torch.load(last, weights_only=True)["global_step"] == 6
    folders = [p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith(".")]  # not the lock
    assert folders == ["swwae_hard_mnist_sample_seed0"]  # not restarted
    assert len(list((tmp_path / "logs" / "swwae_hard_mnist_sample_seed0").glob("version_*"))) == 1


@pytest.mark.slow
def test_a_fresh_run_moves_an_old_run_aside_instead_of_overwriting(make_config, tmp_path):
    train(make_config("model.widths=[8]"))
    train(make_config("model.widths=[8]", "resume=false"))
    folders = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if not p.name.startswith("."))
    assert folders[0] == "swwae_hard_mnist_sample_seed0" and folders[1].startswith(
        "swwae_hard_mnist_sample_seed0.previous-"
    )
    assert (tmp_path / "checkpoints" / folders[1] / "last.ckpt").is_file()


def test_semi_supervised_run_uses_only_the_labelled_subset(make_config):
    cfg = make_config("data.num_labels=100", "model.widths=[8]")
    assert math.isfinite(train(cfg))


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model=swwae_soft", "model.beta=0"], "beta"),
        (["model.widths=[]"], "widths"),
        (["model.pool_size=7", "model.widths=[4,4,4]"], "larger than"),
        (["data.num_labels=6000"], "num_labels"),
        (["model.pool_mode=sideways"], "pool_mode"),
    ],
)
@pytest.mark.slow
def test_invalid_values_are_rejected_before_training(make_config, overrides, message, tmp_path):
    with pytest.raises(ConfigError, match=message):
        train(make_config(*overrides))
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_cli_bad_value_is_one_error_line_and_nonzero_exit(tmp_path):
    result = command_here(
        "model=swwae_soft",
        "model.beta=-1",
        f"hydra.run.dir={tmp_path}",
        f"paths.checkpoint_dir={tmp_path / 'ck'}",
        f"paths.log_dir={tmp_path / 'logs'}",
        cwd=tmp_path,
    )
    assert result.returncode == 2
    assert result.stderr.strip().splitlines()[-1].startswith("error: model.beta=-1 is not allowed: must be > 0")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_cli_missing_dataset_names_the_folder_and_the_offline_option(tmp_path):
    result = command_here("data=mnist", f"data.root={tmp_path / 'nothing'}", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode == 2
    line = result.stderr.strip().splitlines()[-1]
    assert line.startswith("error:") and str(tmp_path / "nothing") in line and "data=mnist_sample" in line


@pytest.mark.slow
def test_cli_unknown_model_name_fails_with_the_choices(tmp_path):
    result = command_here("model=swwae_medium", f"hydra.run.dir={tmp_path}", cwd=tmp_path)
    assert result.returncode != 0
    assert "swwae_medium" in result.stderr and "swwae_hard" in result.stderr


def test_hydras_flags_may_stand_between_the_overrides(tmp_path):
    """``model=swwae_soft --cfg job seed=3`` (or ``... -m seed=0,1``): Hydra's parser alone would
    take ``seed=3`` for an unrecognized argument."""
    result = command_here("model=swwae_soft", "--cfg", "job", "seed=3", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    job = yaml.safe_load(result.stdout)
    assert job["seed"] == 3 and job["model"]["pool_mode"] == "soft"


@pytest.mark.parametrize("flush", [True, False])
@pytest.mark.slow
def test_the_training_job_flushes_denormal_floats_as_configured(make_config, monkeypatch, flush):
    """On by default: soft pooling's tiny weights made denormal floats, 3x slower on CPU."""
    import swwae.training.run

    calls = []
    monkeypatch.setattr(swwae.training.run.torch, "set_flush_denormal", lambda on: calls.append(on) or True)
    train(make_config(*([] if flush else ["flush_denormal=false"]), *ONE_BATCH, "model.widths=[8,16]"))
    assert calls == ([True] if flush else [])
