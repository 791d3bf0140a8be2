"""Evaluate a checkpoint: test metrics, and a PNG of its reconstructions.

    python scripts/evaluate.py checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt
    python scripts/evaluate.py <ckpt> --split val --out recon.png --num-images 16

The data come from the run config stored in the checkpoint (override the folder of a
torchvision dataset with --data-root). The PNG is a labelled figure (``swwae.images.
evaluation_figure``): a title line (run, checkpoint, split), then rows named input |
reconstruction | where dropped (the same whats decoded without the switches) | where mask
stage k (one row per stage), each image magnified (nearest neighbour) to at least 84 pixels
wide: 3x for MNIST's 28 pixels.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

import lightning as L
from hydra.utils import instantiate

from swwae.training.checkpoints import load_model
from swwae.cli import OneLineParser
from swwae.errors import UserError
from swwae.images import evaluation_figure, save_png


def evaluate(checkpoint: Path, split: str = "test", out: Path | None = None, num_images: int = 8,
             data_root: str | None = None) -> dict[str, float]:
    module, config = load_model(checkpoint)
    data_cfg = dict(config["data"])
    if data_root is not None and "root" in data_cfg:
        data_cfg["root"] = data_root
    datamodule = instantiate(data_cfg)
    datamodule.setup("test")
    trainer = L.Trainer(accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                        enable_model_summary=False, enable_progress_bar=False)
    loader = datamodule.test_dataloader() if split == "test" else datamodule.val_dataloader()
    run = trainer.test if split == "test" else trainer.validate
    (results,) = run(module, dataloaders=loader, verbose=False)
    metrics = {k.replace("val/", f"{split}/"): float(v) for k, v in results.items() if not k.endswith("loss")}

    out = out or checkpoint.with_name(f"{checkpoint.stem}_{split}_reconstructions.png")
    images = datamodule.images(split, num_images)
    title = f"{config.get('run_name', checkpoint.parent.name)}: {checkpoint.name}, {split} images"
    save_png(evaluation_figure(module.net, images, title=title), out)
    return metrics | {"png": str(out)}


def main(argv=None) -> int:
    parser = OneLineParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--split", choices=["test", "val"], default="test")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: beside the checkpoint)")
    parser.add_argument("--num-images", type=int, default=8)
    parser.add_argument("--data-root", default=None, help="where the dataset lives, if not where training read it")
    warnings.filterwarnings("ignore")
    try:
        args = parser.parse_args(argv)
        result = evaluate(args.checkpoint, args.split, args.out, args.num_images, args.data_root)
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
