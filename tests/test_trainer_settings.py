"""The trainer section (swwae.training.trainer_settings): every argument of the installed
Lightning's Trainer is taken and reaches the Trainer; a key it does not take is one line; the
values swwae relies on are checked, the counts of batches against the data before anything is
written; float64 and bfloat16 runs train."""

from __future__ import annotations

import inspect
import json
import math
from datetime import timedelta
from importlib.metadata import version
from types import SimpleNamespace

import lightning as L
import pytest
import torch
from lightning.pytorch.callbacks import LambdaCallback, Timer
from lightning.pytorch.demos.boring_classes import BoringModel
from packaging.version import Version

from helpers.cli import train_here
from swwae.errors import ConfigError
from swwae.training import lightning_api
from swwae.training.callbacks import EpochLines
from swwae.training.checkpoints import build_trainer, check_launcher, check_sync_batchnorm
from swwae.training.module import SWWAEModule
from swwae.training.run import train
from swwae.training.spec import check_config
from swwae.training.trainer_settings import TrainerSpec, check_epoch

LIGHTNING_DEFAULTS = {
    name: p.default for name, p in inspect.signature(L.Trainer.__init__).parameters.items() if name != "self"
}


def one_line(action) -> str:
    with pytest.raises(ConfigError) as err:
        action()
    assert "\n" not in str(err.value)
    return str(err.value)


def test_every_argument_of_lightnings_trainer_at_its_default_is_taken():
    settings = TrainerSpec.model_validate({"_target_": "lightning.pytorch.Trainer", **LIGHTNING_DEFAULTS})
    assert settings.model_dump(exclude_unset=True).keys() == {"target", *LIGHTNING_DEFAULTS}


def test_without_lightnings_source_lightning_is_asked(monkeypatch):
    monkeypatch.setattr(lightning_api, "source_tree", lambda *parts: None)
    for read in (lightning_api.trainer_arguments, lightning_api.precision_values):
        read.cache_clear()
    try:
        assert set(lightning_api.trainer_arguments()) == set(LIGHTNING_DEFAULTS)
        assert {"bf16-mixed", "64-true", 64} <= set(lightning_api.precision_values())
    finally:
        for read in (lightning_api.trainer_arguments, lightning_api.precision_values):
            read.cache_clear()


def test_arguments_the_schema_does_not_list_reach_the_trainer(make_config):
    spec = check_config(
        make_config(
            "+trainer.max_time={minutes: 1}",
            "+trainer.num_sanity_val_steps=0",
            "+trainer.enable_checkpointing=false",
        )
    )
    trainer = build_trainer(spec.trainer, [], [])
    timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
    assert timer._duration == timedelta(minutes=1).total_seconds()
    assert trainer.num_sanity_val_steps == 0 and trainer.checkpoint_callback is None


def test_a_profiler_the_config_names_prints_its_report_where_lightnings_info_lines_are_kept_off(tmp_path):
    result = train_here(tmp_path, "+trainer.profiler=simple", "trainer.limit_train_batches=1")
    assert result.returncode == 0, result.stderr
    assert "FIT Profiler Report" in result.stderr and "run_training_batch" in result.stderr
    assert "GPU available" not in result.stderr  # Lightning's banner: the job's own lines say what runs


def test_a_time_span_between_validations_reaches_a_lightning_that_takes_one_and_is_one_line_before(make_config):
    config = make_config("trainer.val_check_interval='00:00:00:02'")
    takes = Version(version("lightning")) >= Version("2.6.5")
    assert lightning_api.takes_time_intervals() is takes  # as read from its source
    if takes:
        assert build_trainer(check_config(config).trainer, [], [])._val_check_time_interval == 2.0
    else:
        with pytest.raises(ConfigError, match=r"^trainer.val_check_interval='00:00:00:02' is not allowed: a time"):
            check_config(config)


def test_the_trainer_calls_the_batch_hooks_a_callback_defines_and_skips_its_empty_ones(tmp_path):
    """Lightning calls a callback's hook only where it is callable: the job's Trainer sets each
    callback's empty per-batch hooks to None, and still runs at every batch those it defines."""

    class CountsBatches(L.Callback):
        batches = 0

        def on_train_batch_end(self, *args) -> None:
            self.batches += 1

    counts, starts = CountsBatches(), []
    lambdas = LambdaCallback(on_train_batch_start=lambda *args: starts.append(args[-1]))  # hooks of an instance
    settings = TrainerSpec.model_validate(
        {
            "_target_": "lightning.pytorch.Trainer",
            "max_steps": 3,
            "profiler": "simple",
            "default_root_dir": str(tmp_path),
            **dict(enable_checkpointing=False, enable_progress_bar=False, num_sanity_val_steps=0, limit_val_batches=1),
        }
    )
    trainer = build_trainer(settings, [], [counts, lambdas])
    trainer.fit(BoringModel())
    calls = {  # the profiler's records of the callback's hooks, by hook
        name.rpartition(".")[2]: len(times)
        for name, times in trainer.profiler.recorded_durations.items()
        if name.startswith(f"[Callback]{counts.state_key}.")
    }
    assert counts.batches == calls["on_train_batch_end"] == 3 and starts == [0, 1, 2]
    assert "on_train_batch_start" not in calls and "on_before_backward" not in calls
    assert calls["on_train_epoch_end"] == 1  # hooks called once an epoch or a run, as before


@pytest.mark.parametrize(
    "override, message",
    [
        ("+trainer.precison=64", "trainer.precison is not a setting; did you mean trainer.precision?"),
        ("+trainer.overfit_batches=1", "trainer.overfit_batches=1 is not allowed: swwae's loaders hand out whole"),
        ("trainer.val_check_interval='1 minute'", "trainer.val_check_interval='1 minute' is not allowed: an integer"),
        ("+trainer.max_time={minute: 1}", "trainer.max_time={'minute': 1} is not allowed: a duration"),
        ("trainer.limit_train_batches=0", "trainer.limit_train_batches=0 trains nothing"),
        ("trainer.limit_val_batches=0", "trainer.limit_val_batches=0 never validates, and validation picks best.ckpt"),
        ("trainer.check_val_every_n_epoch=21", "trainer.check_val_every_n_epoch=21 never validates in a run of"),
        (  # a step budget only shortens a run
            ("trainer.check_val_every_n_epoch=2", "trainer.max_steps=1000"),
            "trainer.check_val_every_n_epoch=2 never validates in a run of trainer.max_epochs=1",
        ),
        ("+trainer.fast_dev_run=true", "trainer.fast_dev_run=True is Lightning's smoke test"),
        ("trainer.precision=16-mixed", "trainer.precision=16-mixed is float16 autocast, which takes a GPU: on the"),
        ("~trainer", "trainer._target_ is missing: the trainer section names no Trainer"),
    ],
)
def test_a_trainer_value_swwae_cannot_use_is_one_line(make_config, override, message):
    overrides = (override,) if isinstance(override, str) else override
    assert one_line(lambda: check_config(make_config(*overrides))).startswith(message)


def cpu_trainer(**values) -> L.Trainer:
    return build_trainer(TrainerSpec.model_validate({"_target_": "lightning.pytorch.Trainer", **values}), [], [])


def test_a_strategy_lightning_does_not_know_is_one_line_naming_the_nearest():
    """Lightning's words were 'Error in call to target ...Trainer: ValueError(You selected an
    invalid strategy name: ...)', naming neither the key nor the name meant."""
    line = one_line(lambda: cpu_trainer(accelerator="cpu", strategy="dpp"))
    assert line.startswith("trainer.strategy=dpp is not a strategy of the installed Lightning; did you mean ddp? ")
    assert "Its strategies: auto, ddp, ddp_spawn," in line and "find_unused" not in line
    assert "; its strategies: auto, ddp," in one_line(lambda: cpu_trainer(accelerator="cpu", strategy="banana"))
    assert cpu_trainer(accelerator="cpu", devices=2, strategy="DDP").world_size == 2


def test_a_strategy_whose_processes_torch_multiprocessing_starts_is_one_line():
    """ddp_spawn and ddp_fork hand the first process bare weights as training ends, which the run's
    safe reader refused ('not written by swwae's train.py'): the whole run trained for nothing."""
    for strategy, start in (("ddp_spawn", "spawn"), ("ddp_fork", "fork"), ("ddp_notebook", "fork")):
        trainer = cpu_trainer(accelerator="cpu", devices=2, strategy=strategy)
        assert one_line(lambda t=trainer, s=strategy: check_launcher(t, s)).startswith(
            f"trainer.strategy={strategy} starts its processes with torch.multiprocessing ({start}), "
        )
    check_launcher(cpu_trainer(accelerator="cpu", devices=2, strategy="ddp"), "ddp")
    check_launcher(cpu_trainer(accelerator="cpu", devices=1), None)


def test_sync_batchnorm_on_the_cpu_in_a_network_with_batch_norm_is_one_line():
    """trainer=ddp's sync_batchnorm with model.batch_norm=true on the CPU stopped in torch's
    traceback as training began ('SyncBatchNorm layers only work with GPU modules')."""
    batch_norm = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    ddp = {"accelerator": "cpu", "strategy": "ddp", "devices": 2}
    line = one_line(lambda: check_sync_batchnorm(cpu_trainer(**ddp, sync_batchnorm=True), batch_norm))
    assert line.startswith("trainer.sync_batchnorm=true shares the batch norm statistics across GPUs, and this run")
    assert "add trainer.sync_batchnorm=false" in line
    check_sync_batchnorm(cpu_trainer(**ddp, sync_batchnorm=False), batch_norm)
    check_sync_batchnorm(cpu_trainer(**ddp, sync_batchnorm=True), torch.nn.Conv2d(1, 2, 3))  # nothing to sync
    check_sync_batchnorm(cpu_trainer(accelerator="cpu", sync_batchnorm=True), batch_norm)  # one process: no DDP


def test_a_config_without_a_trainer_section_is_one_line(make_config):
    assert one_line(lambda: check_config(make_config("~trainer", quick=False))) == (
        "trainer is missing: the config must set it"
    )


@pytest.mark.parametrize("precision", [64, "64-true", "bf16-true", "16-true", "bf16-mixed"])
def test_every_precision_of_lightning_is_taken(make_config, precision):
    assert check_config(make_config(f"trainer.precision={precision}")).trainer.precision == precision


# against the data


class Batches:
    """A data module whose loaders have these lengths."""

    def __init__(self, train=10, val=4, test=4):
        self.lengths = {"train": train, "val": val, "test": test}

    def __getattr__(self, name):
        split = name.removesuffix("_dataloader")
        return lambda: range(self.lengths[split])


def settings(**values) -> TrainerSpec:
    return TrainerSpec.model_validate({"_target_": "lightning.pytorch.Trainer", **values})


@pytest.mark.parametrize(
    "values, world_size, message",
    [
        ({"limit_train_batches": 0.05}, 1, "trainer.limit_train_batches=0.05 leaves no training batch: 0.05 of the 10"),
        ({"limit_val_batches": 0.2}, 1, "trainer.limit_val_batches=0.2 leaves no validation batch"),
        ({"limit_train_batches": 0.1}, 2, "trainer.limit_train_batches=0.1 leaves no training batch: 0.1 of the 5"),
        ({"val_check_interval": 11}, 1, "trainer.val_check_interval=11 is more than the 10 training batches"),
        ({"val_check_interval": 4, "limit_train_batches": 3}, 1, "trainer.val_check_interval=4 is more than the 3"),
        ({"val_check_interval": 6}, 2, "trainer.val_check_interval=6 is more than the 5 training batches of an epoch"),
        ({"limit_train_batches": 0.1}, 1, None),  # one batch
        ({"val_check_interval": 10, "limit_train_batches": 0.5}, 1, "trainer.val_check_interval=10 is more than the 5"),
        ({"val_check_interval": 11, "check_val_every_n_epoch": None}, 1, None),  # batches counted across epochs
        ({"val_check_interval": 11, "use_distributed_sampler": False}, 2, "trainer.val_check_interval=11 is more"),
        ({"max_steps": 9}, 1, None),  # validates at its last step, mid-epoch (the job stops the run there)
        ({"max_steps": 10}, 1, None),  # validates at the end of its last step's epoch
        ({"max_steps": 5, "accumulate_grad_batches": 2}, 1, None),  # 10 batches, 5 steps
        ({"max_steps": 2, "val_check_interval": 2}, 1, None),
        ({"max_steps": 9, "check_val_every_n_epoch": 2}, 1, "trainer.max_steps=9 ends the run before it first"),
        ({"max_steps": 12, "check_val_every_n_epoch": 2}, 1, None),  # stops in the 2nd epoch, which validates
        ({"max_steps": 5, "accumulate_grad_batches": 3, "check_val_every_n_epoch": 2}, 1, None),  # 4 steps an epoch
        ({"max_steps": 3, "accumulate_grad_batches": 3, "check_val_every_n_epoch": 2}, 1, "trainer.max_steps=3 ends"),
        pytest.param(
            {"val_check_interval": "00:00:01:00"},
            1,
            None,
            marks=pytest.mark.skipif(not lightning_api.takes_time_intervals(), reason="Lightning before 2.6.5"),
        ),
        pytest.param(  # each process's own clock: they would not validate at the same batch (a hang)
            {"val_check_interval": "00:00:01:00"},
            2,
            "trainer.val_check_interval='00:00:01:00': a time span under DDP",
            marks=pytest.mark.skipif(not lightning_api.takes_time_intervals(), reason="Lightning before 2.6.5"),
        ),
    ],
)
def test_the_batch_settings_are_checked_against_the_data(values, world_size, message):
    check = lambda: check_epoch(settings(**values), Batches(), world_size)  # noqa: E731
    if message is None:
        check()
    else:
        assert one_line(check).startswith(message)


@pytest.mark.parametrize("global_step, stops", [(4, False), (5, True)])
def test_the_step_that_reaches_max_steps_mid_epoch_stops_the_run_so_that_lightning_validates_it(global_step, stops):
    """Lightning ends a run at max_steps mid-epoch without validating: best.ckpt and the reported
    metrics missed every step since the epoch began. Asked to stop, it validates first."""
    module = SWWAEModule(widths=[4])
    trainer = SimpleNamespace(
        max_steps=5, global_step=global_step, num_training_batches=10, log_every_n_steps=50, should_stop=False
    )
    module._trainer = trainer
    module.on_train_batch_end(None, None, global_step - 1)
    assert trainer.should_stop is stops


def test_an_epoch_line_shows_its_own_epochs_metrics_only(capsys):
    """check_val_every_n_epoch=2: the line of an epoch that did not validate showed the last
    epoch's validation metrics as its own; an epoch cut short (max_time, max_steps), the last
    epoch's training loss: the module logs a cut epoch's means in its own hook, after the callbacks'."""
    trainer = SimpleNamespace(loggers=[], callbacks=[], progress_bar_metrics={"val/acc": 0.5}, max_epochs=3)
    trainer.is_global_zero = True
    module = SimpleNamespace(
        log_epoch_means=lambda: trainer.callback_metrics.update({"train/loss_epoch": torch.tensor(0.25)})
    )
    lines = EpochLines()
    for epoch, validates in enumerate([True, False]):
        trainer.current_epoch, trainer.sanity_checking, trainer.callback_metrics = epoch, False, {}
        lines.on_train_epoch_start(trainer, module)
        if validates:
            lines.on_validation_end(trainer, module)
        lines.on_train_epoch_end(trainer, module)
    shown = [line.split(" (")[0] for line in capsys.readouterr().out.splitlines()]
    assert shown == ["epoch 1/3: train/loss=0.2500 val/acc=0.5000", "epoch 2/3: train/loss=0.2500"]


def test_a_batch_setting_the_data_cannot_meet_stops_the_job_before_anything_is_written(make_config, tmp_path):
    with pytest.raises(ConfigError, match="trainer.val_check_interval=4 is more than the 3 training batches"):
        train(make_config("trainer.val_check_interval=4"))  # debug=quick: 3 batches an epoch
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "logs").exists()
    assert list((tmp_path / "output").iterdir()) == []  # the run's output folder, as Hydra made it


# precision


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["64-true"])  # bf16-true takes the same path (module.dtype), slower
def test_a_run_in_float64_trains_with_finite_metrics(make_config, tmp_path, precision):
    cfg = make_config(  # with every callback that hands the network images of its own
        "model.widths=[4,8]",
        f"trainer.precision={precision}",
        "callbacks.knn_accuracy.every_n_epochs=1",
        "callbacks.embeddings.enabled=true",
        "callbacks.embeddings.num_images=16",
    )
    assert math.isfinite(train(cfg))
    metrics = json.loads((tmp_path / "output" / "metrics.json").read_text())["metrics"]
    assert {"val/recon_mse", "val/knn_acc", "test/recon_mse"} <= set(metrics)
    assert all(math.isfinite(value) for value in metrics.values()), metrics
