"""Export a trained network: a model folder (config.json + model.safetensors, no pickle, and a
model card README.md; the Hugging Face Hub's layout) and/or an ONNX file, each read back and
checked.

    python scripts/export.py checkpoints/swwae_hard_mnist_sample_seed0/best.ckpt --onnx m.onnx --to m/
    python scripts/export.py m/ --onnx m.onnx          # from a model folder

The folder loads with ``swwae.load("m/")`` (no Lightning, no Hydra, nothing that runs code),
and gives the same outputs bit for bit: checked here on random images. It is written whole or
not at all: beside itself first, then swapped in (other files in it are kept), so a kill, a
full disk or a read-only folder leaves an existing ``m/`` as it was; the folder it is in must
take a new folder. Weights that are not finite (NaN, infinity) are refused before anything is
written. The ONNX file maps
``image`` (batch, C, H, W) in [0, 1] to ``recon``, ``logits`` (with a classifier head) and
``top_what``, with a dynamic batch axis; with onnxruntime installed
(``pip install -e ".[onnx]"``) it is run here and compared with PyTorch's outputs.
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

from pathlib import Path

import torch

import swwae
from swwae.cli import one_line_errors, script_parser
from swwae.errors import ConfigError, ExportError
from swwae.export import check_onnx, check_onnx_target, example_images, export_onnx, onnx_signature
from swwae.install import install_extra
from swwae.pretrained import CONFIG_FILE, WEIGHTS_FILE, check_finite, check_folder_target
from swwae.progress import progress

ONNX_TOLERANCE = 1e-5

# helpers


def size(path: Path) -> str:
    return f"{path.stat().st_size / 1e3:,.0f} kB"


def described(net) -> str:
    classes = f"{net.classifier[-1].out_features} classes" if net.classifier is not None else "no classifier"
    parameters = sum(p.numel() for p in net.parameters())
    return (
        f"{net.arch}, pool_mode={net.pool_mode}, {'x'.join(map(str, net.image_shape))} images, {classes}, "
        f"{parameters:,} parameters"
    )


def export_folder(net, folder: Path) -> str:
    """Write the folder (its model card with the run's test metrics when its metrics.json
    measured these very weights), load it back, compare outputs bit for bit."""
    swwae.save_pretrained(net, folder)
    again = swwae.load(folder)
    images = example_images(net, 4)
    with torch.no_grad():
        same = torch.equal(net(images).recon, again(images).recon)
    if not same:
        raise ExportError(f"{folder} does not load back to the same network (outputs differ)")
    return (
        f"wrote {folder}/ ({CONFIG_FILE}, {WEIGHTS_FILE}: {size(folder / WEIGHTS_FILE)}); "
        f'swwae.load("{folder}/") gives the same outputs, bit for bit'
    )


def export_onnx_file(net, path: Path) -> str:
    """Write the ONNX file and, with onnxruntime, run it against PyTorch."""
    export_onnx(net, path)
    line = f"wrote {path} ({size(path)}, {onnx_signature(path)})"
    differences = check_onnx(path, net)
    if differences is None:
        return line + f"; not run: onnxruntime is not installed ({install_extra('onnx')})"
    worst = max(differences.values())
    if not worst <= ONNX_TOLERANCE:
        raise ExportError(
            f"{path}: onnxruntime's outputs differ from PyTorch's by up to {worst:.2g} "
            f"(tolerance {ONNX_TOLERANCE:g}): " + ", ".join(f"{k} {v:.2g}" for k, v in differences.items())
        )
    return line + f"; onnxruntime matches PyTorch to {worst:.1e} (3 images; relative above 1)"


@one_line_errors
def main(argv=None) -> int:
    parser = script_parser(__doc__)
    parser.add_argument("model", type=Path, help="a checkpoint (.ckpt) of a run, or a model folder")
    parser.add_argument(
        "--to",
        type=Path,
        default=None,
        metavar="FOLDER",
        help="write the model folder (config.json + model.safetensors) here",
    )
    parser.add_argument("--onnx", type=Path, default=None, metavar="FILE", help="write the ONNX file here")
    args = parser.parse_args(argv)
    if args.to is None and args.onnx is None:
        raise ConfigError("nothing to do: name --to FOLDER, --onnx FILE, or both")
    net = swwae.load(args.model)
    check_finite(net.state_dict(), str(args.model))  # NaN weights: NaN outputs, which no check could compare
    if args.to is not None:  # bad targets: one error line before any step starts
        check_folder_target(args.to)
    if args.onnx is not None:
        check_onnx_target(args.onnx)
    print(f"read {args.model}: {described(net)}", flush=True)
    steps = [(f"model folder {args.to}/", lambda: export_folder(net, args.to))] if args.to else []
    if args.onnx is not None:  # the slow one (torch's dynamo exporter, then onnxruntime)
        steps.append((f"ONNX file {args.onnx}", lambda: export_onnx_file(net, args.onnx)))
    for _, export in progress(steps, "export", name=lambda step: step[0]):
        print(export(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
