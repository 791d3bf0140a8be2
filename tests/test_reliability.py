"""Reliability (docs/architecture.md 5): runs survive SIGKILL and resume exactly, checkpoint
writes are atomic, bad checkpoints and NaN losses end in one clear error line with nothing
saved lost, deterministic runs repeat bit for bit, and the pooling survives extreme inputs.

The fault-injection callbacks below are test-only; subprocess runs load them from this
module through ``+callbacks.<name>._target_=test_reliability.<Class>``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hydra.core.global_hydra import GlobalHydra
from hydra.utils import instantiate

from conftest import MODEL_CONFIGS, QUICK, ROOT, compose_config
from helpers.pooling import geometries, soft_reference, windows
from scripts.evaluate import main as evaluate_main
from swwae.training.checkpoint_io import AtomicCheckpointIO, atomic_torch_save, remove_stale_temp_files
from swwae.training.checkpoints import load_model
from swwae.errors import CheckpointError, ConfigError, DataError, NonFiniteError
from swwae.pooling import Unpool, WhatWherePool
from swwae.training.run import build_trainer, train

TESTS = Path(__file__).resolve().parent
RUN = "swwae_hard_mnist_sample_seed0"  # run_name of the default config with seed=0


# test-only fault injection


class KillAt(L.Callback):
    """SIGKILL this very process at the start of training batch ``batch`` of ``epoch``:
    no handler, no cleanup, like the OOM killer or a pre-empted node."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


class PoisonAt(L.Callback):
    """Fill the first parameter with NaN after training batch ``batch`` of ``epoch``
    (after its optimizer step): the next forward pass then yields a NaN loss."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            with torch.no_grad():
                next(module.parameters()).fill_(float("nan"))


# helpers


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def train_cli(tmp: Path, *overrides, name: str = "run", timeout: int = 300) -> subprocess.CompletedProcess:
    """``python train.py`` in a subprocess, everything under ``tmp``, QUICK settings."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", HYDRA_FULL_ERROR="0",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, str(ROOT / "train.py"), *QUICK, f"hydra.run.dir={tmp / 'outputs' / name}",
            f"paths.checkpoint_dir={tmp / 'checkpoints'}", f"paths.log_dir={tmp / 'logs'}", *overrides]
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=timeout)


def final_metrics(tmp: Path, name: str) -> dict:
    """A run's metrics.json without what differs between identical runs in other folders."""
    summary = json.loads((tmp / "outputs" / name / "metrics.json").read_text())
    summary["metrics"].pop("train_time_s")
    summary.pop("checkpoint")
    return summary


def last_error_line(result: subprocess.CompletedProcess) -> str:
    return result.stderr.strip().splitlines()[-1]


# kill and resume


# dropout draws from the global generator: the resumed run must replay it too
REPRO = ["model.widths=[8]", "model.dropout=0.2", "trainer.max_epochs=2", "trainer.deterministic=true", "seed=3"]


def test_sigkill_mid_epoch_then_resume_matches_an_uninterrupted_run(make_config, tmp_path):
    train(make_config(*REPRO))  # the uninterrupted run, here: tmp_path/{checkpoints,output}
    expected = json.loads((tmp_path / "output" / "metrics.json").read_text())
    expected["metrics"].pop("train_time_s")
    expected.pop("checkpoint")
    reference = torch.load(tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed3" / "last.ckpt",
                           weights_only=True)["state_dict"]

    broken = tmp_path / "broken"
    broken.mkdir()
    killed = train_cli(broken, *REPRO, "+callbacks.kill._target_=test_reliability.KillAt",
                       "+callbacks.kill.epoch=1", "+callbacks.kill.batch=1", name="killed")
    assert killed.returncode == -signal.SIGKILL
    last = broken / "checkpoints" / "swwae_hard_mnist_sample_seed3" / "last.ckpt"
    assert torch.load(last, weights_only=True)["epoch"] == 0  # the end of epoch 0, the last one saved

    resumed = train_cli(broken, *REPRO, "resume=true", name="resumed")
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    got = final_metrics(broken, "resumed")
    assert got["epochs"] == expected["epochs"] == 2
    assert got == expected  # bit for bit: every metric, val and test
    state = torch.load(last, weights_only=True)["state_dict"]
    assert state.keys() == reference.keys() and all(torch.equal(state[k], reference[k]) for k in reference)


# atomic checkpoint writes


def test_a_sigkill_during_a_save_leaves_the_old_checkpoint_or_the_new_one(tmp_path):
    """Kill a process that saves 1 MB checkpoints back to back, at random moments, a dozen
    times: the file always loads and holds one whole checkpoint. (Plain ``torch.save`` in
    the same loop leaves a truncated file after nearly every kill.)"""
    path = tmp_path / "last.ckpt"
    # tensors made before the fork: a forked child must not enter torch's intra-op thread pool
    weights = [torch.randn(250_000, generator=torch.Generator().manual_seed(i)) for i in range(2)]
    totals = [w.sum() for w in weights]
    atomic_torch_save({"epoch": -1, "weights": weights[1], "total": totals[1]}, path)
    rng = torch.Generator().manual_seed(0)
    epochs, killed_mid_save = set(), 0
    for _ in range(12):
        pid = os.fork()
        if pid == 0:  # the child: save until killed
            try:
                torch.set_num_threads(1)
                for epoch in range(10**6):
                    atomic_torch_save({"epoch": epoch, "weights": weights[epoch % 2], "total": totals[epoch % 2]}, path)
            finally:
                os._exit(0)
        started, seen = time.monotonic(), path.stat().st_mtime_ns
        while path.stat().st_mtime_ns == seen and time.monotonic() - started < 30:  # one save done
            time.sleep(0.002)
        time.sleep(0.02 * torch.rand(1, generator=rng).item())  # then somewhere in the next ones
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        checkpoint = torch.load(path, weights_only=True)  # never truncated...
        assert torch.equal(checkpoint["weights"].sum(), checkpoint["total"])  # ...nor mixed
        epochs.add(checkpoint["epoch"])
        assert len(list(tmp_path.glob(".last.ckpt.tmp-*"))) <= 1  # at most the one being written
        killed_mid_save += len(remove_stale_temp_files(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert epochs - {-1}  # the children did replace the file
    print(f"{killed_mid_save} of 12 kills landed in the middle of a save")


def test_a_failed_save_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    """A save that dies half-way (disk full, an exception in torch.save) leaves the old
    file in place and no temp file behind."""
    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 0}, path)
    before = sha(path)

    def half_a_save(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", half_a_save)
    with pytest.raises(OSError, match="No space"):
        io.save_checkpoint({"epoch": 1}, path)
    assert sha(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_training_saves_through_the_atomic_checkpoint_io(make_config):
    trainer = build_trainer(make_config("model.widths=[8]"), [], [])
    assert isinstance(trainer.strategy.checkpoint_io, AtomicCheckpointIO)


# resuming from what is there


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """One short run's checkpoints folder (model.widths=[8], one epoch), trained once for
    the tests below; each copies it with ``copy_run``."""
    root = tmp_path_factory.mktemp("trained")
    train(compose_config(root, ["model.widths=[8]"]))
    GlobalHydra.instance().clear()
    return root / "checkpoints" / RUN


def copy_run(trained_run: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "checkpoints" / RUN
    shutil.copytree(trained_run, folder)
    return folder


def test_resume_falls_back_to_best_when_last_is_truncated(make_config, tmp_path, caplog):
    train(make_config("model.widths=[8]", "trainer.max_epochs=2"))
    folder = tmp_path / "checkpoints" / RUN
    best_epoch = torch.load(folder / "best.ckpt", weights_only=True)["epoch"]
    data = (folder / "last.ckpt").read_bytes()
    (folder / "last.ckpt").write_bytes(data[: len(data) // 2])  # a save cut short by an old writer
    (folder / ".last.ckpt.tmp-123-abcd").write_bytes(data[:100])  # a kill mid-save, with this writer

    with caplog.at_level("WARNING"):
        train(make_config("model.widths=[8]", "trainer.max_epochs=3", "resume=true"))
    assert "cannot resume from last.ckpt" in caplog.text and "unreadable" in caplog.text
    assert f"resuming from {folder / 'best.ckpt'} (epoch {best_epoch}) instead" in caplog.text
    assert "holds a cosine schedule over 2 epochs; this run has trainer.max_epochs=3" in caplog.text
    assert not (folder / ".last.ckpt.tmp-123-abcd").exists()
    last = torch.load(folder / "last.ckpt", weights_only=True)  # whole again
    assert last["global_step"] == 9  # 3 epochs of 3 batches: none lost, none twice


@pytest.mark.parametrize("damage", ["truncated", "empty", "foreign"])
def test_resume_with_no_checkpoint_that_reads_back_is_one_error_and_deletes_nothing(make_config, tmp_path, damage,
                                                                                    trained_run):
    folder = copy_run(trained_run, tmp_path)
    for path in folder.glob("*.ckpt"):
        if damage == "truncated":
            path.write_bytes(path.read_bytes()[:5000])
        elif damage == "empty":
            path.write_bytes(b"")
        else:  # a plain state dict from some other project
            torch.save({"weight": torch.ones(3)}, path)
    hashes = {p.name: sha(p) for p in folder.iterdir()}
    with pytest.raises(CheckpointError, match="resume=true but no checkpoint in .* reads back") as err:
        train(make_config("model.widths=[8]", "resume=true"))
    assert "\n" not in str(err.value) and "last.ckpt: " in str(err.value) and "best.ckpt: " in str(err.value)
    assert {p.name: sha(p) for p in folder.iterdir()} == hashes


@pytest.mark.parametrize(
    "change, message",
    [
        ("model.widths=[8,16]", r"different model config \(model.widths: \[8\] -> \[8, 16\]\)"),
        ("model.pool_mode=soft", r"different model config \(model.pool_mode: hard -> soft\)"),
        ("data.num_labels=100", r"different data config \(data.num_labels: None -> 100\)"),
    ],
)
def test_resume_with_another_config_is_one_clear_error(make_config, tmp_path, change, message, trained_run):
    folder = copy_run(trained_run, tmp_path)
    hashes = {p.name: sha(p) for p in folder.iterdir()}
    with pytest.raises(CheckpointError, match=message) as err:
        train(make_config("model.widths=[8]", change, "resume=true"))
    assert str(err.value).startswith(f"{folder / 'last.ckpt'} was trained with a different")
    assert str(err.value).endswith("use another run_name or resume=false") and "\n" not in str(err.value)
    assert {p.name: sha(p) for p in folder.iterdir()} == hashes  # nothing touched


# evaluation of bad checkpoints


@pytest.mark.parametrize("damage", ["missing", "truncated", "empty", "random bytes", "foreign state dict",
                                    "pickled object", "other model"])
def test_evaluate_a_bad_checkpoint_is_one_error_line(tmp_path, capsys, damage, trained_run):
    path = tmp_path / "model.ckpt"
    if damage in ("truncated", "other model"):
        good = trained_run / "last.ckpt"
        if damage == "truncated":
            path.write_bytes(good.read_bytes()[:-100])
        else:  # hparams of one model, weights of another
            checkpoint = torch.load(good, weights_only=True)
            checkpoint["hyper_parameters"]["widths"] = [16]
            torch.save(checkpoint, path)
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "random bytes":  # seeds 2 and 14 once failed the unpickler with an IndexError
        for seed in range(40):
            path.write_bytes(random.Random(seed).randbytes(5000))
            with pytest.raises(CheckpointError, match="is unreadable|not written by swwae"):
                load_model(path)
    elif damage == "foreign state dict":
        torch.save({"state_dict": {"w": torch.ones(2)}}, path)
    elif damage == "pickled object":
        torch.save({"optimizer": torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)}, path)
    capsys.readouterr()
    assert evaluate_main([str(path), "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith(f"error: checkpoint {path} "), err
    assert not (tmp_path / "x.png").exists()


# NaN and infinite losses


def test_evaluate_a_bad_option_is_one_error_line(tmp_path, capsys):
    assert evaluate_main([str(tmp_path / "best.ckpt"), "--split", "train"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()  # not argparse's usage, then the error
    assert line.startswith("error: argument --split: invalid choice: 'train'")


def test_nan_loss_is_one_error_line_and_keeps_the_last_good_checkpoint(tmp_path):
    result = train_cli(tmp_path, "model.widths=[8]", "trainer.max_epochs=2",
                       "+callbacks.poison._target_=test_reliability.PoisonAt",
                       "+callbacks.poison.epoch=1", "+callbacks.poison.batch=0")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    last = tmp_path / "checkpoints" / RUN / "last.ckpt"
    assert last_error_line(result) == (
        "error: non-finite loss at epoch 1, step 4: recon_mse=nan, nll=nan, loss=nan; lower model.lr or model.beta, "
        f"or check the data; {last} (epoch 0, step 3) is kept"
    )
    module, _ = load_model(last)  # intact and loadable: the end of epoch 0
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert torch.load(last, weights_only=True)["epoch"] == 0


def test_weights_that_blow_up_at_the_end_of_an_epoch_never_reach_last_ckpt(make_config, tmp_path):
    """NaN weights after the last step of epoch 1: validation runs on them before any
    training step can notice, and ModelCheckpoint would then save them over last.ckpt."""
    with pytest.raises(NonFiniteError, match=r"^non-finite weights at epoch 1, step 6 \(net\.encoders") as err:
        train(make_config("model.widths=[8]", "trainer.max_epochs=2",
                          "+callbacks.poison._target_=test_reliability.PoisonAt",
                          "+callbacks.poison.epoch=1", "+callbacks.poison.batch=2"))
    last = tmp_path / "checkpoints" / RUN / "last.ckpt"
    assert str(err.value).endswith(f"{last} (epoch 0, step 3) is kept")
    checkpoint = torch.load(last, weights_only=True)
    assert checkpoint["epoch"] == 0 and all(torch.isfinite(t).all() for t in checkpoint["state_dict"].values())


# determinism



@pytest.mark.parametrize("model", MODEL_CONFIGS)
def test_every_model_config_is_bit_reproducible_under_deterministic_algorithms(make_config, model):
    """What ``trainer.deterministic=true`` switches on: no op of any model config raises
    under ``torch.use_deterministic_algorithms(True)``, and the loss and every gradient
    come out bit-identical twice (dropout on, so the random stream matters too)."""
    cfg = make_config(f"model={model}", "model.widths=[8,16]", "model.dropout=0.2", "model.classifier_dropout=0.2",
                      "model.batch_norm=true")
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


def test_two_deterministic_runs_with_the_same_seed_give_identical_metrics(make_config, tmp_path):
    args = ("model=swwae_soft", "model.widths=[8]", "model.dropout=0.2", "trainer.deterministic=true",
            "trainer.max_epochs=1", "seed=7")
    runs = []
    for _ in range(2):
        train(make_config(*args))
        summary = json.loads((tmp_path / "output" / "metrics.json").read_text())
        summary["metrics"].pop("train_time_s")
        runs.append(summary)
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
        (["model.widths=[8,8,8,8,8]"], r"stage 5 of 5 on \(1, 28, 28\) images: .* larger than the 1x1 feature map"),
        (["model=wavelet", "model.pool_size=3"], "power-of-two"),
        (["model.pool_padding=2"], "padding must be between 0 and kernel_size // 2"),
        (["seed=-1"], r"seed must be an integer in 0\.\.4294967295"),
        (["optimized_metric=val/nope"], "optimized_metric=val/nope is not a validation metric of this model"),
        (["optimized_metric=val/acc", "optimized_mode=max", "model.lambda_nll=0"], "choose one of val/loss, val/recon_mse$"),
        (["optimized_mode=up"], "optimized_mode must be min or max"),
        (["trainer.devices=0"], r"Trainer.*devices=0"),
        (["+trainer.max_epoch=3"], "unexpected keyword argument 'max_epoch'"),
        (["callbacks.reconstruction_images._target_=swwae.training.callbacks.Nope"], "Error locating target 'swwae.training.callbacks.Nope'"),
    ],
)
def test_more_bad_values_are_one_line_before_any_training(make_config, tmp_path, overrides, message):
    with pytest.raises(ConfigError, match=message) as err:
        train(make_config("model.widths=[8]", *overrides))
    assert "\n" not in str(err.value)
    assert not (tmp_path / "checkpoints").exists() and not (tmp_path / "output" / "metrics.json").exists()


@pytest.mark.parametrize("which, content, message", [
    (2, b"", "files not found"),  # a download that stopped half-way: two files of four
    (4, b"\x00\x00\x08\x03 not an idx file", "look partial or corrupt"),
    (4, b"", "look partial or corrupt"),
])
def test_a_data_root_with_partial_or_corrupt_files_is_one_line(make_config, tmp_path, which, content, message):
    folder = write_mnist_files(tmp_path / "data", which, content)
    with pytest.raises(DataError, match=message) as err:
        train(make_config("data=mnist", f"data.root={tmp_path / 'data'}", "data.download=false"))
    assert "\n" not in str(err.value) and str(folder) in str(err.value) and "data=mnist_sample" in str(err.value)
    assert not (tmp_path / "checkpoints").exists()


# the pooling contract under extreme values (the single-input cases, huge finite values, a
# -inf cell, 1x1 and whole-input windows, are with the other soft pooling tests in test_pooling.py)


F32 = torch.finfo(torch.float32)
SPECIAL = [math.inf, -math.inf, math.nan, F32.max, -F32.max, 1e30, -1e30, F32.tiny, -F32.tiny, 1e-45, 0.0, -0.0]
MODERATE = 1e3  # |x| up to here: soft must match its float64 definition


@st.composite
def extreme_inputs(draw):
    """A random geometry (``helpers.pooling.geometries``: kernels 1-4, strides 1-4, padding
    up to kernel // 2, odd and rectangular sizes) and a float32 input mixing moderate values
    with +-inf, NaN, the largest and smallest floats, and -0.0."""
    geometry, shape, seed = draw(geometries(max_size=9, max_batch=2))
    special_share = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=gen) * 2 - 1) * draw(st.sampled_from([1.0, MODERATE]))
    picks = torch.rand(shape, generator=gen) < special_share
    specials = torch.tensor(SPECIAL)[torch.randint(len(SPECIAL), shape, generator=gen)]
    x = torch.where(picks, specials, x)
    beta = draw(st.sampled_from([1e-3, 1.0, 10.0, 100.0]))
    return geometry, x, beta


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_inputs())
def test_hard_pooling_is_max_pool2d_for_any_value_nan_and_inf_included(case):
    """hard: ``what`` is F.max_pool2d bit for bit, whatever the values: NaN wins its
    windows (as in max_pool2d), +-inf pass through; the mask is unpool(ones), one win per
    window; the unpooling is shaped like the input. Never an exception."""
    geometry, x, _ = case
    pool = WhatWherePool(mode="hard", **geometry)
    what, where = pool(x)
    expected = F.max_pool2d(x, geometry["kernel_size"], geometry["stride"], geometry["padding"])
    torch.testing.assert_close(what, expected, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(Unpool(pool)(torch.ones_like(what), where), where.mask)
    assert where.mask.shape == x.shape and where.mask.sum() == what.numel()
    if torch.isfinite(x).all() and x.abs().max() <= MODERATE:  # the adjoint identity, where sums are finite
        v = torch.randn(what.shape, generator=torch.Generator().manual_seed(0))
        back = Unpool(pool)(v, where).double()  # overlapping windows add in float32: a rounding error
        lhs, rhs = (back * x.double()).sum(), (v.double() * what.double()).sum()
        assert (lhs - rhs).abs() <= 1e-6 * (v.double().abs() * what.double().abs()).sum() + 1e-9


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_inputs())
def test_soft_pooling_survives_any_value_and_keeps_the_damage_inside_its_windows(case):
    """soft, documented behaviour: never an exception, every output shaped right, the
    input left as it was. A window of finite values (any magnitude, up to the largest
    float) and -inf cells gets the soft max and soft argmax of its float64 definition, -inf
    cells weighing 0, whatever its neighbours hold: NaN and inf stay in their windows. A
    window holding NaN gives NaN, as in max_pool2d. A window holding +inf gives NaN
    (max_pool2d: +inf): its logits are beta (z - max) = inf - inf. So does a window of
    -inf only (max_pool2d: -inf)."""
    geometry, x, beta = case
    pool = WhatWherePool(mode="soft", beta=beta, **geometry)
    before = x.clone()
    x.requires_grad_(True)
    what, where = pool(x)
    back = Unpool(pool)(what, where)
    back.sum().backward()  # the backward pass runs too
    assert back.shape == where.mask.shape == x.shape and x.grad.shape == x.shape
    torch.testing.assert_close(x.detach(), before, rtol=0, atol=0, equal_nan=True)

    cells = windows(before, geometry, -math.inf)
    finite = torch.isfinite(cells)
    comparable = (finite | (cells == -math.inf)).all(-1) & finite.any(-1)
    ref_what, ref_row, ref_col = soft_reference(before, geometry, beta)
    scale = torch.where(finite, cells, 0.0).abs().amax(-1).clamp_min(1.0).double()
    assert torch.all((what.double() - ref_what).abs()[comparable] <= 1e-5 * scale[comparable])
    assert torch.all((where.row.double() - ref_row).abs()[comparable] <= 1e-4)
    assert torch.all((where.col.double() - ref_col).abs()[comparable] <= 1e-4)
    has_nan = torch.isnan(cells).any(-1)
    assert torch.isnan(what[has_nan]).all()
    assert torch.isnan(what[(cells == math.inf).any(-1) | ~finite.any(-1)]).all()


@pytest.mark.parametrize("kernel", [(2, 2), (1, 2), (2, 1), (3, 3)])
def test_soft_unpooling_backward_survives_nan_positions(kernel):
    """A window holding NaN or +inf has a NaN soft argmax; the backward pass of the
    unpooling must give NaN gradients there, not an out-of-bounds gather (a NaN position
    cast to an index is -2**63: it was, once)."""
    x = torch.tensor([[math.nan, 1.0, 2.0], [3.0, math.inf, 0.0], [1.0, 2.0, 3.0]]).view(1, 1, 3, 3)
    x.requires_grad_(True)
    pool = WhatWherePool(kernel_size=kernel, mode="soft", beta=1.0)
    what, where = pool(x)
    Unpool(pool)(what, where).sum().backward()
    assert x.grad.shape == x.shape
