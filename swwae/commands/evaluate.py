"""Evaluate a checkpoint: test metrics, and a PNG of its reconstructions.

    python scripts/evaluate.py checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt
    python scripts/evaluate.py <ckpt> --split val --out recon.png --num-images 16
    python scripts/evaluate.py <ckpt> --embeddings       # + the top whats in TensorBoard's projector

The data set comes from the run config stored in the checkpoint; where it lies is yours
(--data-root, default ./data) and so is fetching it (--download), never the file's. The PNG
is a labelled figure (``swwae.images.evaluation_figure``): a title line (run, checkpoint,
split), then rows named input | reconstruction | where dropped (the same whats decoded
without the switches) | where mask stage k (one row per stage), each image magnified
(nearest neighbour) to at least 84 pixels wide: 3x for MNIST's 28 pixels.

``--embeddings [LOGDIR]`` also writes the top what of up to 1,000 images of the split, their
labels and thumbnails, for TensorBoard's projector (``swwae.training.embeddings``), into
LOGDIR (default: ``<checkpoint>_<split>_embeddings/`` beside the checkpoint); ``tensorboard
--logdir LOGDIR`` shows them in its PROJECTOR tab.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import json
import warnings
from pathlib import Path

import lightning as L
from torch.utils.tensorboard import SummaryWriter

from swwae.cli import one_line_errors, script_parser
from swwae.images import evaluation_figure, save_png
from swwae.training.checkpoints import load_model
from swwae.training.embeddings import write_embedding
from swwae.training.registry import data_of_run

EMBEDDED_IMAGES = 1000


def evaluate(
    checkpoint: Path,
    split: str = "test",
    out: Path | None = None,
    num_images: int = 8,
    data_root: str | None = None,
    embeddings: Path | bool = False,
    download: bool = False,
) -> dict[str, float]:
    """Test (or validation) metrics of ``checkpoint``, its reconstruction PNG and, with
    ``embeddings`` (True: the default folder, or a folder), its projector files."""
    module, config = load_model(checkpoint)
    datamodule = data_of_run(config.get("data"), str(checkpoint), data_root, download)
    datamodule.setup("test")
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    )
    loader = datamodule.test_dataloader() if split == "test" else datamodule.val_dataloader()
    run = trainer.test if split == "test" else trainer.validate
    (results,) = run(module, dataloaders=loader, verbose=False)
    metrics = {k.replace("val/", f"{split}/"): float(v) for k, v in results.items() if not k.endswith("loss")}

    out = out or checkpoint.with_name(f"{checkpoint.stem}_{split}_reconstructions.png")
    images = datamodule.images(split, num_images)
    title = f"{config.get('run_name', checkpoint.parent.name)}: {checkpoint.name}, {split} images"
    save_png(evaluation_figure(module.net, images, title=title), out)
    result = metrics | {"png": str(out)}
    if embeddings:
        folder = checkpoint.with_name(f"{checkpoint.stem}_{split}_embeddings") if embeddings is True else embeddings
        with SummaryWriter(str(folder)) as writer:
            points = write_embedding(
                writer,
                module.net,
                datamodule.images(split, EMBEDDED_IMAGES),
                getattr(datamodule, f"{split}_y")[:EMBEDDED_IMAGES],
            )
        result |= {"embeddings": str(folder), "embedded_images": points}
    return result


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--split", choices=["test", "val"], default="test")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: beside the checkpoint)")
    parser.add_argument("--num-images", type=int, default=8)
    parser.add_argument(
        "--data-root", default=None, help="where the dataset lives (default: the data set's default, ./data)"
    )
    parser.add_argument("--download", action="store_true", help="download the dataset if it is missing")
    parser.add_argument(
        "--embeddings",
        type=Path,
        nargs="?",
        const=True,
        default=False,
        metavar="LOGDIR",
        help="the top whats for TensorBoard's projector (default LOGDIR: beside the checkpoint)",
    )
    warnings.filterwarnings("ignore")
    args = parser.parse_args(argv)
    result = evaluate(
        args.checkpoint, args.split, args.out, args.num_images, args.data_root, args.embeddings, args.download
    )
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
