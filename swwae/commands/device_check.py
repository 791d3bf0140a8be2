"""``swwae device-check``: on a CUDA device, the package's own CUDA paths in a few minutes.

    swwae device-check              # in any folder; its runs go to a temporary folder

What an install can run by itself: a 2-epoch ``trainer=gpu`` run of the job in 32-true and in
bf16-mixed (the data pipeline, the model, the loss, checkpoints and metrics on the device), each
in a child process with its own time limit, then one line per run. The CUDA tests and the
benchmarks belong to a clone (its ``tests/`` and ``scripts/``): ``bash scripts/device_check.sh``
there runs them too. Without a CUDA device it prints one line and exits 0; exit status 1 if a
run failed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from swwae.cli import one_line_errors, script_parser

CHECKED_PRECISIONS = ("32-true", "bf16-mixed")
LIMIT_S = 120  # seconds for each 2-epoch run
CLONE_CHECKS = "the CUDA tests and benchmarks run from a clone: bash scripts/device_check.sh"


def train_on_gpu(precision: str, folder: Path) -> str:
    """One 2-epoch ``trainer=gpu`` run in a child process: its one summary line."""
    command = [
        *(sys.executable, "-m", "swwae", "train", "trainer=gpu", "trainer.max_epochs=2"),
        f"trainer.precision={precision}",
        f"hydra.run.dir={folder / precision}",
        f"paths.log_dir={folder / 'logs'}",
        f"paths.checkpoint_dir={folder / precision / 'checkpoints'}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=LIMIT_S)
    except subprocess.TimeoutExpired:
        return f"{precision}: timed out after {LIMIT_S} s"
    metrics = folder / precision / "metrics.json"
    if done.returncode != 0 or not metrics.is_file():
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"{precision}: failed (exit status {done.returncode}): {last}"
    values = json.loads(metrics.read_text()).get("metrics", {})
    return f"{precision}: ok, " + ", ".join(f"{k} {v:.4f}" for k, v in sorted(values.items()) if k.startswith("test/"))


@one_line_errors
def main(argv=None) -> int:
    script_parser(__doc__).parse_args(argv)  # --help; it takes no arguments
    import torch

    if not torch.cuda.is_available():
        print("device check: no CUDA device here (torch.cuda.is_available() is False); nothing to check")
        return 0
    print(f"device check on {torch.cuda.get_device_name()} (torch {torch.__version__}); {CLONE_CHECKS}")
    with tempfile.TemporaryDirectory(prefix="swwae-device-check-") as folder:
        lines = [train_on_gpu(precision, Path(folder)) for precision in CHECKED_PRECISIONS]
    print("\n".join(f"  trainer=gpu, 2 epochs, {line}" for line in lines))
    return 0 if all(": ok" in line for line in lines) else 1
