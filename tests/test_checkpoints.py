"""Checkpoints (docs/architecture.md 5): atomic writes, one safe reader, resume from what
reads back, one error line for a bad or foreign file (saying what the file is, and refusing
weights of another kind than the network's), checkpoints written before the package's layers
moved still load, resume and evaluate, and evaluate writes its picture where the user said."""

from __future__ import annotations

import collections
import dataclasses
import errno
import hashlib
import io
import json
import os
import random
import shutil
import signal
import struct
import threading
import time
import zipfile
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra
from lightning.pytorch.loggers import CSVLogger

import swwae
import swwae.commands.outputs
from helpers.cli import last_error_line, run_cli, train_cli, train_here
from helpers.config import compose_config
from helpers.disks import read_only_folder, read_only_reason
from helpers.faults import Crash, crash_at
from swwae.checkpoint_file import CHECKPOINT_CHECKSUM_KEY, content_checksum, read_checkpoint, with_checksum
from swwae.commands.evaluate import main as evaluate_main
from swwae.errors import CheckpointError, DiskError, NonFiniteError, Unreadable
from swwae.training.checkpoints import (
    AtomicCheckpointIO,
    BackgroundCheckpointIO,
    atomic_torch_save,
    build_trainer,
    host_copy,
    load_model,
    remove_stale_temp_files,
)
from swwae.training.registry import data_of_run
from swwae.training.run import train
from swwae.training.runs.folder import RunFolder
from swwae.training.spec import check_config

RUN = "swwae_hard_mnist_sample_seed0"  # run_name of the default config with seed=0

# helpers


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# atomic checkpoint writes


@pytest.mark.slow
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
    with pytest.raises(DiskError, match=f"^writing {path} failed: No space left on device$"):
        io.save_checkpoint({"epoch": 1}, path)
    assert sha(path) == before
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]


def test_training_saves_through_the_atomic_checkpoint_io_in_the_background(make_config, tmp_path):
    """Written by a background thread; each save before training goes on where a logger uploads
    the files it saves (log_model: MLflow's and W&B's loggers read them at once)."""
    settings = check_config(make_config("model.widths=[8]")).trainer
    assert type(build_trainer(settings, [], []).strategy.checkpoint_io) is BackgroundCheckpointIO
    uploads = CSVLogger(tmp_path)
    uploads._log_model = "all"  # as MLFlowLogger(log_model="all") keeps it
    assert type(build_trainer(settings, [uploads], []).strategy.checkpoint_io) is AtomicCheckpointIO


def slow_saves(monkeypatch, seconds: float = 0.3) -> threading.Event:
    """torch.save that waits ``seconds`` before writing; the event is set when a write starts."""
    started, real_save = threading.Event(), torch.save

    def slow_save(obj, f, *args, **kwargs):
        started.set()
        time.sleep(seconds)
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", slow_save)
    return started


def test_a_background_save_writes_the_checkpoint_of_its_moment_and_a_read_waits_for_it(
    trained_run, tmp_path, monkeypatch
):
    """Training goes on while the writer thread writes: the file holds the weights as they were
    at the save (not after the next optimiser step), and a read right after the save reads it."""
    checkpoint = read_checkpoint(trained_run / "last.ckpt")
    name, weights = next((k, v) for k, v in checkpoint["state_dict"].items() if v.is_floating_point())
    at_save = weights.clone()
    started = slow_saves(monkeypatch)
    io, path = BackgroundCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint(checkpoint, path)
    assert started.wait(5) and not path.exists()  # handed over; the writer is still at it
    weights.add_(1.0)  # the next optimiser step, in place
    again = io.load_checkpoint(path)  # the safe reader, once the write is done: checksum checked
    assert torch.equal(again["state_dict"][name], at_save)
    io.teardown()


@dataclasses.dataclass
class CallbackState:
    tensor: torch.Tensor
    note: str


def test_the_writers_copy_keeps_the_checkpoints_containers_around_copies_of_its_tensors():
    """``host_copy``, the background writer's copy: containers, numbers and strings as they were,
    each tensor copied once however often it appears, a state_dict's module versions
    (``_metadata``) kept, and a callback's own kinds of state (a namedtuple, a defaultdict, a
    dataclass) copied as Lightning copies them."""
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 2, 3), torch.nn.BatchNorm2d(2))
    moment = torch.randn(2, 1, 3, 3)
    pair = collections.namedtuple("Pair", "tensor count")
    checkpoint = {
        "epoch": 3,
        "state_dict": net.state_dict(),
        "optimizer_states": [{"state": {0: {"exp_avg": moment, "step": 7}}, "param_groups": [{"lr": 1e-3}]}],
        "callbacks": {"Mine": {"pair": pair(moment, 2), "counts": collections.defaultdict(list, {"a": [1]})}},
        "box": CallbackState(moment, "n"),
        "shape": (2, (3, None), b"x"),
    }
    copied = host_copy(checkpoint)
    assert copied.keys() == checkpoint.keys() and copied["epoch"] == 3 and copied["shape"] == (2, (3, None), b"x")
    state = copied["state_dict"]
    assert type(state) is collections.OrderedDict and state._metadata == checkpoint["state_dict"]._metadata
    assert list(state) == list(checkpoint["state_dict"])
    assert all(torch.equal(state[k], v) and state[k] is not v for k, v in checkpoint["state_dict"].items())
    again = copied["optimizer_states"][0]["state"][0]["exp_avg"]
    assert again is not moment and torch.equal(again, moment)
    assert copied["callbacks"]["Mine"]["pair"] == pair(again, 2) and copied["callbacks"]["Mine"]["pair"].tensor is again
    assert copied["box"] == CallbackState(again, "n") and copied["box"].tensor is again
    counts = copied["callbacks"]["Mine"]["counts"]
    assert type(counts) is collections.defaultdict and counts.default_factory is list and counts == {"a": [1]}
    expected = moment.clone()
    moment.add_(1.0)  # training goes on
    assert torch.equal(again, expected)


def test_a_failed_background_save_raises_once_when_training_ends_and_keeps_the_previous_file(
    tmp_path, monkeypatch, caplog
):
    io, path = BackgroundCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"epoch": 0}, path)
    io.wait()
    before = sha(path)

    def disk_full(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a zip")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(torch, "save", disk_full)
    io.save_checkpoint({"epoch": 1}, path)  # handed over: the writer fails later
    with pytest.raises(DiskError, match=f"^writing {path} failed: No space left on device$"):
        io.teardown()
    io.teardown()  # said once
    assert sha(path) == before and [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]

    io.save_checkpoint({"epoch": 2}, path)  # fails too, while the run stops for another reason
    try:
        raise NonFiniteError("non-finite loss in epoch 3, step 7")
    except NonFiniteError:
        io.teardown()  # that error goes on; this one is logged, one line
    assert [r.getMessage() for r in caplog.records if r.levelname == "ERROR"] == [
        f"writing {path} failed: No space left on device"
    ]


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


@pytest.mark.slow
def test_resume_falls_back_to_best_when_last_is_truncated(make_config, tmp_path, caplog):
    with pytest.raises(Crash):  # a run of 3 epochs, stopped at the start of the third
        train(make_config("model.widths=[8]", "trainer.max_epochs=3", *crash_at(epoch=2)))
    folder = tmp_path / "checkpoints" / RUN
    best_epoch = torch.load(folder / "best.ckpt", weights_only=True)["epoch"]
    data = (folder / "last.ckpt").read_bytes()
    (folder / "last.ckpt").write_bytes(data[: len(data) // 2])  # a save cut short by an old writer
    (folder / ".last.ckpt.tmp-123-abcd").write_bytes(data[:100])  # a kill mid-save, with this writer

    with caplog.at_level("WARNING"):
        train(make_config("model.widths=[8]", "trainer.max_epochs=3", "resume=true"))
    assert "cannot resume from last.ckpt" in caplog.text and "unreadable" in caplog.text
    assert f"resuming from {folder / 'best.ckpt'} (after epoch {best_epoch + 1}, step" in caplog.text
    assert not (folder / ".last.ckpt.tmp-123-abcd").exists()
    last = torch.load(folder / "last.ckpt", weights_only=True)  # whole again
    assert last["global_step"] == 9  # 3 epochs of 3 batches: none lost, none twice


def small_checkpoint(path: Path, epoch: int) -> Path:
    """A checksummed checkpoint holding what the safe reader requires, written as train.py writes one."""
    checkpoint = {
        "epoch": epoch,
        "global_step": 3 * (epoch + 1),
        "state_dict": {"net.w": torch.zeros(2)},
        "hyper_parameters": {},
        "swwae_config": {"run_name": path.parent.name, "trainer": {"max_epochs": 4}},
    }
    atomic_torch_save(with_checksum(checkpoint), path)
    return path


def test_a_run_whose_best_checkpoint_no_longer_reads_back_is_tested_on_its_last(tmp_path, caplog):
    """A flipped bit in best.ckpt after it was saved: the run (or the command asking again for
    a finished one) tests last.ckpt, saying so, instead of ending in that error every time."""
    folder = RunFolder(tmp_path, "run", {})
    best, last = small_checkpoint(folder.path / "best.ckpt", 1), small_checkpoint(folder.path / "last.ckpt", 3)
    assert folder.tested(str(best)) == best
    checkpoint = torch.load(best, weights_only=True)
    checkpoint["state_dict"]["net.w"] += 1  # other weights under the checksum written with the old ones
    torch.save(checkpoint, best)
    with caplog.at_level("WARNING"):
        assert folder.tested(str(best)) == last.absolute()
    assert f"{best} is corrupt" in caplog.text and f"testing {last.absolute()} instead" in caplog.text
    crafted(best, tmp_path / "code-ran")  # not damage: a file swwae never wrote stays its one error line
    with pytest.raises(CheckpointError, match=f"checkpoint {best} holds pickled objects"):
        folder.tested(str(best))
    torch.save(checkpoint, best)
    last.write_bytes(b"")  # neither reads back: best.ckpt's own error
    with pytest.raises(CheckpointError, match=f"checkpoint {best} is corrupt"):
        folder.tested(str(best))


@pytest.mark.parametrize("damage", ["truncated", "empty", "foreign"])
@pytest.mark.slow
def test_resume_with_no_checkpoint_that_reads_back_is_one_error_and_deletes_nothing(
    make_config, tmp_path, damage, trained_run
):
    folder = copy_run(trained_run, tmp_path)
    for path in folder.glob("*.ckpt"):
        if damage == "truncated":
            path.write_bytes(path.read_bytes()[:5000])
        elif damage == "empty":
            path.write_bytes(b"")
        else:  # a plain state dict from some other project
            torch.save({"weight": torch.ones(3)}, path)
    hashes = {p.name: sha(p) for p in folder.iterdir()}
    with pytest.raises(CheckpointError, match=f"^{folder} holds no checkpoint that reads back") as err:
        train(make_config("model.widths=[8]", "resume=true"))
    assert "\n" not in str(err.value) and "last.ckpt: " in str(err.value) and "best.ckpt: " in str(err.value)
    assert {p.name: sha(p) for p in folder.iterdir()} == hashes


@pytest.mark.parametrize(
    "change, message",
    [
        ("model.widths=[8,16]", r"holds another run \(model.widths: \[8\] -> \[8, 16\]\)"),
        ("model.pool_mode=soft", r"holds another run \(model.pool_mode: hard -> soft\)"),
        (  # a semi-supervised run has a default name of its own: this one is named as the run
            f"data.num_labels=100 run_name={RUN}",
            r"holds another run \(data.num_labels: None -> 100; optimized_metric: val/recon_mse -> "
            r"val/acc; optimized_mode: min -> max\)",
        ),
        ("trainer.gradient_clip_val=1.0", r"holds another run \(trainer.gradient_clip_val: None -> 1.0\)"),
        (
            "optimized_metric=val/acc",
            r"holds another run \(optimized_metric: val/recon_mse -> val/acc; optimized_mode: "
            r"min -> max\)",
        ),
    ],
)
@pytest.mark.slow
def test_resume_with_another_config_is_one_clear_error(make_config, tmp_path, change, message, trained_run):
    folder = copy_run(trained_run, tmp_path)
    hashes = {p.name: sha(p) for p in folder.iterdir()}
    with pytest.raises(CheckpointError, match=message) as err:
        train(make_config("model.widths=[8]", *change.split(" "), "resume=true"))
    assert str(err.value).startswith(f"{folder} holds another run (")
    assert str(err.value).endswith(
        "give this run its own folder with run_name=..., or resume=false to start over "
        "(the old run is moved aside, not deleted)"
    ) and "\n" not in str(err.value)
    assert {p.name: sha(p) for p in folder.iterdir()} == hashes  # nothing touched


# evaluation of bad checkpoints


@pytest.mark.parametrize(
    "damage",
    [
        *("missing", "truncated", "empty", "random bytes", "foreign state dict", "pickled object", "other model"),
        *("complex weights", "int32 weights", "int64 weights", "a pickled list"),
    ],
)
def test_evaluate_a_bad_checkpoint_is_one_error_line(tmp_path, capsys, damage, trained_run):
    path = tmp_path / "model.ckpt"
    if damage in ("truncated", "other model", "complex weights", "int32 weights", "int64 weights"):
        good = trained_run / "last.ckpt"
        if damage == "truncated":
            path.write_bytes(good.read_bytes()[:-100])
        else:
            checkpoint = torch.load(good, weights_only=True)
            if damage == "other model":  # hparams of one model, weights of another
                checkpoint["hyper_parameters"]["widths"] = [16]
            else:  # cast to float32 and evaluated, were they not refused
                dtype = {"complex weights": torch.complex64, "int32 weights": torch.int32}.get(damage, torch.int64)
                state = checkpoint["state_dict"]
                checkpoint["state_dict"] = {name: t.to(dtype) for name, t in state.items()}
                checkpoint[CHECKPOINT_CHECKSUM_KEY] = content_checksum(checkpoint)  # whole, as written
            torch.save(checkpoint, path)
    elif damage == "a pickled list":
        torch.save([1, 2, 3], path)
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


def zip_of(entries: dict[str, bytes]) -> bytes:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for name, content in entries.items():
            archive.writestr(name, content)
    return data.getvalue()


def saved_bytes(value) -> bytes:
    data = io.BytesIO()
    torch.save(value, data)
    return data.getvalue()


@pytest.mark.parametrize(
    "content, why",
    [
        (b"", "the file is empty"),
        (b"hello world\n", "not a file that torch.save writes (neither a zip archive nor a pickle)"),
        # an image given for a checkpoint: torch's weights-only unpickler refuses its first byte as an opcode
        (b"\x89PNG\r\n\x1a\n" + bytes(24), "not a file that torch.save writes (neither a zip archive nor a pickle)"),
        (zip_of({"notes.txt": b"hello"}), "a zip archive, but not one torch.save wrote (it holds no data.pkl)"),
        (
            zip_of({"archive/data.pkl": b"hello", "archive/version": b"3\n"}),  # torch's unpickler: KeyError: 101
            "torch.save's zip archive, but what it holds does not unpickle (corrupt?)",
        ),
        (saved_bytes({"a": torch.ones(9)})[:300], "a zip archive cut short or damaged (truncated or corrupt?)"),
        (saved_bytes(7), "it holds a pickled int, not the entries of a checkpoint (a dict)"),
        (saved_bytes([1, 2]), "it holds a pickled list, not the entries of a checkpoint (a dict)"),
    ],
    ids=["empty", "text", "a PNG", "a zip", "a zip with a bad pickle", "cut short", "an int", "a list"],
)
def test_a_file_that_is_no_checkpoint_is_unreadable_saying_what_it_is(tmp_path, content, why):
    path = tmp_path / "x.ckpt"
    path.write_bytes(content)
    with pytest.raises(Unreadable) as raised:
        swwae.load(path)
    assert str(raised.value) == f"checkpoint {path} is unreadable: {why}"


def test_a_file_cut_short_in_its_tensors_says_so_not_invalid_argument(tmp_path):
    """Cut within its tensors, a file makes torch's reader seek before its start (OSError
    EINVAL, "Invalid argument"): that is the file's fault, said as what the file is."""
    data = saved_bytes({"a": torch.ones(9), "b": torch.zeros(1000)})
    path = tmp_path / "last.ckpt"
    path.write_bytes(data[: len(data) * 3 // 4])
    with pytest.raises(Unreadable) as raised:
        swwae.load(path)
    assert str(raised.value).endswith(": a zip archive cut short or damaged (truncated or corrupt?)")


# evaluate: the picture goes where the user said, the metrics come first


def test_evaluate_prints_its_metrics_not_lightnings_device_lines_and_tips(tmp_path, capsys, caplog, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert evaluate_main([str(LEGACY["0.2"][0]), "--num-images", "1"]) == 0
    assert json.loads(capsys.readouterr().out)["png"] == "recon.png"
    assert [r.getMessage() for r in caplog.records if r.name.startswith("lightning")] == []  # GPU available: ...


def test_evaluate_writes_its_picture_here_never_beside_the_checkpoint(tmp_path, capsys, monkeypatch):
    """A checkpoint in a read-only folder (another user's, a mounted data set): the PNG goes
    to the current folder (or --out), the folder it came from is never written."""
    with read_only_folder(tmp_path / "theirs", fill=lambda f: shutil.copy(LEGACY["0.2"][0], f / "best.ckpt")) as theirs:
        monkeypatch.chdir(tmp_path)
        assert evaluate_main([str(theirs / "best.ckpt"), "--num-images", "2"]) == 0
        assert json.loads(capsys.readouterr().out)["png"] == "recon.png" and (tmp_path / "recon.png").is_file()
        (tmp_path / "pictures").mkdir()
        assert evaluate_main([str(theirs / "best.ckpt"), "--out", "pictures", "--split", "val"]) == 0
        assert (tmp_path / "pictures" / "recon.png").is_file()
        assert sorted(p.name for p in theirs.iterdir()) == ["best.ckpt"]

        capsys.readouterr()
        assert evaluate_main([str(theirs / "best.ckpt"), "--out", str(theirs / "recon.png")]) == 2
        out, err = capsys.readouterr()
        assert out == "" and err.splitlines() == [  # before the evaluation
            f"error: cannot write the picture recon.png in {theirs}: "
            + read_only_reason()
            + "; set --out=... to write elsewhere"
        ]
        assert evaluate_main([str(theirs / "best.ckpt"), "--out", "recon.jpg"]) == 2
        assert capsys.readouterr().err.startswith("error: --out=recon.jpg: name a .png file")


def test_evaluate_prints_its_metrics_before_a_picture_that_cannot_be_written(tmp_path, capsys, monkeypatch):
    def disk_full(image, path):
        Path(path).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(swwae.commands.outputs, "save_png", disk_full)
    monkeypatch.chdir(tmp_path)
    assert evaluate_main([str(LEGACY["0.2"][0]), "--num-images", "2"]) == 2
    out, err = capsys.readouterr()
    assert 0 < json.loads(out)["test/recon_mse"] < 0.2
    assert err.splitlines() == ["error: writing recon.png failed: No space left on device"]
    assert not any(tmp_path.iterdir())  # no half a picture either


@pytest.mark.parametrize(
    "option, line",
    [
        (["--split", "train"], "error: argument --split: invalid choice: 'train'"),
        (["--num-images", "0"], "error: argument --num-images: must be >= 1, got 0"),  # was a ZeroDivisionError
        (["--num-images", "-3"], "error: argument --num-images: must be >= 1, got -3"),  # was all images but 3
        (["--num-images", "x"], "error: argument --num-images: invalid int value: 'x'"),
    ],
)
def test_evaluate_a_bad_option_is_one_error_line(tmp_path, capsys, option, line):
    assert evaluate_main([str(tmp_path / "best.ckpt"), *option]) == 2
    [error] = capsys.readouterr().err.strip().splitlines()  # not argparse's usage, then the error
    assert error.startswith(line)


# checkpoints of earlier releases, each made by that release's code with `python train.py
# debug=quick model.widths=[4,8] trainer.max_epochs=2 run_name=legacy_v<x>`:
# tests/data/checkpoint_v0_1.ckpt (0.1: its run config names swwae.module.SWWAEModule and
# swwae.data.*, the module paths before the layers moved) and tests/data/checkpoint_v0_2.ckpt (the
# code of commit 0a7973a, the first to call itself 0.2.0: swwae.training.* paths, a checksum).
# Their old names load through the registry's aliases, with no import hook.

DATA = Path(__file__).resolve().parent / "data"
LEGACY = {
    "0.1": (DATA / "checkpoint_v0_1.ckpt", "swwae.module.SWWAEModule"),
    "0.2": (DATA / "checkpoint_v0_2.ckpt", "swwae.training.module.SWWAEModule"),
}


@pytest.mark.parametrize("release", LEGACY)
def test_a_checkpoint_of_an_earlier_release_loads_and_evaluates(tmp_path, capsys, release):
    path, target = LEGACY[release]
    net = swwae.load(path)
    assert net.config["model"]["_target_"] == target and net.arch == "(4)3c-2p-(8)3c-2p-10fc"
    datamodule = data_of_run(net.config["data"], str(path))  # its stored _target_, found in the registry
    datamodule.setup("test")
    x = datamodule.images("test", 4)
    module, _ = load_model(path)
    with torch.no_grad():
        assert torch.equal(net(x).recon, module.net(x).recon) and net(x).logits.shape == (4, 10)
    assert evaluate_main([str(path), "--out", str(tmp_path / "recon.png")]) == 0
    metrics = json.loads(capsys.readouterr().out)
    assert 0 < metrics["test/recon_mse"] < 0.2 and (tmp_path / "recon.png").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("release", LEGACY)
def test_a_run_of_an_earlier_release_is_its_own_command_s_run(make_config, tmp_path, release, capsys):
    """Its identity, read from its stored config (settings added since count as their defaults),
    is the identity of the command that made it: that command reports it; a longer one is another run."""
    name = f"legacy_v{release.replace('.', '_')}"
    folder = tmp_path / "checkpoints" / name
    folder.mkdir(parents=True)
    shutil.copy(LEGACY[release][0], folder / "last.ckpt")
    its_command = ["model.widths=[4,8]", f"run_name={name}", "trainer.max_epochs=2"]
    train(make_config(*its_command))
    assert f"done: {name} had already finished: 2 of 2 epochs trained" in capsys.readouterr().out
    assert read_checkpoint(folder / "last.ckpt")["global_step"] == 6  # nothing trained
    with pytest.raises(CheckpointError, match=r"holds another run \(trainer.max_epochs: 2 -> 3\): give this run"):
        train(make_config(*its_command, "trainer.max_epochs=3"))


# one safe reader: nothing in a checkpoint can run code, whatever the environment says


class CreatesAFile:
    """Unpickled without ``weights_only``, this object calls ``open(path, "w")``: a stand-in
    for any code a crafted checkpoint could run."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return open, (str(self.path), "w")


def crafted(path: Path, marker: Path) -> None:
    torch.save({"state_dict": {}, "hyper_parameters": {}, "swwae_config": {}, "payload": CreatesAFile(marker)}, path)


@pytest.mark.slow
def test_a_crafted_pickle_runs_no_code_even_with_torch_force_no_weights_only_load(tmp_path):
    small = ["model.widths=[4]", "trainer.max_epochs=2"]
    assert train_here(tmp_path, *small, name="first").returncode == 0
    (tmp_path / "outputs" / "first" / "metrics.json").unlink()  # a finished run is then evaluated again
    folder, marker = tmp_path / "checkpoints" / RUN, tmp_path / "code-ran"
    crafted(folder / "best.ckpt", marker)
    hostile = {"TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD": "1"}

    again = train_cli(tmp_path, *small, "resume=true", name="again", env=hostile)
    assert again.returncode == 2 and "Traceback" not in again.stderr
    assert last_error_line(again) == (
        f"error: checkpoint checkpoints/{RUN}/best.ckpt holds pickled objects, not tensors and plain values: it was "
        "not written by swwae's train.py, and is not loaded (a pickle can run code)"
    )
    loaded = run_cli("-c", f"import swwae; swwae.load({str(folder / 'best.ckpt')!r})", cwd=tmp_path, env=hostile)
    assert loaded.returncode == 1 and "CheckpointError" in loaded.stderr and "holds pickled objects" in loaded.stderr
    assert not marker.exists()


def flip_a_byte_inside_a_tensor(path: Path) -> None:
    """Change one byte in the middle of the largest tensor's bytes: the zip and the pickle stay
    valid (torch checks no zip CRC), only the contents change."""
    with zipfile.ZipFile(path) as archive:
        entry = max((i for i in archive.infolist() if "/data/" in i.filename), key=lambda i: i.file_size)
    data = bytearray(path.read_bytes())
    name_len, extra_len = struct.unpack("<HH", data[entry.header_offset + 26 : entry.header_offset + 30])
    at = entry.header_offset + 30 + name_len + extra_len + entry.file_size // 2
    data[at] ^= 0x10
    path.write_bytes(bytes(data))


@pytest.mark.slow
def test_a_checkpoint_whose_bytes_changed_reads_as_corrupt_and_resume_falls_back(make_config, tmp_path, caplog):
    with pytest.raises(Crash):
        train(make_config("model.widths=[8]", "trainer.max_epochs=3", *crash_at(epoch=2)))
    folder = tmp_path / "checkpoints" / RUN
    flip_a_byte_inside_a_tensor(folder / "last.ckpt")
    torch.load(folder / "last.ckpt", weights_only=True)  # torch itself notices nothing
    with pytest.raises(CheckpointError, match=r"last.ckpt is corrupt: its contents do not match the checksum"):
        read_checkpoint(folder / "last.ckpt")
    with caplog.at_level("WARNING"):
        train(make_config("model.widths=[8]", "trainer.max_epochs=3", "resume=true"))
    assert "cannot resume from last.ckpt: checkpoint" in caplog.text and "is corrupt" in caplog.text
    assert "resuming from" in caplog.text and "best.ckpt (after epoch" in caplog.text
    assert read_checkpoint(folder / "last.ckpt")["epoch"] == 2  # written again, whole


def test_every_save_carries_a_checksum_that_the_reader_checks(make_config, tmp_path):
    train(make_config("model.widths=[4]"))
    raw = torch.load(tmp_path / "checkpoints" / RUN / "last.ckpt", weights_only=True)
    assert raw[CHECKPOINT_CHECKSUM_KEY] == content_checksum(raw) and len(raw[CHECKPOINT_CHECKSUM_KEY]) == 64
    assert CHECKPOINT_CHECKSUM_KEY not in read_checkpoint(tmp_path / "checkpoints" / RUN / "last.ckpt")
