"""How the training job behaves in the hands of a user or a cluster: killed and resumed
(bit-identical), a repeated ``resume=true`` on a finished run, Ctrl-C, progress output into a
file, NaN losses, determinism, and bad input as one line before any training."""

from __future__ import annotations

import json
import shlex
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hydra.utils import instantiate
from lightning.pytorch.trainer.states import TrainerFn

from helpers.cli import last_error_line, train_cli, train_here
from helpers.config import MODEL_CONFIGS, QUICK, ROOT
from swwae.errors import ConfigError, DataError, NonFiniteError
from swwae.training.checkpoints import load_model
from swwae.training.run import stopped_where, train

RUN = "swwae_hard_mnist_sample_seed0"
SMALL = ["model.widths=[4]", "trainer.max_epochs=2"]


def final_metrics(tmp: Path, name: str) -> dict:
    """A run's metrics.json without what differs between identical runs in other folders."""
    summary = json.loads((tmp / "outputs" / name / "metrics.json").read_text())
    summary["metrics"].pop("train_time_s")
    summary.pop("checkpoint")
    summary.pop("checkpoint_sha256")  # the file's bytes hold its run's own paths: the weights are compared
    return summary


@pytest.mark.slow
def test_resume_on_a_finished_run_reports_its_metrics_and_exits_0(tmp_path, recwarn):
    first = train_here(tmp_path, *SMALL, name="first")
    assert first.returncode == 0, first.stderr[-2000:]
    done = json.loads((tmp_path / "outputs" / "first" / "metrics.json").read_text())

    again = train_here(tmp_path, *SMALL, "resume=true", name="again")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "error" not in again.stderr.lower()
    line = again.stdout.strip().splitlines()[-1]
    assert line.startswith(f"done: {RUN} had already finished: 2 of 2 epochs trained; ")
    assert f"test/acc={done['metrics']['test/acc']:.4f}" in line and "first/metrics.json" in line
    assert json.loads((tmp_path / "outputs" / "again" / "metrics.json").read_text())["metrics"] == done["metrics"]

    (tmp_path / "outputs" / "first" / "metrics.json").unlink()  # killed before it wrote its metrics
    third = train_here(tmp_path, *SMALL, "resume=true", name="third", env={"PYTHONWARNINGS": "default"})
    assert third.returncode == 0, third.stderr[-2000:]
    assert "(evaluated again from best.ckpt); nothing was retrained or logged again" in third.stdout
    assert not [w for w in recwarn if "callbacks used to create the checkpoint" in str(w.message)]  # Lightning's
    metrics = json.loads((tmp_path / "outputs" / "third" / "metrics.json").read_text())["metrics"]
    assert metrics["test/acc"] == done["metrics"]["test/acc"]
    assert metrics["test/recon_mse"] == done["metrics"]["test/recon_mse"]
    assert metrics["val/recon_mse"] == done["metrics"]["val/recon_mse"]  # the last epoch's weights


@pytest.mark.slow
def test_ctrl_c_says_what_is_kept_and_how_to_continue_and_exits_130(tmp_path):
    stopped = train_cli(
        tmp_path,
        *SMALL,
        "+callbacks.interrupt._target_=helpers.faults.InterruptAt",
        "+callbacks.interrupt.epoch=1",
        "+callbacks.interrupt.batch=1",
        name="stopped",
    )
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("interrupted in epoch 2 (step 4); ")
    assert f"checkpoints/{RUN}/last.ckpt (after epoch 1, step 3) is kept" in line
    assert "Detected KeyboardInterrupt" not in stopped.stderr + stopped.stdout and "Traceback" not in stopped.stderr
    command = line.split("continue with: ", 1)[1]
    assert command.startswith(f"python {ROOT / 'train.py'} ") and command.endswith(" resume=true")  # as started
    assert "model.widths=[4]" in command and "callbacks.interrupt" in command

    # the command it prints continues the run (here without the interrupting callback)
    args = [a for a in shlex.split(command)[2:] if "callbacks.interrupt" not in a]
    resumed = train_here(tmp_path, *args, name="resumed", quick=[])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((tmp_path / "outputs" / "resumed" / "metrics.json").read_text())["epochs"] == 2


@pytest.mark.parametrize(
    "fn, where",
    [
        (TrainerFn.FITTING, "in epoch 2 (step 40)"),
        (TrainerFn.TESTING, "while testing, after training ended (step 40)"),  # not "in epoch 2" of 1
    ],
)
def test_ctrl_c_names_the_epoch_it_stopped_in_or_the_test_after_training(fn, where):
    trainer = SimpleNamespace(state=SimpleNamespace(fn=fn), current_epoch=1, global_step=40)
    assert stopped_where(trainer) == where


@pytest.mark.slow
def test_ctrl_c_before_training_is_one_line_too(tmp_path):
    stopped = train_cli(
        tmp_path,
        "model.widths=[4]",
        "+callbacks.interrupt._target_=helpers.faults.InterruptAt",
        "+callbacks.interrupt.epoch=0",
        "+callbacks.interrupt.batch=0",
        name="early",
    )
    assert stopped.returncode == 130
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("interrupted in epoch 1 (step 0); no checkpoint was saved; continue with: python ")
    assert shlex.split(line.split("continue with: ", 1)[1]) == [
        "python",
        str(ROOT / "train.py"),
        *(arg for arg in QUICK if arg != "resume=auto"),  # the command's own resume= gives way to resume=true
        "model.widths=[4]",
        "+callbacks.interrupt._target_=helpers.faults.InterruptAt",
        "+callbacks.interrupt.epoch=0",
        "+callbacks.interrupt.batch=0",
        "resume=true",
    ]


@pytest.mark.slow
def test_output_to_a_file_is_one_line_per_epoch(tmp_path):
    """The console of a run: one line an epoch, then its done: line, and nothing else (no
    banner, tips, model summary, warnings or restore lines of Lightning's: they come with
    verbose=true)."""
    result = train_here(tmp_path, "model.widths=[4]", "trainer.max_epochs=3", "callbacks.progress_bar.refresh_rate=5")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stdout + result.stderr and result.stderr.strip() == "", result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    for line in lines[:3]:
        assert "train/loss=" in line and "val/recon_mse=" in line and "val/acc=" in line and line.endswith(" s)")
    assert lines[3].startswith("done: ") and len(lines) == 4
    loud = train_here(tmp_path, "model.widths=[4]", "seed=1", "verbose=true", name="loud")  # a run of its own
    assert loud.returncode == 0 and "Total params" in loud.stdout + loud.stderr, loud.stderr[-2000:]


# kill and resume


# dropout draws from the global generator: the resumed run must replay it too
REPRO = ["model.widths=[8]", "model.dropout=0.2", "trainer.max_epochs=2", "trainer.deterministic=true", "seed=3"]


@pytest.mark.slow
def test_sigkill_holding_the_lock_then_the_same_command_resumes_as_if_never_stopped(make_config, tmp_path):
    train(make_config(*REPRO))  # the uninterrupted run, here: tmp_path/{checkpoints,output}
    expected = json.loads((tmp_path / "output" / "metrics.json").read_text())
    expected["metrics"].pop("train_time_s")
    expected.pop("checkpoint")
    expected.pop("checkpoint_sha256")
    reference = torch.load(tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed3" / "last.ckpt", weights_only=True)[
        "state_dict"
    ]

    broken = tmp_path / "broken"
    broken.mkdir()
    killed = train_cli(
        broken,
        *REPRO,
        "+callbacks.kill._target_=helpers.faults.KillAt",
        "+callbacks.kill.epoch=1",
        "+callbacks.kill.batch=1",
        name="killed",
    )
    assert killed.returncode == -signal.SIGKILL
    last = broken / "checkpoints" / "swwae_hard_mnist_sample_seed3" / "last.ckpt"
    assert torch.load(last, weights_only=True)["epoch"] == 0  # the end of epoch 0, the last one saved
    owner = broken / "checkpoints" / ".swwae_hard_mnist_sample_seed3.owner.json"
    assert json.loads(owner.read_text())["pid"] > 0  # it died holding the run's lock: the kernel released it

    resumed = train_here(broken, *REPRO, name="resumed")  # the same command: resume=auto takes the lock, continues
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resume=auto: continuing this run from" in resumed.stdout + resumed.stderr
    assert not owner.exists()  # released at the end
    got = final_metrics(broken, "resumed")
    assert got["epochs"] == expected["epochs"] == 2
    assert got == expected  # bit for bit: every metric, val and test
    state = torch.load(last, weights_only=True)["state_dict"]
    assert state.keys() == reference.keys() and all(torch.equal(state[k], reference[k]) for k in reference)


# NaN and infinite losses


@pytest.mark.slow
def test_nan_loss_is_one_error_line_and_keeps_the_last_good_checkpoint(tmp_path):
    result = train_here(
        tmp_path,
        "model.widths=[8]",
        "trainer.max_epochs=2",
        "+callbacks.poison._target_=helpers.faults.PoisonAt",
        "+callbacks.poison.epoch=1",
        "+callbacks.poison.batch=0",
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = tmp_path / "checkpoints" / RUN / "last.ckpt"
    assert last_error_line(result) == (
        "error: non-finite loss in epoch 2, step 4: recon_mse=nan, nll=nan, loss=nan; lower model.lr or model.beta, "
        f"or check the data; checkpoints/{RUN}/last.ckpt (after epoch 1, step 3) is kept"
    )
    module, _ = load_model(last)  # intact and loadable: the end of epoch 0
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert torch.load(last, weights_only=True)["epoch"] == 0


@pytest.mark.slow
def test_weights_that_blow_up_at_the_end_of_an_epoch_never_reach_last_ckpt(make_config, tmp_path):
    """NaN weights after the last step of epoch 1: validation runs on them before any
    training step can notice, and ModelCheckpoint would then save them over last.ckpt."""
    with pytest.raises(NonFiniteError, match=r"^non-finite weights in epoch 2, step 6 \(net\.encoders") as err:
        train(
            make_config(
                "model.widths=[8]",
                "trainer.max_epochs=2",
                "+callbacks.poison._target_=helpers.faults.PoisonAt",
                "+callbacks.poison.epoch=1",
                "+callbacks.poison.batch=2",
            )
        )
    last = tmp_path / "checkpoints" / RUN / "last.ckpt"
    assert str(err.value).endswith(f"{last} (after epoch 1, step 3) is kept")
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["epoch"] == 0 and all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


# determinism


@pytest.mark.parametrize("model", MODEL_CONFIGS)
@pytest.mark.slow
def test_every_model_config_is_bit_reproducible_under_deterministic_algorithms(make_config, model):
    """What ``trainer.deterministic=true`` switches on: no op of any model config raises
    under ``torch.use_deterministic_algorithms(True)``, and the loss and every gradient
    come out bit-identical twice (dropout on, so the random stream matters too)."""
    cfg = make_config(
        f"model={model}",
        "model.widths=[8,16]",
        "model.dropout=0.2",
        "model.classifier_dropout=0.2",
        "model.batch_norm=true",
    )
    x = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    y = torch.tensor([0, 1, 2, -1, -1, 5])

    def one_step():
        torch.manual_seed(0)
        module = instantiate(cfg.model, image_shape=(1, 28, 28), num_classes=10, _convert_="all")
        loss = module.losses(module(x), x, y)["loss"]
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in module.parameters() if p.grad is not None]

    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        (loss_a, grads_a), (loss_b, grads_b) = one_step(), one_step()
    finally:
        torch.use_deterministic_algorithms(was)
    assert torch.isfinite(loss_a) and torch.equal(loss_a, loss_b)
    assert len(grads_a) == len(grads_b) > 0 and all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))


@pytest.mark.slow
def test_two_deterministic_runs_with_the_same_seed_give_identical_metrics(make_config, tmp_path):
    args = (
        "model=swwae_soft",
        "model.widths=[8]",
        "model.dropout=0.2",
        "trainer.deterministic=true",
        "trainer.max_epochs=1",
        "seed=7",
    )
    runs = []
    for resume in ("auto", "false"):  # the second trains again (the same command would report the first)
        started = time.perf_counter()
        train(make_config(*args, f"resume={resume}"))
        elapsed = time.perf_counter() - started
        summary = json.loads((tmp_path / "output" / "metrics.json").read_text())
        assert 0 < summary["metrics"].pop("train_time_s") <= elapsed  # testing best.ckpt adds no time of its own
        summary.pop("checkpoint_sha256")  # the file holds its save's own state, the metrics are compared
        runs.append(summary)
    assert "reported_again" not in runs[1]
    assert runs[0] == runs[1] and len(runs[0]["metrics"]) >= 4


# bad input: one line, before any training


def write_mnist_files(root: Path, which: int, content: bytes) -> Path:
    folder = root / "MNIST" / "raw"
    folder.mkdir(parents=True, exist_ok=True)
    names = ["train-images-idx3-ubyte", "train-labels-idx1-ubyte", "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"]
    for name in names[:which]:
        (folder / name).write_bytes(content)
    return folder


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["model.widths=[8,8,8,8,8]"], r"model stage 5 of 5: its 3x3 conv kernel is larger than the 1x1 maps it meets"),
        (["model=wavelet", "model.pool_size=3"], "power-of-two"),
        (["model.pool_padding=2"], "padding must be between 0 and kernel_size // 2"),
        (["seed=-1"], r"seed must be an integer in 0\.\.4294967295"),
        (["optimized_metric=val/nope"], "optimized_metric=val/nope is not a validation metric of this model"),
        (
            ["optimized_metric=val/acc", "optimized_mode=max", "model.lambda_nll=0"],
            "choose one of val/loss, val/recon_mse$",
        ),
        (["optimized_mode=up"], "optimized_mode must be min or max"),
        (["trainer.devices=0"], r"^trainer.devices=0 on the CPU: there it is a number of processes, 1 or more"),
        (["+trainer.max_epoch=3"], r"^trainer.max_epoch is not a setting; did you mean trainer.max_epochs\?$"),
        (
            ["callbacks.reconstruction_images._target_=swwae.training.callbacks.Nope"],
            "Error locating target 'swwae.training.callbacks.Nope'",
        ),
        (
            ["trainer.max_epochs=0"],
            r"^trainer.max_epochs=0 trains nothing: give it at least 1 \(to evaluate a checkpoint",
        ),
        (["trainer.max_steps=0"], r"^trainer.max_steps=0 trains nothing"),
        (["data.num_labels=7"], "^data.num_labels=7 is fewer than the 10 classes of mnist_sample: every class needs"),
        (["resume=maybe"], "^resume='maybe' is unknown; choose one of auto, true, false$"),
    ],
)
@pytest.mark.slow
def test_more_bad_values_are_one_line_before_any_training(make_config, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        train(make_config("model.widths=[8]", *overrides))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "output" / "metrics.json").exists()


@pytest.mark.parametrize(
    "which, content, message",
    [
        (2, b"", "files not found"),  # a download that stopped half-way: two files of four
        (4, b"\x00\x00\x08\x03 not an idx file", "look partial or corrupt"),
        (4, b"", "look partial or corrupt"),
    ],
)
def test_a_data_root_with_partial_or_corrupt_files_is_one_line(make_config, tmp_path, which, content, message):
    folder = write_mnist_files(tmp_path / "data", which, content)
    with pytest.raises(DataError, match=message) as err:
        train(make_config("data=mnist", f"data.root={tmp_path / 'data'}", "data.download=false"))
    assert "\n" not in str(err.value) and str(folder) in str(err.value) and "data=mnist_sample" in str(err.value)
    assert not (tmp_path / "checkpoints").exists()


@pytest.mark.slow
def test_the_done_line_shows_the_monitored_metric_when_the_run_is_not_tested(make_config, capsys):
    train(make_config("model.widths=[4]", "test=false"))
    line = capsys.readouterr().out.strip().splitlines()[-1]
    assert line.startswith("done: swwae_hard_mnist_sample_seed0: val/recon_mse=0.") and "test/" not in line
