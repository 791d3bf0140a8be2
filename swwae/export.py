"""A trained network as an ONNX file that onnxruntime runs with PyTorch's outputs. Pure torch
(onnxscript at export time, onnxruntime to check: ``pip install -e ".[onnx]"``).

The graph: ``image`` (batch, C, H, W) in [0, 1] -> ``recon`` (batch, C, H, W), ``logits``
(batch, classes; only with a classifier head) and ``top_what`` (the top stage's what, the
code), in eval mode, with a dynamic batch axis (the image size is fixed: the head's size
depends on it).

torch's dynamo exporter (``torch.onnx.export(..., dynamo=True)``, the default since torch
2.9) is the one that works: it traces the network with ``torch.export`` and translates hard
unpooling, max pooling's own backward kernel, into ONNX ScatterElements with add (the exact
adjoint: windows that overlap add up, as ours do), and the soft pool and splat into plain
ops. The older TorchScript exporter has no translation for
``aten::max_pool2d_with_indices_backward`` and fails on every hard-where network. Every
pooling mode exports (tests/test_export.py checks each in onnxruntime against PyTorch).
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path

import torch
from torch import Tensor, nn

from swwae.errors import DiskError, ExportError, one_line
from swwae.install import install_extra
from swwae.model import SWWAE, eval_mode
from swwae.pretrained import check_can_write, reason

INPUT = "image"
ONNX_SUFFIX = ".onnx"  # what an export may replace: never a checkpoint, weights or a device

# helpers


def output_names(net: SWWAE) -> list[str]:
    return ["recon", *(["logits"] if net.classifier is not None else []), "top_what"]


def example_images(net: SWWAE, batch: int, seed: int = 0) -> Tensor:
    """Random images in [0, 1], shaped as the network takes them, on its device (the same values
    on any: a network on a GPU is traced and checked there)."""
    generator = torch.Generator().manual_seed(seed)
    return torch.rand(batch, *net.image_shape, generator=generator).to(next(net.parameters()).device)


def onnx_runtime():
    try:
        import onnxruntime
    except ImportError:
        return None
    return onnxruntime


# classes


class InferenceGraph(nn.Module):
    """The network's inference outputs as a tuple of tensors, what an ONNX graph returns:
    reconstruction, logits (with a head), top what."""

    def __init__(self, net: SWWAE):
        super().__init__()
        self.net = net

    def forward(self, image: Tensor) -> tuple[Tensor, ...]:
        out = self.net(image)
        return (out.recon, *([out.logits] if out.logits is not None else []), out.whats[-1])


# exporting


def check_onnx_target(path: str | Path) -> Path:
    """One line when an ONNX file cannot be written to ``path``: onnxscript missing, a folder
    there, or a name without ``.onnx`` (``ExportError``: the file there is replaced, and a
    checkpoint, a model folder's weights or a device is no place for it), a folder that takes no
    file (``DiskError``). Cheap, so ``scripts/export.py`` asks it before any work."""
    try:
        import onnxscript  # noqa: F401 - torch's dynamo exporter needs it
    except ImportError:
        raise ExportError(f"ONNX export needs onnx and onnxscript: {install_extra('onnx')}") from None
    path = Path(path)
    if path.is_dir():
        raise ExportError(f"{path} is a folder: name the .onnx file to write")
    if path.suffix.lower() != ONNX_SUFFIX:
        raise ExportError(
            f"{path} is no {ONNX_SUFFIX} name: the ONNX file replaces what is there, so name a {ONNX_SUFFIX} file"
        )
    check_can_write(path, f"the ONNX file {path}")
    return path


def export_onnx(net: SWWAE, path: str | Path, *, opset: int | None = None) -> Path:
    """Write ``net``'s inference graph to ``path`` (one file, weights inside; written to a
    temporary file first, so a failed export leaves an older file whole). One line when
    onnxscript is missing or the exporter fails (``ExportError``), or the disk (``DiskError``)."""
    path = check_onnx_target(path)
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    graph = InferenceGraph(net)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with eval_mode(net), torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                graph,
                (example_images(net, 2),),
                dynamo=True,
                opset_version=opset,
                input_names=[INPUT],
                output_names=output_names(net),
                dynamic_shapes={INPUT: {0: torch.export.Dim("batch")}},
            )
            program.save(str(temp), external_data=False)
        os.replace(temp, path)
    except OSError as err:  # a full disk, a folder made read-only meanwhile
        raise DiskError(f"writing the ONNX file {path} failed: {reason(err)}") from None
    except Exception as err:  # noqa: BLE001 - the exporter fails in many ways; one line says which
        raise ExportError(
            f"ONNX export of {net.arch} (pool_mode={net.pool_mode}) failed: {one_line(err, limit=300)}"
        ) from None
    finally:
        temp.unlink(missing_ok=True)
    return path


def check_onnx(path: str | Path, net: SWWAE, images: Tensor | None = None) -> dict[str, float] | None:
    """Run the ONNX file in onnxruntime on ``images`` (default: 3 random ones, another batch
    size than the export's) and return, per output, its largest difference from PyTorch's:
    absolute for values up to 1, relative above (float32 sums of thousands of terms, such
    as large logits, round differently in the last bits); None without onnxruntime."""
    runtime = onnx_runtime()
    if runtime is None:
        return None
    session = runtime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    images = example_images(net, 3, seed=1) if images is None else images
    with eval_mode(net), torch.no_grad():  # where the network is: the caller's network stays there
        expected = [t.cpu() for t in InferenceGraph(net)(images.to(next(net.parameters()).device))]
    got = session.run(None, {INPUT: images.cpu().numpy()})
    names = [o.name for o in session.get_outputs()]
    return {
        name: float(((torch.from_numpy(g) - e).abs() / e.abs().clamp(min=1)).max())
        for name, g, e in zip(names, got, expected)
    }


def onnx_signature(path: str | Path) -> str:
    """``image (batch, 1, 28, 28) -> recon (batch, 1, 28, 28), ...``, read from the file."""
    import onnx

    model = onnx.load(str(path), load_external_data=False)

    def shape(value) -> str:
        dims = [d.dim_param or str(d.dim_value) for d in value.type.tensor_type.shape.dim]
        return f"{value.name} ({', '.join(dims)})"

    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), "?")
    return (
        f"opset {opset}: {', '.join(shape(v) for v in model.graph.input)} -> "
        f"{', '.join(shape(v) for v in model.graph.output)}"
    )
