"""No host-device synchronisation on the training hot path: a training step reads nothing back
from the device (the non-finite loss check included), except at the steps where Lightning
logs and at the end of an epoch; a non-finite loss is still one error line naming its step,
and nothing is saved after it.

A sync is any op that needs a tensor's value on the host: ``.item()``, ``bool(t)``, ``if t``,
``.tolist()`` (``aten._local_scalar_dense``), ``nonzero`` and boolean-mask indexing (their
output size depends on the values). On the CPU they cost nothing, so the tests count them
with a ``TorchDispatchMode``, as they would run on a GPU."""

from __future__ import annotations

import collections
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from helpers.cli import last_error_line, run_cli
from helpers.config import DDP_QUICK, MODEL_CONFIGS
from helpers.faults import with_callback
from helpers.syncs import CountLaunches, CountSyncs, LaunchesPerBatch, SyncsPerBatch, SyncsPerValidationBatch
from swwae.bench.epoch_clock import HandLoop
from swwae.errors import NonFiniteError
from swwae.training.callbacks import EpochLines, LiveBar
from swwae.training.nonfinite import LossWatch
from swwae.training.run import train
from swwae.training.term_means import TermMeans

# reads of host-side tensors, which are no syncs on a GPU either: the optimiser's step counters
# (torch keeps them on the CPU for CUDA parameters too) and the batch sampler's indices into
# the images held in host memory (swwae.training.data)
HOST_SIDE = ("torch/optim/", "swwae/training/data/")


# the loss watch


def terms(**values) -> dict[str, torch.Tensor]:
    return {name: torch.tensor(value) for name, value in values.items()}


def test_the_watch_names_the_first_bad_step_and_its_non_finite_terms():
    watch = LossWatch()
    watch.record(terms(recon_mse=0.5, nll=2.0, loss=2.5), epoch=0, step=0)
    watch.check()  # all finite: nothing to say
    watch.record(terms(recon_mse=float("nan"), nll=2.0, loss=float("inf")), epoch=1, step=7)
    watch.record(terms(recon_mse=float("nan"), nll=float("nan"), loss=float("nan")), epoch=1, step=8)
    watch.record(terms(recon_mse=0.5, nll=2.0, loss=2.5), epoch=1, step=9)
    with pytest.raises(NonFiniteError) as err:
        watch.check()
    assert str(err.value) == (
        "non-finite loss in epoch 2, step 7: recon_mse=nan, loss=inf; lower model.lr or model.beta, or check the data"
    )
    watch.record(terms(recon_mse=0.5, nll=2.0, loss=2.5), epoch=1, step=10)
    with pytest.raises(NonFiniteError, match="^non-finite loss in epoch 2, step 7:"):
        watch.check()  # and at every later check (a save after the error is refused too)


def test_recording_a_step_reads_nothing_back():
    watch = LossWatch()
    with CountSyncs() as counted:
        for step in range(5):
            watch.record(terms(recon_mse=0.5 if step != 3 else float("nan"), loss=1.0), epoch=0, step=step)
    assert not counted.by_origin
    with (
        CountSyncs() as counted,
        pytest.raises(NonFiniteError, match="^non-finite loss in epoch 1, step 3: recon_mse=nan;"),
    ):
        watch.check()
    assert sum(counted.by_origin.values()) >= 1  # the one place it reads back


def test_every_process_stops_at_the_same_check():
    """With several processes, one that saw only finite losses stops too, when another did not."""
    watch = LossWatch()
    watch.record(terms(loss=1.0), epoch=0, step=0)
    watch.check(any_process=lambda bad: bad)  # nobody saw one
    with pytest.raises(NonFiniteError, match="^non-finite loss in another process; lower model.lr"):
        watch.check(any_process=lambda bad: True)


def test_term_means_are_the_epochs_batch_weighted_means_summed_without_a_read_back():
    """The training terms reach the loggers once an epoch (swwae.training.term_means): their
    means weighted by batch size, as Lightning's own epoch means, with no sync a step or at the end."""
    means = TermMeans()
    steps = [
        (terms(recon_mse=0.5, nll=2.0), 128),
        (terms(recon_mse=0.2, nll=1.0), 128),
        (terms(recon_mse=0.8, nll=4.0), 64),
    ]
    with CountSyncs() as counted:
        for values, batch in steps:
            means.add(values, batch)
        means_now = means.pop()
    assert not counted.by_origin
    got = {name: value.item() for name, value in means_now.items()}
    assert got == pytest.approx({"recon_mse": (64 + 25.6 + 51.2) / 320, "nll": (256 + 128 + 256) / 320})
    assert means.pop() == {}  # a fresh start: the next epoch's means are its own
    # under DDP, the means of every process's samples: another process with 32 samples of its own
    means.add(terms(recon_mse=0.5, nll=1.0), 128)
    other = torch.tensor([32 * 0.1, 32 * 3.0, 32.0])  # its sums, then its samples
    with CountSyncs() as counted:
        means_now = means.pop(lambda t: t + other)
    assert not counted.by_origin
    got = {name: value.item() for name, value in means_now.items()}
    assert got == pytest.approx({"recon_mse": (64 + 3.2) / 160, "nll": (128 + 96) / 160})
    means.add({}, 128)  # a network whose only term is the loss: nothing to log
    assert means.pop() == {}
    means.add(terms(recon_mse=0.5), 128)
    with pytest.raises(ValueError, match="^the terms changed within an epoch: recon_mse then nll$"):
        means.add(terms(nll=1.0), 128)


def test_a_long_epochs_term_means_are_folded_on_the_device_as_they_go(monkeypatch):
    """Every FOLD_EVERY steps the kept terms are summed into one vector (a long epoch holds no
    more than that many steps' tensors); the means are those of every step, nothing read back."""
    monkeypatch.setattr(TermMeans, "FOLD_EVERY", 4)
    means = TermMeans()
    values = [0.1 * i for i in range(10)]
    with CountSyncs() as counted:
        for i, value in enumerate(values):
            means.add(terms(loss=value), 8 if i < 9 else 2)
            assert len(means.steps) == (i + 1) % 4
        means_now = means.pop()
    assert not counted.by_origin
    expected = (8 * sum(values[:9]) + 2 * values[9]) / (8 * 9 + 2)
    assert means_now["loss"].item() == pytest.approx(expected)
    assert means.pop() == {}


def test_both_progress_bars_show_the_training_loss_read_only_when_they_show_it():
    """train/loss is logged without prog_bar=True (Lightning would read it back at once): the
    live bar adds the last logged step's, the epoch lines the epoch's, from the callback metrics."""
    trainer = SimpleNamespace(
        loggers=[],
        progress_bar_metrics={"val/acc": 0.5},
        callback_metrics={
            "train/loss_step": torch.tensor(0.25),
            "train/loss_epoch": torch.tensor(0.5),
            "val/acc": torch.tensor(0.5),
        },
    )
    assert LiveBar(refresh_rate=5).get_metrics(trainer, None) == {"val/acc": 0.5, "train/loss": 0.25}
    assert EpochLines().get_metrics(trainer, None) == {"val/acc": 0.5, "train/loss": 0.5}
    trainer.callback_metrics = {}  # before the first step
    assert LiveBar().get_metrics(trainer, None) == {"val/acc": 0.5}


def test_on_a_gpu_only_torchs_sync_warnings_count_not_its_notice_that_the_mode_is_a_prototype():
    """torch's sync debug mode warns "called a synchronizing CUDA operation" at each sync, and
    once a process, as the mode is first set, that it is a prototype: that notice, counted, made
    the first batch of a GPU test process seem to sync (tests/test_cuda.py, on an H200)."""
    spy = SyncsPerBatch("cuda")
    notice = "Synchronization debug mode is a prototype feature and does not yet detect all synchronizing operations"
    spy._note_sync(UserWarning(notice), UserWarning, "torch/cuda/__init__.py", 1270)
    assert spy._caught == []
    spy._note_sync(UserWarning("called a synchronizing CUDA operation"), UserWarning, "torch/nn/functional.py", 1)
    assert len(spy._caught) == 1 and spy._caught[0].startswith("cuda sync warning at torch/nn/functional.py:1 from ")


# through the training job


@pytest.mark.slow
@pytest.mark.parametrize("model", MODEL_CONFIGS)
def test_training_steps_read_nothing_back_between_logging_steps(make_config, monkeypatch, model):
    """Semi-supervised (labelled and unlabelled samples in every batch, so the NLL of the
    labelled ones) and with the progress bar's train/loss: steps 1, 2, 4, 5 read nothing back;
    step 3 (log_every_n_steps=3: the loss watch and Lightning's logger read there) and the
    last step (the end of the epoch) do."""
    spy = SyncsPerBatch(ignore=HOST_SIDE)
    with_callback(monkeypatch, spy)
    train(
        make_config(
            f"model={model}",
            "model.widths=[4]",
            "data.num_labels=100",
            "trainer.limit_train_batches=6",
            "trainer.log_every_n_steps=3",
            "trainer.limit_val_batches=1",
            "test=false",
        )
    )
    assert len(spy.batches) == 6
    assert [spy.batches[i] for i in (0, 1, 3, 4)] == [{}] * 4, spy.batches
    assert any(origin.startswith("swwae/training/nonfinite.py") for origin in spy.batches[2]), spy.batches[2]


@pytest.mark.slow
def test_validation_batches_read_nothing_back_until_the_epochs_end(make_config, monkeypatch):
    """Each validation batch queues its metrics' updates and logged loss where they are; they are
    read back when the epoch ends (the last batch's window runs into the image panels there): a GPU
    never drains its queue between validation batches."""
    spy = SyncsPerValidationBatch(ignore=HOST_SIDE)
    with_callback(monkeypatch, spy)
    train(make_config("model.widths=[4]", "trainer.limit_train_batches=1", "trainer.limit_val_batches=4", "test=false"))
    assert len(spy.batches) == 4
    assert spy.batches[:3] == [{}] * 3, spy.batches


@pytest.mark.slow
def test_with_the_data_on_the_device_no_step_reads_the_batch_order_back(make_config, monkeypatch):
    """data.on_device=true: the batches are gathered by index tensors where the images are
    (the host's indices are read no longer), augmented there: steps 1, 2, 4, 5 read nothing
    back, the data's code included."""
    spy = SyncsPerBatch(ignore=("torch/optim/",))
    with_callback(monkeypatch, spy)
    overrides = ["model.widths=[4]", "data.num_labels=100", "data.on_device=true", "data.augment=true"]
    train(make_config(*overrides, "trainer.limit_train_batches=6", "trainer.log_every_n_steps=3", "test=false"))
    assert len(spy.batches) == 6
    assert [spy.batches[i] for i in (0, 1, 3, 4)] == [{}] * 4, spy.batches


@pytest.mark.slow
def test_a_step_that_does_not_log_launches_the_hand_written_steps_device_work_and_lightnings_closure(
    make_config, monkeypatch
):
    """With the data on the device, a training step that does not log makes the device work of
    the plainest hand-written step on the same network (``swwae.bench.epoch_clock.HandLoop``:
    gather, forward, loss, backward, Adam) and at most three ops more, Lightning's closure: the loss
    divided by ``accumulate_grad_batches``, that division's gradient, and the loss's detached
    copy. On a GPU, where a small network's step is its launches, the job adds no kernel a step;
    the steps that log (``log_every_n_steps``) and end an epoch do more."""
    spy = LaunchesPerBatch()
    with_callback(monkeypatch, spy)
    overrides = ["model.widths=[4]", "data.on_device=true", "trainer.log_every_n_steps=3"]
    train(make_config(*overrides, "trainer.limit_train_batches=5", "trainer.limit_val_batches=1", "test=false"))
    hand = HandLoop(spy.module, spy.data)
    hand.start_epoch()
    hand.train_step()  # its first step makes Adam's state, as the job's first did
    with CountLaunches() as counted:
        hand.train_step()
    for step in (1, 3):  # step 0 makes Adam's state, step 2 logs, step 4 ends the epoch
        job = collections.Counter(spy.batches[step])
        extra = sum(job.values()) - sum(counted.by_origin.values())
        assert extra <= 3, (step, job - counted.by_origin, counted.by_origin - job)


@pytest.mark.slow
def test_a_nan_loss_between_checks_is_raised_at_the_next_one_naming_its_step(make_config, monkeypatch, tmp_path):
    """NaN weights after step 0, so a NaN loss at step 1; raised at the check after step 4
    (log_every_n_steps=4), before the epoch ends: no step after it is run, nothing is saved."""
    spy = SyncsPerBatch(ignore=HOST_SIDE)
    with_callback(monkeypatch, spy)
    with pytest.raises(
        NonFiniteError,
        match=r"^non-finite loss in epoch 1, step 1: recon_mse=nan, .*; "
        r"no checkpoint was saved$",
    ):
        train(
            make_config(
                "model.widths=[4]",
                "trainer.limit_train_batches=8",
                "trainer.log_every_n_steps=4",
                "+callbacks.poison._target_=helpers.faults.PoisonAt",
                "+callbacks.poison.epoch=0",
                "+callbacks.poison.batch=0",
            )
        )
    assert len(spy.batches) == 4
    assert not any(Path(tmp_path / "checkpoints").rglob("*.ckpt"))


def ddp_quick_run(tmp_path, *overrides: str):
    """``swwae train`` (the installed script, which Lightning runs again for the second process) under
    DDP on two CPU processes, a tiny network, everything under ``tmp_path``."""
    return run_cli(
        "train",
        *DDP_QUICK,
        "model.widths=[4]",
        "data.batch_size=16",
        *overrides,
        f"hydra.run.dir={tmp_path / 'run'}",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.checkpoint_dir={tmp_path / 'checkpoints'}",
        cwd=tmp_path,
        timeout=300,
        program=str(Path(sys.executable).with_name("swwae")),
    )


@pytest.mark.slow
def test_ddp_processes_stop_together_on_a_nan_loss_in_one_of_them(tmp_path):
    """Process 1 alone gets NaN weights after its first step: at the end of the epoch (the
    next check) both stop with one error line, process 0 included, which saw finite losses
    only (it would otherwise wait for process 1 at the next all-reduce)."""
    result = ddp_quick_run(
        tmp_path,
        "+callbacks.poison._target_=helpers.faults.PoisonAt",
        "+callbacks.poison.epoch=0",
        "+callbacks.poison.batch=0",
        "+callbacks.poison.rank=1",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert last_error_line(result).startswith("error: non-finite loss")
    assert "error: non-finite loss in another process" in result.stderr  # process 0
    assert "error: non-finite loss in epoch 1, step 1: " in result.stderr  # process 1
    assert not any(Path(tmp_path / "checkpoints").rglob("*.ckpt"))


@pytest.mark.slow
def test_ddp_processes_stop_together_when_one_saw_a_non_finite_loss_before_a_save(tmp_path):
    """Process 1 alone records an infinite loss (its weights finite, as after a grad scaler's
    skipped step), and the next save comes before the next check: a pre-emption at the end of
    that batch. Every process checks the loss at the save together: both stop with one error
    line and nothing is saved. A check of each process's own losses there stopped process 1 in
    the save, while process 0 wrote last.ckpt and waited for it at the save's barrier."""
    result = ddp_quick_run(
        tmp_path,
        "+callbacks.overflow._target_=helpers.faults.NonFiniteLossAt",
        "+callbacks.overflow.epoch=0",
        "+callbacks.overflow.batch=0",
        "+callbacks.overflow.rank=1",
        "+callbacks.stop._target_=helpers.faults.SignalAt",
        "+callbacks.stop.epoch=0",
        "+callbacks.stop.batch=0",
        "+callbacks.stop.signum=SIGTERM",
    )
    assert result.returncode == 2, result.stderr[-3000:]
    assert "error: non-finite loss in another process" in result.stderr  # process 0
    assert "error: non-finite loss in epoch 1, step 0: " in result.stderr  # process 1
    assert not any(Path(tmp_path / "checkpoints").rglob("*.ckpt"))
