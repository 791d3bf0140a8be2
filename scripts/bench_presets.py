"""What the paper's experiments cost: seconds per epoch and peak memory of each preset under
``configs/experiment/paper/``, measured on CPU at a reduced size with a GPU estimate, or
measured on a GPU; and the peak RSS of loading STL-10's 100,000 unlabelled images.

    python scripts/bench_presets.py                        # every paper preset, 2 threads
    python scripts/bench_presets.py --presets stl10 cifar10 --steps 3 --batch 16
    python scripts/bench_presets.py --stl10-rss 100000     # + the STL-10 loader's peak RSS
    python scripts/bench_presets.py --device cuda [--precision bf16-mixed]   # measured on a GPU
    python scripts/bench_presets.py --device cuda --presets cifar10 --precision bf16-mixed \
        --channels-last --compile --loader        # the GPU settings, and the data loader feeding it
    python scripts/bench_presets.py --device cuda --presets cifar10 --profile   # + where a step's time goes

Each preset's network (``model.arch``, batch norm, dropout, its loss terms) trains for a few
steps on random images of its data's shape; the median step gives seconds per image, times
the images of one epoch gives seconds per epoch (its training split, labelled and unlabelled;
in a semi-supervised preset every batch adds its labelled samples to that pass, a third more:
``epoch_images``). On the CPU (the default) the batch is reduced (``--batch``, 32), and the GPU column
is an estimate, not a measurement: the step's FLOPs (``torch.utils.flop_counter``) over one
epoch, at ``--gpu-tflops`` sustained (default 15: about half of an A100's dense TF32 peak for
convolutions this size). With ``--device cuda`` the steps run on the GPU at the preset's own
batch size (``data.batch_size``) and ``--precision`` (as ``trainer.precision``), and every
figure is a measurement, with the FLOP rate it achieved and its share of the chip's own matrix
rate, measured first (a large matrix product in the run's precision: bfloat16, or TF32 as the job
sets float32 products). ``--channels-last`` and ``--compile`` are the job's settings of those
names; ``--loader`` feeds each step from the job's loader instead of one fixed batch (random
uint8 images of the data's shape, held on the device as ``data.on_device`` holds them), so the
figure counts data loading too. Peak memory is that of one training step at the measured batch
(``swwae.bench.harness.peak_memory``). ``--profile`` adds, for each preset, where its step's
time goes (``swwae.bench.breakdown``): its kernels' time by kind of work (convolution,
pooling and unpooling, normalisation, ...) against the step's measured time, and the rest, when
the GPU waited for the host.

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
import math
import os
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import torch
from omegaconf import OmegaConf
from torch.utils.flop_counter import FlopCounterMode

from swwae.bench.breakdown import step_breakdown
from swwae.bench.harness import median, peak_memory, set_threads, timed
from swwae.bench.steps import AUTOCAST, PRECISIONS, training_step
from swwae.datasets import DATA_SETS
from swwae.loss import loss_weights, swwae_loss
from swwae.model import SWWAE
from swwae.settings import choose_labelled_per_batch
from swwae.training.composing import compose_train, presets
from swwae.training.data.batching import batch_loader
from swwae.training.process import keep_freed_memory

PRESETS = presets("experiment/paper")


def preset_config(preset: str):
    cfg = compose_train([f"experiment=paper/{preset}"], return_hydra_config=True)
    choice = cfg.hydra.runtime.choices.data
    return cfg, choice


def epoch_images(cfg, data_name: str) -> int:
    """The images one epoch of a preset trains: its training split (the data-set table's
    ``epoch_images``); where labels are hidden (``data.num_labels``, or STL-10's unlabelled
    images, as ``swwae.training.composing.default_monitor`` tells them), an epoch is one pass over
    the split in the label-hidden part of each batch, and every batch adds its labelled samples
    on top (``LabelledBatchSampler``): mnist_semi trains 73,336 images an epoch, not 55,000."""
    split = DATA_SETS[data_name].epoch_images
    data = cfg.data
    if data.get("num_labels") is None and not data.get("unlabelled"):
        return split
    batch = data.batch_size
    labels = data.get("num_labels") or split
    labelled = choose_labelled_per_batch(data.get("labelled_per_batch"), batch, labels, f"{labels} labels")
    return split + math.ceil(split / (batch - labelled)) * labelled


def matrix_rate(device: torch.device, precision: str, size: int = 8192, repeats: int = 10) -> float:
    """The chip's own matrix rate in TFLOP/s: the median of ``repeats`` products of two
    ``size`` x ``size`` matrices, in bfloat16 (bf16-mixed) or float16 (16-mixed), else in float32
    at the job's precision for its products (TF32 where the chip has it)."""
    dtype = AUTOCAST[precision] or torch.float32
    torch.set_float32_matmul_precision("high")  # as the job (swwae.training.process)
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    for _ in range(3):
        a @ b
    return 2 * size**3 / median(timed(lambda: a @ b, device)[0] for _ in range(repeats)) / 1e12


def loader_batches(data_cls, batch: int, device: torch.device):
    """Endless batches from the job's loader over random uint8 images of the data's shape, held
    on ``device`` (``data.on_device``): 20 batches' worth, a quarter of each batch labelled."""
    count = 20 * batch
    images = torch.randint(0, 256, (count, *data_cls.image_shape), dtype=torch.uint8, device=device)
    labels = torch.randint(0, data_cls.num_classes, (count,), device=device)
    labels[torch.arange(count, device=device) % 4 != 0] = -1
    # the images' own device: "cuda" (--device) is not "cuda:0", where they are, to batch_loader's check
    loader = batch_loader(images, labels, batch, shuffle=True, device=images.device)
    while True:
        yield from loader


def measure(
    preset: str,
    batch: int | None,
    steps: int,
    device: torch.device,
    precision: str = "32-true",
    channels_last: bool = False,
    compile: bool = False,
    loader: bool = False,
    profile: bool = False,
) -> dict:
    """One preset's step, measured on ``device``: at ``batch`` images, or the preset's own; with
    the job's ``channels_last`` and ``compile``, fed by its loader (``loader``) or one batch; with
    ``profile``, where the step's time goes too (``breakdown``)."""
    cfg, data_name = preset_config(preset)
    batch = batch or cfg.data.batch_size
    data_cls = DATA_SETS[data_name]  # the data set's facts: image shape, classes
    model_cfg = OmegaConf.to_container(cfg.model, resolve=True)
    model_cfg.pop("_target_")
    net = SWWAE.from_settings(model_cfg, data_cls.image_shape, data_cls.num_classes).to(device).train()
    layout = torch.channels_last if channels_last else torch.contiguous_format
    net = net.to(memory_format=layout)
    forward = torch.compile(net, dynamic=False) if compile else net
    x = torch.rand(batch, *data_cls.image_shape, device=device).contiguous(memory_format=layout)
    y = torch.randint(0, data_cls.num_classes, (batch,), device=device)
    y[batch // 4 :] = -1  # a semi-supervised batch: a quarter labelled
    weights = loss_weights(model_cfg)
    batches = loader_batches(data_cls, batch, device) if loader else None

    def loss():
        images, labels = (x, y) if batches is None else next(batches)
        images = images.contiguous(memory_format=layout)
        return swwae_loss(forward(images), images, labels, **weights)["loss"]

    step = training_step(
        loss,
        net.parameters(),
        lr=1e-3,
        device=device,
        precision=precision,
    )

    torch.backends.cudnn.benchmark = True  # as the job (trainer.benchmark, unless deterministic)
    for _ in range(1 if device.type == "cpu" else 3):  # warm-up (on a GPU: cuDNN's choice of kernels too)
        step()
    seconds = median(timed(step, device)[0] for _ in range(steps))
    with FlopCounterMode(display=False) as flops:
        step()
    epoch = epoch_images(cfg, data_name)  # at the preset's own batch size, whatever the measured one
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
        "s_per_step": seconds,
        "breakdown": step_breakdown(step, device) if profile else None,
    }


def print_breakdowns(results: list[dict], settings: str) -> None:
    """Where each measured preset's step goes, under the tables (``--profile``)."""
    for r in results:
        if r["breakdown"] is not None:
            calls = r["breakdown"].calls
            print(f"\nwhere a step of {r['preset']} goes ({settings}, batch {r['batch']}; {calls} steps profiled):\n")
            print("\n".join(r["breakdown"].table(r["s_per_step"])))


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


def step_options(args) -> dict:
    """What ``measure`` takes of the command line beyond the preset, batch and precision: the same
    on the CPU as on a GPU (a flag the CPU table dropped would be a figure measured without it)."""
    return {f: getattr(args, f, False) for f in ("channels_last", "compile", "loader", "profile")}


def settings_named(args) -> list[str]:
    """The job's settings measured (``--channels-last``, ``--compile``), as the tables' lines name them."""
    return [f for f in ("channels_last", "compile") if getattr(args, f, False)]


def print_cpu_table(args, threads: int) -> None:
    """Measured on the CPU at a reduced batch; the GPU columns estimated from the FLOPs."""
    batch = args.batch or 32
    settings = settings_named(args)
    loader = getattr(args, "loader", False)
    print(
        f"{threads} CPU threads, batch {batch}, median of {args.steps} training steps"
        f"{'' if args.precision == '32-true' else f' in {args.precision}'}{''.join(f', {f}' for f in settings)}"
        f"{', fed by the loader' if loader else ''}; GPU estimate at {args.gpu_tflops:g} TFLOP/s sustained\n"
    )
    print(
        "| preset | data | parameters | GFLOP/image (step) | CPU s/image | CPU per epoch | peak MiB (step) "
        "| GPU per epoch (est.) | epochs | GPU per run (est.) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for preset in args.presets:
        r = measure(preset, batch, args.steps, torch.device("cpu"), args.precision, **step_options(args))
        results.append(r)
        gpu_epoch = r["flops_per_image"] * r["epoch_images"] / (args.gpu_tflops * 1e12)
        print(
            f"| {r['preset']} | {r['data']} | {r['params'] / 1e6:.2f} M | {r['flops_per_image'] / 1e9:.3f} "
            f"| {r['s_per_image'] * 1e3:.1f} ms | {hours(r['s_per_epoch'])} | {r['peak_mib']:.0f} "
            f"| {hours(gpu_epoch)} | {r['epochs']} | {hours(gpu_epoch * r['epochs'])} |"
        )
    print_breakdowns(results, ", ".join(["CPU", args.precision, *settings, *(["loader"] if loader else [])]))


def print_measured_table(args, device: torch.device) -> None:
    """Every figure measured on the GPU, at the presets' own batch sizes unless told."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else str(device)
    batch = f"batch {args.batch}" if args.batch else "each preset's batch size"
    settings = settings_named(args)
    loader = getattr(args, "loader", False)
    rate = matrix_rate(device, args.precision, size=getattr(args, "matrix_size", 8192))
    print(
        f"measured on {name} ({device}), {args.precision}{''.join(f', {f}' for f in settings)}, median of "
        f"{args.steps} training steps at {batch}, torch {torch.__version__}; "
        f"{'fed by the loader from images on the device' if loader else 'one fixed batch: data loading not counted'}; "
        f"the chip's matrix rate, measured: {rate:.0f} TFLOP/s\n"
    )
    print(
        "| preset | data | parameters | batch | GFLOP/image (step) | GPU ms/image | GPU per epoch (measured) "
        "| peak MiB (step) | epochs | GPU per run (measured) | TFLOP/s achieved | of the matrix rate |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    results = []
    for preset in args.presets:
        r = measure(preset, args.batch, args.steps, device, args.precision, **step_options(args))
        results.append(r)
        achieved = r["flops_per_image"] / r["s_per_image"] / 1e12
        print(
            f"| {r['preset']} | {r['data']} | {r['params'] / 1e6:.2f} M | {r['batch']} "
            f"| {r['flops_per_image'] / 1e9:.3f} | {r['s_per_image'] * 1e3:.3f} | {hours(r['s_per_epoch'])} "
            f"| {r['peak_mib']:.0f} | {r['epochs']} | {hours(r['s_per_epoch'] * r['epochs'])} "
            f"| {achieved:.1f} | {achieved / rate:.1%} |"
        )
    print_breakdowns(results, ", ".join([args.precision, *settings, *(["loader"] if loader else [])]))


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
    parser.add_argument("--channels-last", action="store_true", help="as the job's channels_last=true")
    parser.add_argument("--compile", action="store_true", help="as the job's compile=true (inductor)")
    parser.add_argument("--loader", action="store_true", help="each step fed by the job's loader, images on the device")
    parser.add_argument("--profile", action="store_true", help="also where each step's time goes, by kind of work")
    parser.add_argument("--matrix-size", type=int, default=8192, help="of the matrices timed for the chip's rate")
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
