"""Folders and disks (docs/architecture.md 5): a folder a run cannot write is one error line
before any training; a write that fails later (disk full) is one line naming the path and the
checkpoint that is kept, exit status 2. Read-only and full disks are real file systems here
(a tmpfs mounted read-only or 2 MB small); where mounting is not allowed the test is skipped."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from helpers.cli import last_error_line, train_here
from swwae.errors import DiskError
from swwae.training.run import train

RUN = "swwae_hard_mnist_sample_seed0"


@pytest.fixture
def tmpfs(tmp_path):
    """``tmpfs(name, size="2m", read_only=False)``: a fresh tmpfs mounted at tmp_path/name."""
    mounted = []

    def mount(name: str, size: str = "2m", read_only: bool = False) -> Path:
        point = tmp_path / name
        point.mkdir()
        options = f"size={size}" + (",ro" if read_only else "")
        result = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)], capture_output=True)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.decode().strip() or result.returncode})")
        mounted.append(point)
        return point

    yield mount
    for point in reversed(mounted):
        subprocess.run(["umount", str(point)], capture_output=True)


@pytest.mark.slow
def test_a_file_where_the_runs_folder_should_be_is_one_line_before_training(tmp_path):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / RUN).write_text("not a folder")
    result = train_here(tmp_path, "model.widths=[4]")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert last_error_line(result) == (
        f"error: cannot write the checkpoints of {RUN} in checkpoints/{RUN}: checkpoints/{RUN} is a file, not a "
        "folder; set run_name=... to write elsewhere"
    )
    assert "epoch 1/1" not in result.stdout  # before any training


@pytest.mark.slow
def test_a_read_only_checkpoint_folder_is_one_line_before_training(tmp_path, tmpfs):
    read_only = tmpfs("ro", read_only=True)
    result = train_here(tmp_path, "model.widths=[4]", f"paths.checkpoint_dir={read_only}")
    assert result.returncode == 2
    assert last_error_line(result) == (
        f"error: cannot write checkpoints in {read_only}: Read-only file system; set paths.checkpoint_dir=... to "
        "write elsewhere"
    )
    assert len(result.stderr.strip().splitlines()) == 1 and "epoch 1/1" not in result.stdout


@pytest.mark.slow
def test_a_read_only_launch_folder_is_one_line_before_hydra_starts_the_job(tmp_path, tmpfs):
    launch = tmpfs("launch", read_only=True)
    result = train_here(launch, "model.widths=[4]", quick=["debug=quick"], name="run")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert last_error_line(result) == (
        f"error: cannot write the run's output in {launch / 'outputs' / 'run'}: Read-only file system; set "
        "hydra.run.dir=... to write elsewhere"
    )


@pytest.mark.slow
def test_a_disk_that_fills_up_is_one_line_naming_the_path(tmp_path, tmpfs):
    full = tmpfs("small", size="2m")
    (full / "filler").write_bytes(b"\0" * (2 * 1024 * 1024 - 40 * 1024))  # 40 KB left: less than a checkpoint
    result = train_here(tmp_path, "model.widths=[4,8]", f"paths.checkpoint_dir={full}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = last_error_line(result)
    assert line.startswith(f"error: writing {full / RUN}/") and ".ckpt failed: No space left on device; " in line
    assert line.endswith("no checkpoint was saved")
    assert not list((full / RUN).glob(".*.tmp-*"))  # no half-written temp file left behind


def test_a_failed_save_in_a_later_epoch_names_the_checkpoint_that_is_kept(make_config, tmp_path, monkeypatch):
    saves, real_save = [], torch.save

    def fills_up_after_two(obj, f, *args, **kwargs):  # epoch 0 writes best.ckpt and last.ckpt; then the disk is full
        saves.append(1)
        if len(saves) > 2:
            raise OSError(28, "No space left on device")
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", fills_up_after_two)
    with pytest.raises(DiskError) as err:
        train(make_config("model.widths=[4]", "trainer.max_epochs=2"))
    folder = tmp_path / "checkpoints" / RUN
    assert str(err.value).startswith(f"writing {folder}/") and "failed: No space left on device; " in str(err.value)
    assert str(err.value).endswith("(after epoch 1, step 3) is kept")


@pytest.mark.slow
def test_a_disk_that_fills_during_a_save_is_one_line_and_keeps_the_previous_checkpoint(tmp_path, tmpfs):
    """torch.save's zip writer wraps the failed write of a big tensor in a RuntimeError
    ("unexpected pos ..."): it must read as the disk error it is."""
    wide = ["model.widths=[64,128]"]  # checkpoints of 2.6 MB: the disk fills inside one
    sizing = tmp_path / "sizing"
    sizing.mkdir()
    assert train_here(sizing, *wide, name="sizing").returncode == 0
    size = (sizing / "checkpoints" / RUN / "best.ckpt").stat().st_size
    full = tmpfs("filling", size="8m")
    (full / "filler").write_bytes(b"\0" * (8 * 1024 * 1024 - int(1.5 * size)))  # room for best.ckpt, half of last.ckpt
    result = train_here(tmp_path, *wide, f"paths.checkpoint_dir={full}")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert last_error_line(result) == (
        f"error: writing {full / RUN / 'last.ckpt'} failed: No space left on device; {full / RUN / 'best.ckpt'} "
        "(after epoch 1, step 3) is kept"
    )
    assert not list((full / RUN).glob(".*.tmp-*"))  # no half-written temp file left behind
