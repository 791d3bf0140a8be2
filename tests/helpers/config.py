"""The checkout's configs, composed as ``python train.py <overrides>`` would, into temporary
folders (nothing is written into the repository)."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import open_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "configs"

# a few small batches: enough to exercise every code path in seconds (configs/debug/quick.yaml);
# its checkpoints and logs at the default roots, as a real run's: the tests are runs of the job
QUICK = ["debug=quick", "paths.checkpoint_dir=checkpoints", "paths.log_dir=logs"]
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
MODEL_CONFIGS = sorted(p.stem for p in (CONFIG_DIR / "model").glob("*.yaml"))


def compose_config(tmp_path: Path, overrides=(), quick: bool = True):
    """The train config as Hydra composes it for ``train.py <overrides>``, writing to tmp_path."""
    GlobalHydra.instance().clear()
    paths = [f"paths.log_dir={tmp_path / 'logs'}", f"paths.checkpoint_dir={tmp_path / 'checkpoints'}"]
    with initialize_config_dir(str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=[*(QUICK if quick else []), *paths, *overrides], return_hydra_config=True)
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "output")
        cfg.hydra.runtime.output_dir = str(tmp_path / "output")
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]  # as in a real run: the job sees its config, Hydra's lives in HydraConfig
    return cfg
