"""Evaluate a checkpoint: test metrics, and a PNG of its reconstructions.

    python scripts/evaluate.py checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt
    python scripts/evaluate.py <ckpt> --split val --out val.png --num-images 16
    python scripts/evaluate.py <ckpt> --embeddings       # + the top whats in TensorBoard's projector

The metrics are printed as JSON first, then the PNG is written: to ``--out`` (a file, or a
folder to put ``recon.png`` in), by default ``recon.png`` in the current folder; never beside
the checkpoint. A place it cannot write is one ``error:`` line before the evaluation starts.
The data set comes from the run config stored in the checkpoint; where it lies is yours
(--data-root, default ./data) and so is fetching it (--download), never the file's. The PNG
is a labelled figure (``swwae.images.evaluation_figure``): a title line (run, checkpoint,
split), then rows named input | reconstruction | where dropped (the same whats decoded
without the switches) | where mask stage k (one row per stage), each image magnified
(nearest neighbour) to at least 84 pixels wide: 3x for MNIST's 28 pixels.

``--embeddings [LOGDIR]`` also writes the top what of up to 1,000 images of the split, their
labels and thumbnails, for TensorBoard's projector (``swwae.training.embeddings``), into
LOGDIR (default: ``logs/<checkpoint>_<split>_embeddings/`` in the current folder, under
TensorBoard's usual root); ``tensorboard --logdir LOGDIR`` shows them in its PROJECTOR tab.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import json
import warnings
from collections.abc import Callable
from pathlib import Path

import lightning as L
from torch.utils.tensorboard import SummaryWriter

from swwae.cli import count, one_line_errors, script_parser
from swwae.commands.outputs import picture_path, write_picture
from swwae.images import evaluation_figure
from swwae.training.checkpoints import load_model
from swwae.training.embeddings import write_embedding
from swwae.training.folders import check_writable
from swwae.training.process import quiet_lightning
from swwae.training.registry import data_of_run

EMBEDDED_IMAGES = 1000
PICTURE = "recon.png"  # in the current folder, unless --out says otherwise
EMBEDDINGS_ROOT = Path("logs")  # TensorBoard's root, as a run's (paths.log_dir)


def evaluate(
    checkpoint: Path,
    split: str = "test",
    out: str | Path | None = None,
    num_images: int = 8,
    data_root: str | None = None,
    embeddings: Path | bool = False,
    download: bool = False,
    show: Callable[[dict], None] | None = None,
) -> dict[str, float]:
    """Test (or validation) metrics of ``checkpoint``, its reconstruction PNG (``out``; default
    ``recon.png`` in the current folder) and, with ``embeddings`` (True: the default folder, or
    a folder), its projector files. ``show`` gets the result before any picture is written: a
    write that fails then leaves the metrics shown. Where it writes is checked first."""
    out = picture_path(out, PICTURE, "--out")
    if embeddings:
        embeddings = EMBEDDINGS_ROOT / f"{checkpoint.stem}_{split}_embeddings" if embeddings is True else embeddings
        check_writable(Path(embeddings), "the projector files", "--embeddings", keep=False)
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
    result = metrics | {"png": str(out)}
    if embeddings:
        embedded = datamodule.images(split, EMBEDDED_IMAGES)
        result |= {"embeddings": str(embeddings), "embedded_images": len(embedded)}
    if show is not None:
        show(result)

    title = f"{config.get('run_name', checkpoint.parent.name)}: {checkpoint.name}, {split} images"
    write_picture(evaluation_figure(module.net, datamodule.images(split, num_images), title=title), out)
    if embeddings:
        labels = getattr(datamodule, f"{split}_y")[:EMBEDDED_IMAGES]
        with SummaryWriter(str(embeddings)) as writer:
            write_embedding(writer, module.net, embedded, labels, names=tuple(getattr(datamodule, "class_names", ())))
    return result


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("checkpoint", type=Path)
    parser.add_argument("--split", choices=["test", "val"], default="test")
    parser.add_argument(
        "--out", type=str, default=None, help=f"the PNG, or a folder for {PICTURE} (default: {PICTURE}, here)"
    )
    parser.add_argument("--num-images", type=count, default=8, help="images in the PNG, at least 1 (default 8)")
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
        help=f"the top whats for TensorBoard's projector (default: {EMBEDDINGS_ROOT}/<checkpoint>_<split>_embeddings)",
    )
    warnings.filterwarnings("ignore")
    quiet_lightning()  # its Trainer's device lines and tips: the metrics and the picture are what it says
    args = parser.parse_args(argv)
    evaluate(
        args.checkpoint,
        args.split,
        args.out,
        args.num_images,
        args.data_root,
        args.embeddings,
        args.download,
        show=lambda result: print(json.dumps(result, indent=2), flush=True),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
