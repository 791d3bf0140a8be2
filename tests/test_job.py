"""How the training job behaves from the command line in the hands of a user or a cluster:
a repeated ``resume=true`` on a finished run, Ctrl-C, and progress output into a file.

The Ctrl-C callback below is test-only; the subprocess runs load it from this module through
``+callbacks.<name>._target_=test_job.<Class>``.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

import lightning as L

from conftest import QUICK, ROOT

TESTS = Path(__file__).resolve().parent
RUN = "swwae_hard_mnist_sample_seed0"
SMALL = ["model.widths=[4]", "trainer.max_epochs=2"]


class InterruptAt(L.Callback):
    """Press Ctrl-C (SIGINT to this very process) at training batch ``batch`` of ``epoch``."""

    def __init__(self, epoch: int, batch: int):
        self.epoch, self.batch = epoch, batch

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGINT)


def train_cli(tmp: Path, *overrides, name: str = "run", quick=QUICK) -> subprocess.CompletedProcess:
    """``python train.py`` as a user types it, in ``tmp``, output captured (not a terminal)."""
    env = dict(os.environ, PYTHONWARNINGS="ignore", HYDRA_FULL_ERROR="0",
               PYTHONPATH=os.pathsep.join([str(TESTS), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    args = [sys.executable, str(ROOT / "train.py"), *quick, f"hydra.run.dir={tmp / 'outputs' / name}", *overrides]
    # a shell that starts a job in the background (CI under nohup ... &) has it ignore SIGINT,
    # and so would Python: give the child the default disposition, as a terminal does
    return subprocess.run(args, cwd=tmp, env=env, capture_output=True, text=True, timeout=300,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def test_resume_on_a_finished_run_reports_its_metrics_and_exits_0(tmp_path):
    first = train_cli(tmp_path, *SMALL, name="first")
    assert first.returncode == 0, first.stderr[-2000:]
    done = json.loads((tmp_path / "outputs" / "first" / "metrics.json").read_text())

    again = train_cli(tmp_path, *SMALL, "resume=true", name="again")
    assert again.returncode == 0, again.stderr[-2000:]
    assert "error" not in again.stderr.lower()
    line = again.stdout.strip().splitlines()[-1]
    assert line.startswith(f"done: {RUN} had already finished at epoch 2 of 2: ")
    assert f"test/acc={done['metrics']['test/acc']:.4f}" in line and "first/metrics.json" in line
    assert json.loads((tmp_path / "outputs" / "again" / "metrics.json").read_text())["metrics"] == done["metrics"]

    (tmp_path / "outputs" / "first" / "metrics.json").unlink()  # killed before it wrote its metrics
    third = train_cli(tmp_path, *SMALL, "resume=true", name="third")
    assert third.returncode == 0, third.stderr[-2000:]
    assert "(evaluated again from best.ckpt)" in third.stdout
    metrics = json.loads((tmp_path / "outputs" / "third" / "metrics.json").read_text())["metrics"]
    assert metrics["test/acc"] == done["metrics"]["test/acc"]
    assert metrics["test/recon_mse"] == done["metrics"]["test/recon_mse"]
    assert metrics["val/recon_mse"] == done["metrics"]["val/recon_mse"]  # the last epoch's weights


def test_ctrl_c_says_what_is_kept_and_how_to_continue_and_exits_130(tmp_path):
    stopped = train_cli(tmp_path, *SMALL, "+callbacks.interrupt._target_=test_job.InterruptAt",
                        "+callbacks.interrupt.epoch=1", "+callbacks.interrupt.batch=1", name="stopped")
    assert stopped.returncode == 130, stopped.stderr[-2000:]
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("interrupted at epoch 1, step 4; ")
    assert f"checkpoints/{RUN}/last.ckpt (epoch 0, step 3) is kept" in line
    assert "Detected KeyboardInterrupt" not in stopped.stderr + stopped.stdout and "Traceback" not in stopped.stderr
    command = line.split("continue with: ", 1)[1]
    assert command.startswith("python train.py ") and command.endswith(" resume=true")
    assert "model.widths=[4]" in command and "callbacks.interrupt" in command

    # the command it prints continues the run (here without the interrupting callback)
    args = [a for a in shlex.split(command)[2:] if "callbacks.interrupt" not in a]
    resumed = train_cli(tmp_path, *args, name="resumed", quick=[])
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert json.loads((tmp_path / "outputs" / "resumed" / "metrics.json").read_text())["epochs"] == 2


def test_ctrl_c_before_training_is_one_line_too(tmp_path):
    stopped = train_cli(tmp_path, "model.widths=[4]", "+callbacks.interrupt._target_=test_job.InterruptAt",
                        "+callbacks.interrupt.epoch=0", "+callbacks.interrupt.batch=0", name="early")
    assert stopped.returncode == 130
    line = stopped.stderr.strip().splitlines()[-1]
    assert line.startswith("interrupted at epoch 0, step 0; no checkpoint was saved; continue with: python train.py ")
    assert shlex.split(line.split("continue with: ", 1)[1]) == [
        "python", "train.py", *QUICK, "model.widths=[4]", "+callbacks.interrupt._target_=test_job.InterruptAt",
        "+callbacks.interrupt.epoch=0", "+callbacks.interrupt.batch=0", "resume=true"]


def test_output_to_a_file_is_one_line_per_epoch(tmp_path):
    result = train_cli(tmp_path, "model.widths=[4]", "trainer.max_epochs=3", "callbacks.progress_bar.refresh_rate=5")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "\r" not in result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    assert [line.split(":")[0] for line in lines[:3]] == ["epoch 1/3", "epoch 2/3", "epoch 3/3"]
    for line in lines[:3]:
        assert "train/loss=" in line and "val/recon_mse=" in line and "val/acc=" in line and line.endswith(" s)")
    assert lines[3].startswith("done: ") and len(lines) == 4
