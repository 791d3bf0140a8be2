"""The shipped configs, composed as ``swwae train <overrides>`` would, into temporary folders
(nothing is written into the repository), through ``swwae.training.composing``."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from swwae.training.composing import CONFIG_MODULE, compose_run, presets

ROOT = Path(__file__).resolve().parents[2]  # the clone: train.py, scripts/, README.md
CONFIG_DIR = Path(str(files(CONFIG_MODULE)))  # the shipped configs, where Hydra reads them

# a few small batches: enough to exercise every code path in seconds (configs/debug/quick.yaml);
# its checkpoints and logs at the default roots, and the default resume=auto, as a real run's:
# the tests are runs of the job
QUICK = ["debug=quick", "paths.checkpoint_dir=checkpoints", "paths.log_dir=logs", "resume=auto"]
# with QUICK: a batch of each split, the cheapest run that trains, validates, saves and tests
ONE_BATCH = ["trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "++trainer.limit_test_batches=1"]
# two CPU processes under Lightning DDP, a couple of quick batches each
DDP_QUICK = [
    "trainer=ddp",
    "trainer.accelerator=cpu",
    "trainer.devices=2",
    *QUICK,
    "trainer.limit_train_batches=2",
    "trainer.limit_val_batches=1",
]
# the bundled sample's data config, as a run stores it
SAMPLE_DATA = {
    "_target_": "swwae.training.data.MNISTSampleDataModule",
    "batch_size": 128,
    "num_labels": None,
    "seed": 0,
    "split_seed": 0,
    "num_workers": 0,
    "val_size": 500,
    "test_size": 500,
}
MODEL_CONFIGS = presets("model")


def compose_config(tmp_path: Path, overrides=(), quick: bool = True):
    """The train config as Hydra composes it for ``train.py <overrides>``, writing to tmp_path."""
    paths = [f"paths.log_dir={tmp_path / 'logs'}", f"paths.checkpoint_dir={tmp_path / 'checkpoints'}"]
    return compose_run([*(QUICK if quick else []), *paths, *overrides], tmp_path / "output")
