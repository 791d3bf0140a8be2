"""What the paper's experiments cost: seconds per epoch and peak memory of each preset under
``configs/experiment/paper/``, measured on CPU at a reduced size with a GPU estimate, or
measured on a GPU; and the peak RSS of loading STL-10's 100,000 unlabelled images.

    python scripts/bench_presets.py                        # every paper preset, 2 threads
    python scripts/bench_presets.py --presets stl10 cifar10 --steps 3 --batch 16
    python scripts/bench_presets.py --stl10-rss 100000     # + the STL-10 loader's peak RSS
    python scripts/bench_presets.py --device cuda [--precision bf16-mixed]   # measured on a GPU

Each preset's network (``model.arch``, batch norm, dropout, its loss terms) trains for a few
steps on random images of its data's shape; the median step gives seconds per image, times
the images of one epoch (its training split, labelled and unlabelled) gives seconds per
epoch. On the CPU (the default) the batch is reduced (``--batch``, 32), and the GPU column
is an estimate, not a measurement: the step's FLOPs (``torch.utils.flop_counter``) over one
epoch, at ``--gpu-tflops`` sustained (default 15: about half of an A100's dense TF32 peak for
convolutions this size). With ``--device cuda`` the steps run on the GPU at the preset's own
batch size (``data.batch_size``) and ``--precision`` (as ``trainer.precision``), and every
figure is a measurement, with the FLOP rate it achieved; data loading is not counted in
either. Peak memory is that of one training step at the measured batch
(``swwae.bench.harness.peak_memory``).

``--stl10-rss N`` writes N synthetic unlabelled images (N x 27,648 bytes) plus small labelled
files in STL-10's binary format to a temporary folder, loads them with ``data=stl10`` in a
fresh process, and reports its peak resident memory against the images' uint8 size
(torchvision's integrity check is skipped there: the files are synthetic).
"""

from __future__ import annotations

# ruff: noqa: E402
# (the imports below come after choose_threads(), which must run before torch loads)
from swwae.threads import choose_threads

choose_threads()  # first, before torch loads: OpenMP's threads and wait, from the machine (swwae.threads)

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch.utils.flop_counter import FlopCounterMode

from swwae.bench.harness import median, peak_memory, set_threads, timed
from swwae.bench.steps import PRECISIONS, training_step
from swwae.datasets import DATA_SETS
from swwae.loss import loss_weights, swwae_loss
from swwae.model import SWWAE
from swwae.training.composing import compose_train, presets
from swwae.training.process import keep_freed_memory

PRESETS = presets("experiment/paper")


def preset_config(preset: str):
    cfg = compose_train([f"experiment=paper/{preset}"], return_hydra_config=True)
    choice = cfg.hydra.runtime.choices.data
    return cfg, choice


def measure(preset: str, batch: int | None, steps: int, device: torch.device, precision: str = "32-true") -> dict:
    """One preset's step, measured on ``device``: at ``batch`` images, or the preset's own."""
    cfg, data_name = preset_config(preset)
    batch = batch or cfg.data.batch_size
    data_cls = DATA_SETS[data_name]  # the data set's facts: image shape, classes
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    model_cfg.pop("_target_")
    net = SWWAE.from_settings(model_cfg, data_cls.image_shape, data_cls.num_classes).to(device).train()
    x = torch.rand(batch, *data_cls.image_shape, device=device)
    y = torch.randint(0, data_cls.num_classes, (batch,), device=device)
    y[batch // 4 :] = -1  # a semi-supervised batch: a quarter labelled
    weights = loss_weights(model_cfg)
    step = training_step(
        lambda: swwae_loss(net(x), x, y, **weights)["loss"],
        net.parameters(),
        lr=1e-3,
        device=device,
        precision=precision,
    )

    for _ in range(1 if device.type == "cpu" else 3):  # warm-up (on a GPU: cuDNN's choice of kernels too)
        step()
    seconds = median(timed(step, device)[0] for _ in range(steps))
    with FlopCounterMode(display=False) as flops:
        step()
    epoch = DATA_SETS[data_name].epoch_images  # the data-set table (swwae.datasets)
    return {
        "preset": preset,
        "data": data_name,
        "arch": net.arch,
        "params": sum(p.numel() for p in net.parameters()),
        "batch": batch,
        "s_per_image": seconds / batch,
        "epoch_images": epoch,
        "s_per_epoch": seconds / batch * epoch,
        "flops_per_image": flops.get_total_flops() / batch,
        "peak_mib": peak_memory(step, device) / 2**20,
        "epochs": cfg.trainer.max_epochs,
    }


def stl10_rss(images: int) -> tuple[float, float, float]:
    """(peak RSS in GiB of a process that loads STL-10 with ``images`` unlabelled images, its
    peak RSS before loading (Python, torch), the images' uint8 size in GiB)."""
    image_bytes = 3 * 96 * 96
    with tempfile.TemporaryDirectory() as root:
        folder = Path(root) / "stl10_binary"
        folder.mkdir()
        chunk = 4096
        with open(folder / "unlabeled_X.bin", "wb") as f:
            for start in range(0, images, chunk):
                f.write(os.urandom(min(chunk, images - start) * image_bytes))
        for name, n in (("train", 100), ("test", 50)):
            (folder / f"{name}_X.bin").write_bytes(os.urandom(n * image_bytes))
            (folder / f"{name}_y.bin").write_bytes(bytes([1 + i % 10 for i in range(n)]))
        code = textwrap.dedent(f"""
            import resource, torchvision.datasets
            torchvision.datasets.STL10._check_integrity = lambda self: True  # synthetic files
            from swwae.training.data import STL10DataModule
            dm = STL10DataModule(root={root!r}, val_size=20)
            before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
            dm.setup()
            assert len(dm.train_x) == 80 + {images}
            print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, peak = (int(v) / 2**20 for v in out.split()[-2:])
    return peak, before, images * image_bytes / 2**30


def hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{seconds / 60:.1f} min"


def print_cpu_table(args, threads: int) -> None:
    """Measured on the CPU at a reduced batch; the GPU columns estimated from the FLOPs."""
    batch = args.batch or 32
    print(
        f"{threads} CPU threads, batch {batch}, median of {args.steps} training steps"
        f"{'' if args.precision == '32-true' else f' in {args.precision}'}; "
        f"GPU estimate at {args.gpu_tflops:g} TFLOP/s sustained\n"
    )
    print(
        "| preset | data | parameters | GFLOP/image (step) | CPU s/image | CPU per epoch | peak MiB (step) "
        "| GPU per epoch (est.) | epochs | GPU per run (est.) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for preset in args.presets:
        r = measure(preset, batch, args.steps, torch.device("cpu"), args.precision)
        gpu_epoch = r["flops_per_image"] * r["epoch_images"] / (args.gpu_tflops * 1e12)
        print(
            f"| {r['preset']} | {r['data']} | {r['params'] / 1e6:.2f} M | {r['flops_per_image'] / 1e9:.3f} "
            f"| {r['s_per_image'] * 1e3:.1f} ms | {hours(r['s_per_epoch'])} | {r['peak_mib']:.0f} "
            f"| {hours(gpu_epoch)} | {r['epochs']} | {hours(gpu_epoch * r['epochs'])} |"
        )


def print_measured_table(args, device: torch.device) -> None:
    """Every figure measured on the GPU, at the presets' own batch sizes unless told."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    batch = f"batch {args.batch}" if args.batch else "each preset's batch size"
    print(
        f"measured on {name} ({device}), {args.precision}, median of {args.steps} training steps at {batch}, "
        f"torch {torch.__version__}; data loading not counted\n"
    )
    print(
        "| preset | data | parameters | batch | GFLOP/image (step) | GPU ms/image | GPU per epoch (measured) "
        "| peak MiB (step) | epochs | GPU per run (measured) | TFLOP/s achieved |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for preset in args.presets:
        r = measure(preset, args.batch, args.steps, device, args.precision)
        print(
            f"| {r['preset']} | {r['data']} | {r['params'] / 1e6:.2f} M | {r['batch']} "
            f"| {r['flops_per_image'] / 1e9:.3f} | {r['s_per_image'] * 1e3:.3f} | {hours(r['s_per_epoch'])} "
            f"| {r['peak_mib']:.0f} | {r['epochs']} | {hours(r['s_per_epoch'] * r['epochs'])} "
            f"| {r['flops_per_image'] / r['s_per_image'] / 1e12:.1f} |"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", choices=PRESETS, default=PRESETS)
    parser.add_argument(
        "--batch",
        type=int,
        default=None,
        help="images per measured step (default: 32 on the CPU, a reduced size; the preset's on a GPU)",
    )
    parser.add_argument("--steps", type=int, default=5, help="measured steps (the median is kept)")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--device", default="cpu", help="cpu (GPU figures estimated), or cuda (measured there)")
    parser.add_argument("--precision", choices=PRECISIONS, default="32-true", help="as trainer.precision")
    parser.add_argument("--gpu-tflops", type=float, default=15.0, help="sustained TFLOP/s assumed for the estimate")
    parser.add_argument("--stl10-rss", type=int, default=0, metavar="N", help="also load N synthetic unlabelled images")
    args = parser.parse_args(argv)
    threads = set_threads(args.threads)
    keep_freed_memory()
    device = torch.device(args.device)
    if device.type == "cpu":
        print_cpu_table(args, threads)
    else:
        print_measured_table(args, device)
    if args.stl10_rss:
        rss, before, payload = stl10_rss(args.stl10_rss)
        print(
            f"\nSTL-10 loader, {args.stl10_rss:,} unlabelled images ({payload:.2f} GiB as uint8; float32 would "
            f"need {4 * payload:.1f} GiB): peak RSS {rss:.2f} GiB, {rss - before:.2f} GiB above the "
            f"{before:.2f} GiB of the process before loading ({(rss - before) / payload:.2f}x the images)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
