"""One run, one owner (docs/architecture.md 5): a run holds a lock on its checkpoint folder; a
second run of the same run name ends in one line before it touches anything, and reports no one
else's numbers; a sweep job whose name is taken fails alone."""

from __future__ import annotations

import json
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers.cli import TESTS, command_here, last_error_line, train_here
from helpers.config import QUICK, ROOT
from swwae.errors import RunInUseError
from swwae.training.run import train
from swwae.training.runs.folder import own_run

RUN = "swwae_hard_mnist_sample_seed0"
SMALL = ["model.widths=[4]", "trainer.max_epochs=2", "trainer.deterministic=true"]


def wait_for(path: Path, process: subprocess.Popen, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-2000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_second_run_of_the_same_name_is_refused_in_one_line_and_the_first_keeps_its_own_numbers(tmp_path):
    ready, go = tmp_path / "ready", tmp_path / "go"
    env = dict(os.environ, PYTHONWARNINGS="ignore", PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT)]))
    first = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "train.py"),
            *QUICK,
            *SMALL,
            f"hydra.run.dir={tmp_path / 'outputs' / 'first'}",
            "+callbacks.pause._target_=helpers.faults.PauseAt",
            "+callbacks.pause.epoch=1",
            "+callbacks.pause.batch=0",
            f"+callbacks.pause.ready={ready}",
            f"+callbacks.pause.go={go}",
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for(ready, first)  # the first run is mid-training, holding its lock
        folder = tmp_path / "checkpoints" / RUN
        before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

        second = train_here(tmp_path, *SMALL, "resume=false", name="second")  # would move the first's folder aside
        assert second.returncode == 2
        line = last_error_line(second)
        assert line.startswith(
            f"error: checkpoints/{RUN} is in use by another run of {RUN} (pid {first.pid} on host "
            f"{socket.gethostname()}, started "
        )
        assert f": {shlex.join(first.args)}): " in line  # the command that started it, as it was typed
        assert line.endswith("wait for it to finish, or give this run its own folder with run_name=...")
        assert len(second.stderr.strip().splitlines()) == 1 and "Traceback" not in second.stderr
        assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before  # touched nothing
        assert not list((tmp_path / "checkpoints").glob(f"{RUN}.previous-*"))
        assert not (tmp_path / "outputs" / "second" / "metrics.json").exists()
    finally:
        go.write_text("")
        out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err[-2000:]
    summary = json.loads((tmp_path / "outputs" / "first" / "metrics.json").read_text())
    assert summary["status"] == "ok" and Path(summary["checkpoint"]) == tmp_path / "checkpoints" / RUN / "best.ckpt"
    assert not (tmp_path / "checkpoints" / f".{RUN}.owner.json").exists()  # released at the end

    alone = tmp_path / "alone"  # the same run with no one beside it: the first reported its own numbers
    alone.mkdir()
    assert train_here(alone, *SMALL, name="alone").returncode == 0
    reference = json.loads((alone / "outputs" / "alone" / "metrics.json").read_text())
    drop = lambda s: {k: v for k, v in s["metrics"].items() if k != "train_time_s"}  # noqa: E731
    assert drop(summary) == drop(reference)


@pytest.mark.slow
def test_a_run_whose_folder_is_held_ends_before_reading_it(make_config, tmp_path):
    folder = tmp_path / "checkpoints" / RUN
    with own_run(folder, RUN):  # as another process would hold it
        with pytest.raises(RunInUseError, match=rf"^{folder} is in use by another run of {RUN} \(pid {os.getpid()}"):
            train(make_config("model.widths=[4]"))
    assert not folder.exists()  # nothing created, read or moved
    train(make_config("model.widths=[4]"))  # free again


@pytest.mark.slow
def test_a_sweep_job_whose_run_name_is_taken_fails_alone(tmp_path):
    taken = tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0"
    with own_run(taken, taken.name):  # a run of that name is going on elsewhere
        result = command_here(
            "-m",
            *QUICK,
            "model.widths=[4]",
            "model=swwae_hard,swwae_soft",
            f"hydra.sweep.dir={tmp_path / 'sweep'}",
            cwd=tmp_path,
        )
    assert result.returncode == 1  # the sweep says it was not clean...
    jobs = {p.name: json.loads((p / "metrics.json").read_text()) for p in (tmp_path / "sweep").iterdir() if p.is_dir()}
    assert jobs["0_swwae_hard_mnist_sample_seed0"]["status"] == "failed"
    assert "is in use by another run" in jobs["0_swwae_hard_mnist_sample_seed0"]["error"]
    assert jobs["1_swwae_soft_mnist_sample_seed0"]["status"] == "ok"  # ...and its other job ran
    assert "1 failed" in (tmp_path / "sweep" / "summary.md").read_text() or "failed" in result.stderr
