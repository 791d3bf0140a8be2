"""The benchmark scripts keep working: each main() once, on tiny sizes. No timing asserts
(the machine is shared and noisy: docs/architecture.md 5); the numbers are for people to read."""

from __future__ import annotations

import argparse
import ast
import gc
import inspect
import itertools
import math
import os
import re
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.cli import run_cli
from helpers.config import QUICK, ROOT
from helpers.sweeps import write_job
from scripts import bench_epoch, bench_neighbours, bench_pooling, bench_presets, bench_scaling, bench_training
from swwae.bench import breakdown, device_summary, epoch_clock, harness
from swwae.bench.steps import PRECISIONS, training_step
from swwae.commands import where_report
from swwae.loss import swwae_loss
from swwae.model import SWWAE
from swwae.pooling import soft
from swwae.training import trainer_settings
from swwae.training.spec import check_config
from swwae.training.sweep import write_summary

TINY_RUN = [*QUICK, "trainer.limit_val_batches=1", "+trainer.num_sanity_val_steps=0"]


def quoted(file: str, out: str) -> list[str]:
    """The lines of a benchmark's output ``out`` that the device check's summary quotes from ``file``."""
    return next(q for q in device_summary.QUOTES if q.file == file).lines(out)


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny ops on 2 shared cores: one thread is many times faster (no waits at OpenMP barriers)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_bench_pooling(capsys):
    assert bench_pooling.main(["--repeats", "1", "--batch", "2", "--channels", "2", "--size", "8", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "| 2x2 stride 2 | hard |" in out and "| 3x3 stride 2 | soft |" in out
    lines = quoted("bench_pooling.md", out)  # the device check's summary: the tables, without native's rows
    assert lines[0].startswith("input (2, 2, 8, 8) float32") and lines[1].startswith("| case | variant |")
    cases = [line.split(" | ")[:2] for line in lines[3:7]]
    assert cases == [[f"| {c} stride 2", v] for c in ("2x2", "3x3") for v in ("hard", "soft")]
    # --profile: each case's kernels (here ops) by variant, quoted whole
    title = "where each variant's pool + unpool goes, 3x3 stride 2 (3 calls profiled):"
    table = lines[lines.index(title) + 1 :]
    assert table[0] == "| op (ms a call, ops' own time) | native | hard | soft |" and table[-1].startswith("| all (")
    cells = {row.split(" | ")[0][2:]: [cell.strip(" |") for cell in row.split(" | ")[1:]] for row in table[2:]}
    assert cells[soft.SoftPoolFunction.__name__][:2] == ["", ""]  # blank where a variant ran no such op
    assert all(float(ms) > 0 for ms in cells["all (ops' own time)"])
    if soft._triton_ready():  # the fused kernels (here under Triton's interpreter), as on CUDA
        with soft.fused_kernels_on("cpu"):
            assert bench_pooling.main(["--repeats", "1", "--batch", "2", "--channels", "2", "--size", "8"]) == 0
        lines = quoted("bench_pooling.md", capsys.readouterr().out)
        assert [line.split(" | ")[1] for line in lines[3:6]] == ["hard", "soft", "soft (reference)"]
    assert (
        bench_pooling.main(
            [
                "--repeats",
                "1",
                "--batch",
                "2",
                "--channels",
                "2",
                "--size",
                "8",
                "--cases",
                "4x4s4",
                "--no-keep-freed-memory",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "| 4x4 stride 4 | soft |" in out and "2x2" not in out and "glibc default" in out
    with pytest.raises(SystemExit):  # argparse: one line naming the expected form
        bench_pooling.main(["--cases", "3x2s2"])
    assert "KxKsS" in capsys.readouterr().err


def test_bench_training(capsys):
    argv = ["--repeats", "2", "--warmup", "0", "--batch", "4", "--widths", "4", "8", "--channels-last"]
    assert bench_training.main([*argv, "--precision-twin", "bf16-mixed"]) == 0
    out = capsys.readouterr().out
    main, layouts = out.split("channels_last: each variant's step")
    layouts, precisions = layouts.split("bf16-mixed: each variant's step, in bf16-mixed, against the 32-true one")
    for shapes in ("mnist 1x28x28", "cifar10 3x32x32"):
        for variant in ("native", "hard", "soft"):
            assert all(f"| {shapes} | {variant} |" in table for table in (main, layouts, precisions))
    assert "| shapes | variant | plain median ms | channels_last median ms | paired ratio |" in layouts
    assert "| shapes | variant | 32-true median ms | bf16-mixed median ms | paired ratio |" in precisions
    with pytest.raises(SystemExit):  # a twin of the same precision measures nothing: one line
        bench_training.main([*argv, "--precision-twin", "32-true"])
    assert "--precision-twin 32-true is --precision's" in capsys.readouterr().err


def test_bench_training_in_mixed_precision_and_with_the_loss_checks(capsys):
    argv = ["--repeats", "2", "--warmup", "0", "--batch", "4", "--widths", "4", "--shapes", "mnist"]
    assert bench_training.main([*argv, "--precision", "bf16-mixed", "--loss-checks", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "on cpu in bf16-mixed" in out and "| mnist 1x28x28 | soft |" in out
    assert "| watched |" in out and "| read every step |" in out
    lines = quoted("bench_training.md", out)
    assert lines[0].startswith("training step (") and "in bf16-mixed" in lines[0]
    assert [line.split(" |")[1] for line in lines if line.startswith("| mnist")] == [" hard", " soft"]
    assert sum(line.startswith(("| watched |", "| read every step |")) for line in lines) == 2
    # --profile: each variant's step side by side, by kind of work, quoted whole
    side = out.split("where each variant's step goes, mnist (3 steps profiled):\n\n")[1].split("\n\n")[0].splitlines()
    assert side[0] == "| kind of work (ms a step, ops' own time) | native | hard | soft |"
    assert "| pooling and unpooling |" in out and side[-1].startswith("| the step |")
    title = lines.index("where each variant's step goes, mnist (3 steps profiled):")
    assert lines[title + 1 : title + 1 + len(side)] == side


@pytest.mark.parametrize("precision", PRECISIONS)
def test_the_benchmarks_training_step_takes_a_step_at_every_precision(precision):
    """16-mixed goes through a grad scaler (on CPU here, as on a GPU), which must not skip it."""
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.Flatten(), torch.nn.LazyLinear(2))
    x = torch.rand(4, 1, 8, 8)
    net(x)
    before = [p.detach().clone() for p in net.parameters()]
    target = torch.zeros(4, 2)
    step = training_step(lambda: F.mse_loss(net(x), target), net.parameters(), lr=1e-2, precision=precision)
    loss = step()
    assert torch.isfinite(loss) and all(not torch.equal(a, p) for a, p in zip(before, net.parameters()))
    with pytest.raises(ValueError, match="precision must be one of 32-true, bf16-mixed, 16-mixed"):
        training_step(lambda: loss, net.parameters(), lr=1e-2, precision="bf17")


def test_native_twin_is_the_same_network_on_native_pooling():
    hard = bench_training.make_net("hard", (1, 28, 28), [4, 8])
    native = bench_training.make_net("native", (1, 28, 28), [4, 8])
    assert [type(p).__name__ for p in native.pools] == ["NativeMaxPool"] * 2
    x = torch.rand(3, 1, 28, 28)
    # no ties in random data: max unpooling and the adjoint agree, so the two nets agree
    torch.testing.assert_close(native(x).recon, hard(x).recon)


@pytest.mark.slow
def test_bench_epoch(capsys):
    argv = ["--epochs", "2", "--batch", "16", "--train-size", "32", "model.widths=[4,8]", *TINY_RUN]
    assert bench_epoch.main(argv) == 0
    out = capsys.readouterr().out
    assert "| **whole epoch** |" in out and "reconstruction images:" in out and "32 training images" in out
    whole = next(line for line in out.splitlines() if line.startswith("| **whole epoch** |"))
    assert whole.endswith(f"| <= {bench_epoch.TARGET['cpu']}x |")  # the CPU's target, not the table of them


@pytest.mark.slow
def test_bench_epoch_in_turn_the_way_a_gpu_runs_it(capsys):
    """``--device cuda`` runs the job, then the hand loop alone with its images on the device:
    that path, on the CPU (``--in-turn``), without the GPU's utilisation."""
    argv = ["--in-turn", "--epochs", "2", "--batch", "16", "--train-size", "32", "model.widths=[4,8]", *TINY_RUN]
    assert bench_epoch.main(argv) == 0
    out = capsys.readouterr().out
    assert "one after the other; 32 training images" in out
    assert "\n| train.py | " in out and "\n| hand loop | " in out and "| 1.000x |" in out
    assert "nan" not in out and out.count(" | no GPU | ") == 2  # no utilisation to show, said so
    assert "\n| images | " in out and "\n| checkpoints (inside after validation) | " in out  # where the time goes
    lines = quoted("bench_epoch.md", out)
    assert lines[0].startswith("one epoch on the CPU through train.py") and lines[-2].startswith("beyond the hand loop")
    rows = [line.split(" | ")[0] for line in lines if line.startswith("| ") and not line.startswith("|--")]
    assert rows == [
        "| loop", "| train.py", "| hand loop", "| part of an epoch", "| train", "| val (without images)", "| images",
        "| checkpoints (inside after validation)", "| after validation (checkpoint saves, logging, scheduler)",
    ]  # fmt: skip


def test_the_busy_sampler_averages_the_samples_of_a_span(monkeypatch):
    readings = iter([10.0, 30.0, 50.0])
    sampler = harness.BusySampler("cpu", interval=0.01)
    monkeypatch.setattr(sampler, "read", lambda: next(readings, None))
    with sampler:
        while len(sampler.samples) < 3:
            time.sleep(0.01)
    (t0, _), _, (t2, _) = sampler.samples
    assert sampler.between(t0, t2) == 30.0 and math.isnan(sampler.between(t2 + 1, t2 + 2))


@pytest.mark.parametrize(
    "listed, read",
    [
        (["00000000:18:00.0, 7", "00000000:3B:00.0, 42"], 42.0),  # cuda:0 is nvidia-smi's second GPU
        (["00000000:18:00.0, 7"], 7.0),  # one GPU shown: ours, whatever its bus id reads
        (["00000000:18:00.0, 7", "00000000:5E:00.0, 9"], None),  # not ours: no sample, not another's
        (["00000000:3B:00.0, [N/A]"], None),  # a MIG slice
    ],
)
def test_the_busy_sampler_without_nvml_reads_nvidia_smis_line_of_its_gpu_by_its_bus(monkeypatch, listed, read):
    """Without NVML's bindings (the GPU image has none: torch.cuda.utilization raises) the sampler
    asks nvidia-smi, whose indices are not CUDA's (under CUDA_VISIBLE_DEVICES=3, cuda:0 is its GPU
    3): it reads the line of the GPU's PCI bus, as both see it."""
    import subprocess

    def no_nvml(device=None):
        raise ModuleNotFoundError("nvidia-ml-py does not seem to be installed")

    bus = types.SimpleNamespace(pci_domain_id=0, pci_bus_id=0x3B, pci_device_id=0)
    monkeypatch.setattr(torch.cuda, "utilization", no_nvml)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: bus)
    monkeypatch.setattr(subprocess, "run", lambda command, **kwargs: types.SimpleNamespace(stdout="\n".join(listed)))
    assert harness.BusySampler("cuda").read() == read


@pytest.mark.slow
def test_bench_scaling(capsys):
    argv = ["--sizes", "16", "32", "--widths", "4", "--base-width", "4", "--epochs", "2", "--batch", "16", *TINY_RUN]
    assert bench_scaling.main(argv) == 0
    out = capsys.readouterr().out
    assert "linear fit, epoch:" in out and "| [4, 8] |" in out and "default run" in out


@pytest.mark.slow
def test_bench_neighbours(capsys):
    """The default's child, alone and beside a busy process: the table and the verdict."""
    assert bench_neighbours.main(["--quick", "--candidates", "default", "--neighbours", "1"]) == 0
    out = capsys.readouterr().out
    assert "beside 1 busy processes (spin)" in out and "\n| default | " in out
    assert "default: 1.000x the fastest alone (bar 1.05x), 1.000x the fastest busy (bar 1.10x): meets the bars" in out


def test_bench_neighbours_children_start_with_the_candidates_settings_only(monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "7")
    monkeypatch.setenv("KMP_BLOCKTIME", "200")
    omp = {"OMP_NUM_THREADS", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME", "MKL_NUM_THREADS"}
    names = ("default", "unset", "PASSIVE", "spin=1000", "threads=1")
    settings = {name: {k: v for k, v in bench_neighbours.child_env(name).items() if k in omp} for name in names}
    assert settings == {
        "default": {},
        "unset": {},
        "PASSIVE": {"OMP_WAIT_POLICY": "PASSIVE"},
        "spin=1000": {"GOMP_SPINCOUNT": "1000", "KMP_BLOCKTIME": "1"},
        "threads=1": {"OMP_NUM_THREADS": "1"},
    }
    with pytest.raises(SystemExit):
        bench_neighbours.main(["--candidates", "spin=lots"])
    assert "unknown candidate 'spin=lots'" in capsys.readouterr().err


@pytest.mark.slow
def test_bench_presets(capsys):
    assert (
        bench_presets.main(
            ["--presets", "mnist_pool_size", "svhn_1000", "--batch", "2", "--steps", "1", "--stl10-rss", "60"]
        )
        == 0
    )
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith("| mnist_pool_size") or line.startswith("| svhn")]
    assert len(rows) == 2 and "| mnist_sample |" in rows[0] and "| svhn |" in rows[1]
    assert "STL-10 loader, 60 unlabelled images" in out and "peak RSS" in out


def test_bench_presets_measured_table_the_one_a_gpu_prints(capsys):
    """``--device cuda`` prints every figure measured; its code path, run here on the CPU."""
    args = argparse.Namespace(
        presets=["mnist_pool_size"], batch=2, steps=1, precision="bf16-mixed", channels_last=True, loader=True,
        matrix_size=64, profile=True,
    )  # fmt: skip
    bench_presets.print_measured_table(args, torch.device("cpu"))
    out = capsys.readouterr().out
    assert "bf16-mixed, channels_last," in out and "fed by the loader" in out and "matrix rate, measured" in out
    assert "GPU per epoch (measured)" in out and "(est.)" not in out
    row = next(line for line in out.splitlines() if line.startswith("| mnist_pool_size"))
    assert "| mnist_sample | 0.01 M | 2 |" in row
    # --profile: where the step's time goes, under the table; the device check's summary quotes both
    title = "where a step of mnist_pool_size goes (bf16-mixed, channels_last, loader, batch 2; 3 steps profiled):"
    breakdown = out.split(title + "\n\n")[1].splitlines()
    assert breakdown[0].startswith("| kind of work |") and breakdown[-1].startswith("| the step, unprofiled (median) |")
    assert "| convolution |" in out and "| pooling and unpooling |" in out
    lines = quoted("bench_presets.md", out)
    assert lines[0].startswith("measured on cpu") and lines[1].startswith("| preset |") and lines[3] == row
    assert lines[4:] == [title, *breakdown]


def test_bench_presets_on_the_cpu_measures_the_settings_it_is_given(monkeypatch, capsys):
    """``--channels-last``, ``--compile`` and ``--loader`` on the CPU were parsed and dropped: its
    table was of the plain step, its line naming none of them. Each is measured, and named."""
    asked = []

    def measure(*args, **options):
        asked.append(options)
        raise Parsed()

    monkeypatch.setattr(bench_presets, "measure", measure)
    argv = ["--presets", "cifar10", "--channels-last", "--compile", "--loader", "--profile"]
    with pytest.raises(Parsed):
        bench_presets.main(argv)
    assert asked == [{"channels_last": True, "compile": True, "loader": True, "profile": True}]
    assert "training steps, channels_last, compile, fed by the loader; GPU estimate" in capsys.readouterr().out


@pytest.mark.parametrize("preset", ["mnist_semi", "svhn_1000", "stl10", "cifar10", "mnist_pool_size"])
def test_bench_presets_counts_the_images_an_epoch_trains(preset):
    """A semi-supervised epoch is one pass over the training split in the label-hidden part of
    each batch, and the labelled quarter of every batch comes on top: the cost table counted the
    split alone (mnist_semi: 55,000 of the 73,336 images an epoch trains), a quarter short."""
    from swwae.datasets import DATA_SETS
    from swwae.training.data.batching import LabelledBatchSampler

    cfg, data = bench_presets.preset_config(preset)
    split = DATA_SETS[data].epoch_images
    if preset in ("cifar10", "mnist_pool_size"):  # every label kept: an epoch is the split
        assert bench_presets.epoch_images(cfg, data) == split
        return
    labels = cfg.data.num_labels or 900  # STL-10: a fold's 1,000 labels less the 100 validating
    sampler = LabelledBatchSampler(split, torch.arange(labels), cfg.data.batch_size, cfg.data.batch_size // 4)
    trained = sum(len(batch.labelled) + len(batch.unlabelled) for batch in sampler)
    assert bench_presets.epoch_images(cfg, data) == trained
    assert preset != "mnist_semi" or trained == 573 * 128 - 8  # 55,000 = 572 x 96 + 88: a last batch of 120


def test_bench_presets_loader_gathers_on_a_gpu_named_without_its_index(monkeypatch):
    """``--device cuda --loader``: the images made on ``torch.device("cuda")`` are on cuda:0, and the
    loader gathers them there (batch_loader refuses a device other than the images'). Fake tensors:
    CUDA tensors without a GPU; the loader itself is built, not iterated."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from swwae.datasets import DATA_SETS
    from swwae.training.data.batching import batch_loader

    def built(x, y, batch, **kwargs):
        batch_loader(x, y, batch, **kwargs)  # its check of the device
        return [(x[:batch], y[:batch])]

    monkeypatch.setattr(bench_presets, "batch_loader", built)
    with FakeTensorMode():
        try:
            images, _ = next(bench_presets.loader_batches(DATA_SETS["mnist_sample"], 4, torch.device("cuda")))
        except RuntimeError as e:  # torch before 2.11 starts CUDA for some ops on fake CUDA tensors
            if not str(e).startswith("CUDA error"):
                raise
            pytest.skip(f"this torch fakes no CUDA tensor without a GPU: {str(e).splitlines()[0]}")
    assert images.device == torch.device("cuda", 0)


def test_an_ops_kind_is_the_first_its_names_give_innermost_first():
    """An op no kind names takes the kind of the first op around it that one names: its time is
    the work of that op (a multiplication inside Adam's step is the optimiser's)."""
    assert breakdown.kind_of(["aten::lerp_", "Optimizer.step#Adam.step"]) == ("optimiser", "Optimizer.step#Adam.step")
    evaluate = breakdown.EVALUATE  # how the backward records an autograd node
    assert breakdown.kind_of(["aten::mul", "FusedSoftPoolBackward", f"{evaluate}FusedSoftPoolBackward"]) == (
        "pooling and unpooling",
        "FusedSoftPoolBackward",
    )
    assert breakdown.kind_of([f"{evaluate}NativeBatchNormBackward0"]) == ("normalisation", "NativeBatchNormBackward0")
    assert breakdown.kind_of(["aten::convolution_backward", "Optimizer.step#Adam.step"])[0] == "convolution"
    assert breakdown.kind_of(["aten::add", "aten::mean"]) == (breakdown.OTHER, "aten::add")


def test_a_gpu_steps_kernel_time_leaves_out_the_gpu_timelines_copies_of_its_ranges(monkeypatch):
    """On a GPU the profiler copies each ``record_function`` range (Adam's ``Optimizer.step``) onto
    the GPU's timeline, a ``gpu_user_annotation`` spanning kernels counted already: no kernel of its
    own (pytorch issue 130730). Made-up events of a 4 ms step: a 2 ms convolution kernel, a 1 ms Adam
    kernel and Adam's range on the GPU; the GPU waited 1 ms for the host."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import EventList, FunctionEvent

    if "is_user_annotation" not in inspect.signature(FunctionEvent).parameters:
        pytest.skip(f"torch {torch.__version__}'s profiler marks no range as a user annotation")
    cuda = dict(use_device="cuda", device_type=DeviceType.CUDA)
    conv = FunctionEvent(id=1, name="aten::convolution", thread=1, start_us=0, end_us=100, use_device="cuda")
    conv.append_kernel("sm90_xmma_fprop_implicit_gemm", 0, 2000)
    adam = FunctionEvent(id=2, name="aten::_fused_adam_", thread=1, start_us=200, end_us=300, use_device="cuda")
    adam.append_kernel("multi_tensor_apply_kernel", 0, 1000)
    events = EventList(
        [
            conv,
            adam,
            FunctionEvent(id=3, name="sm90_xmma_fprop_implicit_gemm", thread=7, start_us=0, end_us=2000, **cuda),
            FunctionEvent(id=4, name="multi_tensor_apply_kernel", thread=7, start_us=2000, end_us=3000, **cuda),
            FunctionEvent(
                id=5, name="Optimizer.step#Adam.step", thread=8, start_us=2000, end_us=3000, is_user_annotation=True,
                **cuda,
            ),
        ],
        use_device="cuda",
    )  # fmt: skip
    monkeypatch.setattr(breakdown, "_profiled", lambda step, device, calls: (events, 0.004, True))
    step = breakdown.step_breakdown(lambda: None, "cuda", calls=1)
    assert step.total == pytest.approx(0.003) and step.idle(0.004) == pytest.approx(0.001)
    assert breakdown.kernel_times(lambda: None, "cuda", calls=1) == pytest.approx(
        {"sm90_xmma_fprop_implicit_gemm": 0.002, "multi_tensor_apply_kernel": 0.001}
    )


def test_a_cuda_kernels_short_name_is_its_own_and_its_functors():
    """The names CUDA's profiler gives torch's kernels (demangled C++, hundreds of characters) fit
    a table's row: the kernel's own name and the functor it runs; other names stay as they are."""
    fill = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
    )
    assert breakdown.short_kernel_name(fill) == "vectorized_elementwise_kernel FillFunctor"
    mul = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, ...)"
    )
    assert breakdown.short_kernel_name(mul) == "vectorized_elementwise_kernel MulFunctor"  # the innermost
    pool = "void at::native::(anonymous namespace)::max_pool_forward_nchw<float, float>(int, float const*, long)"
    assert breakdown.short_kernel_name(pool) == "max_pool_forward_nchw"
    for name in ("_pool_backward_gather", "Memcpy DtoD (Device -> Device)", "sm90_xmma_fprop_implicit_gemm"):
        assert breakdown.short_kernel_name(name) == name


def test_a_steps_time_by_kind_of_work_names_the_ops_that_ran_it(capfd):
    """``swwae.bench.breakdown`` on a real step: each kind of work that ran is there, under the op
    that named it (an op inside the soft where's autograd Functions is the where's, one inside
    Adam's step the optimiser's), and on the CPU the kinds add up to the profiled ops' time."""
    settings = {"arch": "(4)3c-2p-10fc", "pool_mode": "soft", "batch_norm": True, "dropout": 0.1}
    net = SWWAE.from_settings(settings, (1, 8, 8), 10)
    optimiser = torch.optim.Adam(net.parameters())
    x, y = torch.rand(4, 1, 8, 8), torch.randint(0, 10, (4,))

    def step():
        optimiser.zero_grad()
        swwae_loss(net(x), x, y)["loss"].backward()
        optimiser.step()

    step()
    result = breakdown.step_breakdown(step, "cpu", calls=2, top=10)
    assert capfd.readouterr().err == ""  # the profiler's own logging is silenced
    kinds = {"convolution", "pooling and unpooling", "normalisation", "activation and dropout", "loss", "optimiser"}
    assert kinds <= set(result.seconds) and result.calls == 2 and result.device == "cpu"
    where = {soft.SoftPoolFunction.__name__, soft.WindowSplat.__name__}
    assert where <= set(result.top["pooling and unpooling"])
    assert result.top["optimiser"] and all(name.startswith("Optimizer.") for name in result.top["optimiser"])
    assert math.isclose(sum(result.seconds.values()), result.total) and 0 < result.total
    rows = result.table(step_seconds=result.wall)
    assert len(rows) == 2 + len(result.seconds) + 3  # header, rule, the kinds, idle, profiled, unprofiled
    shares = [float(row.split(" | ")[2].rstrip("%")) for row in rows[2:-3]]
    assert math.isclose(sum(shares), 100 * result.total / result.wall, abs_tol=0.1 * len(shares))


# the shared harness (swwae/bench/harness.py)


def test_time_interleaved_runs_round_robin_after_the_warmup():
    calls = []
    steps = {"a": lambda: calls.append("a"), "b": lambda: calls.append("b")}
    timings = harness.time_interleaved(steps, repeats=3, warmup=1)
    assert calls == ["a", "b"] * 4
    assert [len(timings.seconds[n]) for n in steps] == [3, 3] and [len(timings.faults[n]) for n in steps] == [3, 3]
    assert timings.paired_ratio("a", "a") == timings.best_ratio("b", "b") == 1.0
    first, middle, third = timings.quartiles("a")
    assert first <= middle == timings.median("a") <= third


def test_ratios():
    timings = harness.Timings({"x": [2.0, 4.0, 9.0], "base": [1.0, 4.0, 3.0]}, {"x": [0] * 3, "base": [0] * 3})
    assert timings.paired_ratio("x", "base") == 2.0  # rounds: 2, 1, 3
    assert timings.ratio_of_medians("x", "base") == 4.0 / 3.0
    assert timings.best_ratio("x", "base") == 2.0
    assert harness.median([]) != harness.median([])  # nan


def test_peak_memory_is_the_high_water_mark_and_quiet(capfd):
    def step():
        a = torch.empty(2**18)  # 1 MiB
        b = torch.empty(2**18)
        del a, b
        torch.empty(2**18)

    assert harness.peak_memory(step, "cpu") == 2 * 2**20
    assert capfd.readouterr().err == ""  # the profiler's own logging is silenced


def test_peak_memory_counts_only_what_the_call_allocated():
    # a block made while an earlier call was measured (torch then knows its size), freed inside the
    # next one by the garbage collector: a free the next call's count would go below zero with
    kept = []

    def made_in_a_cycle():
        block = [torch.empty(2**20)]  # 4 MiB
        block.append(block)
        kept.append(block)

    harness.peak_memory(made_in_a_cycle, "cpu")
    kept.clear()

    def step():
        gc.collect()
        torch.empty(2**18)  # 1 MiB

    assert harness.peak_memory(step, "cpu") == 2**20


def test_the_harness_waits_for_and_measures_the_gpu_it_is_given_not_the_current_one(monkeypatch):
    """``--device cuda:1`` (bench_pooling, bench_training) while cuda:0 is current: the timings
    wait for cuda:1's queued work and the peak memory is cuda:1's. torch.cuda's functions without
    a device act on the current one: a time without cuda:1's kernels, cuda:0's counters."""
    asked = []

    def on(name, value=None):
        def call(device=None):
            asked.append((name, None if device is None else torch.device(device)))
            return value

        return call

    for name, value in (
        ("synchronize", None),
        ("reset_peak_memory_stats", None),
        ("memory_allocated", 2**20),
        ("max_memory_allocated", 3 * 2**20),
    ):
        monkeypatch.setattr(torch.cuda, name, on(name, value))
    gpu = torch.device("cuda", 1)
    harness.timed(lambda: None, gpu)
    harness.time_interleaved({"a": lambda: None}, repeats=1, device="cuda:1")
    assert harness.peak_memory(lambda: None, "cuda:1") == 2 * 2**20
    assert asked and all(device == gpu for _, device in asked), asked


@pytest.mark.slow
def test_a_benchmark_runs_from_another_folder(tmp_path):
    """As a script, from another folder: the harness comes from the package (bench_scaling
    shares swwae.bench.epoch_clock with bench_epoch, which it once imported through sys.path)."""
    result = run_cli(ROOT / "scripts" / "bench_scaling.py", "--help", cwd=tmp_path)
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-2000:]


# the device check (scripts/device_check.sh): what it does on a GPU, tests/test_cuda.py holds


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="with a CUDA device the script runs the checks")
def test_the_device_check_without_a_gpu_says_so_in_one_line_and_exits_0(tmp_path):
    result = run_cli(
        ROOT / "scripts" / "device_check.sh",
        cwd=tmp_path,
        program="bash",
        env={"OUT": str(tmp_path / "out"), "PYTHON": sys.executable},
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "device check: no CUDA device here (torch.cuda.is_available() is False); nothing to check\n"
    assert result.stderr == "" and not (tmp_path / "out").exists()


# python as a CUDA machine's answers the device check: each call recorded (its arguments, NUL-ended,
# one call a line), nothing run but the summary, where SUMMARY_PYTHON names a python to write it
PYTHON_OF_A_GPU_MACHINE = r"""#!/usr/bin/env bash
printf '%s\0' "$@" >>"$CALLS"; printf '\n' >>"$CALLS"
[ "$2" = swwae.bench.device_summary ] && [ -n "$SUMMARY_PYTHON" ] && exec "$SUMMARY_PYTHON" "$@"
case "$1" in
    -c) case "$2" in *is_available*) echo 1 ;; *) echo "torch, CUDA, a GPU" ;; esac ;;
    -) cat >/dev/null ;;
esac
for arg; do case "$arg" in hydra.sweep.dir=*) mkdir -p "${arg#hydra.sweep.dir=}" ;; esac; done  # a sweep's folder
"""
BENCHMARKS = {Path(m.__file__).name: m for m in (bench_epoch, bench_pooling, bench_presets, bench_training)}


class Parsed(Exception):
    """Raised by ``parse_args`` once it has parsed: a benchmark's command line checked, nothing run."""


def parsed(main, argv, monkeypatch) -> argparse.Namespace:
    """What ``main(argv)`` parses its command line into (an argparse error fails the test there)."""
    parse_args = argparse.ArgumentParser.parse_args

    def parse_and_stop(self, args=None, namespace=None):
        raise Parsed(parse_args(self, args, namespace))

    with monkeypatch.context() as patch, pytest.raises(Parsed) as stopped:
        patch.setattr(argparse.ArgumentParser, "parse_args", parse_and_stop)
        main(argv)
    return stopped.value.args[0]


@pytest.mark.slow
def test_every_command_of_the_device_check_is_one_its_benchmark_and_run_take(tmp_path, monkeypatch):
    """A GPU is lent for minutes, rarely: an option or a setting renamed since would cost a step of
    it. The script runs here as on a CUDA machine, with a python that records its calls; each
    benchmark's command line must parse, each epoch run's overrides compose into a valid config."""
    python = tmp_path / "python"
    python.write_text(PYTHON_OF_A_GPU_MACHINE)
    python.chmod(0o755)
    calls = tmp_path / "calls"
    env = {"PYTHON": str(python), "CALLS": str(calls), "OUT": str(tmp_path / "out")}
    result = run_cli(ROOT / "scripts" / "device_check.sh", cwd=tmp_path, program="bash", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = (tmp_path / "out" / "steps.md").read_text().splitlines()
    assert steps and all("| ok |" in step for step in steps), steps
    progress = [line for line in result.stdout.splitlines() if line.startswith("device check, ")]
    rows = [step.strip("| ").split(" | ") for step in steps]  # name, status, seconds (0, or 1 on a loaded machine)
    assert [line.split(": ", 1)[1] for line in progress] == [f"{name}: ok ({seconds} s)" for name, _, seconds in rows]
    invocations = [line.split("\0")[:-1] for line in calls.read_text().splitlines()]
    tests = [call[2:] for call in invocations if call[:2] == ["-m", "pytest"]]
    assert ["-m", "cuda"] in [t[:2] for t in tests] and all((ROOT / a).is_file() for t in tests for a in t if "/" in a)
    benchmarks = [call for call in invocations if call[0].startswith("scripts/bench_")]
    assert len(benchmarks) == len([s for s in steps if s.startswith("| bench_")])
    monkeypatch.setattr(trainer_settings, "cuda_count", lambda: 1)  # the machine the check runs on
    for script, *argv in benchmarks:
        args = parsed(BENCHMARKS[Path(script).name].main, argv, monkeypatch)
        assert args.device == "cuda", script
        if script.endswith("bench_epoch.py"):
            check_config(epoch_clock.compose_config(tmp_path, bench_epoch.run_overrides(args)))
    (report,) = [call[3:] for call in invocations if call[:3] == ["-m", "swwae", "where-report"]]
    parsed(where_report.main, report, monkeypatch)
    (sweep,) = [call[1:] for call in invocations if call[0] == "train.py"]  # a sweep: each of its jobs composes
    assert sweep[0] == "-m"
    swept = [o.split("=", 1) for o in sweep[1:] if not o.startswith(("hydra.", "paths."))]
    for values in itertools.product(*(value.split(",") for _, value in swept)):
        check_config(epoch_clock.compose_config(tmp_path, [f"{key}={v}" for (key, _), v in zip(swept, values)]))


def device_check_stopped_by(tmp_path: Path, signal: str) -> subprocess.CompletedProcess:
    """The device check as on a CUDA machine, its third step's python sending ``signal`` to the
    check as it starts (the pid of the process it then becomes in ``pooling.pid``) and sleeping on
    (but after KILL, which leaves it running on: there it ends at once, left nothing to wait for)."""
    python = tmp_path / "python"
    stopper = f'[ "$1" = scripts/bench_pooling.py ] && echo $$ >"$OUT/pooling.pid" && kill -{signal} "$CHECK"'
    stopper += "" if signal == "KILL" else " && exec sleep 30"
    recorded = PYTHON_OF_A_GPU_MACHINE.index("\n[") + 1  # after the line that records the call
    python.write_text(f"{PYTHON_OF_A_GPU_MACHINE[:recorded]}{stopper}\n{PYTHON_OF_A_GPU_MACHINE[recorded:]}")
    python.chmod(0o755)
    env = {"PYTHON": str(python), "CALLS": str(tmp_path / "calls"), "OUT": str(tmp_path / "out")}
    env["SUMMARY_PYTHON"] = sys.executable
    script = ROOT / "scripts" / "device_check.sh"
    # its output closed, as when the device tool's tee is gone with the rest: every line it prints fails
    return run_cli("-c", f"export CHECK=$$; exec bash {script} >&-", cwd=tmp_path, program="bash", env=env)


FINISHED = ["| CUDA tests (pytest -m cuda) | ok |", "| fused kernels on the GPU (tests/test_fused.py) | ok |"]


@pytest.mark.slow
def test_a_device_check_killed_from_outside_leaves_the_summary_of_the_steps_it_finished_and_the_one_it_was_in(
    tmp_path,
):
    """The GPU window may end before the check does (the device tool kills it) and KILL can't be
    answered: the summary written as the step began, that step marked running, is what is left."""
    result = device_check_stopped_by(tmp_path, "KILL")
    assert result.returncode == -9, result.stdout + result.stderr
    steps = (tmp_path / "out" / "steps.md").read_text().splitlines()
    assert [row.rsplit(" ", 2)[0] for row in steps] == FINISHED  # their rows: as each step ended
    summary = (tmp_path / "out" / "summary.md").read_text()
    pooling = "| bench_pooling.py --device cuda --profile | cut short: running when this summary was written | - |"
    assert lines(*steps, pooling) in summary and "\nWritten as the step marked running began, " in summary


@pytest.mark.slow
def test_a_device_check_stopped_from_outside_ends_its_step_and_writes_its_summary(tmp_path):
    """TERM (the device tool's time limit; INT and HUP alike): the running step's processes end
    (not left running on the GPU), it is noted cut short, every step after it not run, the
    summary written, and the check exits 128 + 15, all at once."""
    result = device_check_stopped_by(tmp_path, "TERM")
    assert result.returncode == 143, result.stdout + result.stderr
    out = tmp_path / "out"
    pid = int((out / "pooling.pid").read_text())
    with pytest.raises(ProcessLookupError):  # the step's process, ended and reaped by its timeout
        os.kill(pid, 0)
    rows = (out / "summary.md").read_text().split("|---|---|---:|\n")[1].split("\n\n")[0].splitlines()
    assert rows == (out / "steps.md").read_text().splitlines() and not (out / "running.txt").exists()
    assert [row.rsplit(" ", 2)[0] for row in rows[:3]] == [
        *FINISHED,
        "| bench_pooling.py --device cuda --profile | cut short: the check was stopped (SIGTERM) |",
    ]
    not_run = rows[3:]
    assert len(not_run) > 10 and all(
        row.endswith(" | not run: the check was stopped (SIGTERM) | 0 |") for row in not_run
    )
    assert not_run[-1].startswith("| bench_epoch.py --device cuda --batch 125 compile=true")  # the last step
    called = [line.split("\0")[0] for line in (tmp_path / "calls").read_text().splitlines()]
    assert called[-2:] == ["scripts/bench_pooling.py", "-m"]  # nothing started after it but the summary


@pytest.mark.slow
def test_the_device_check_with_a_python_without_torch_is_one_error_line(tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n")
    python.chmod(0o755)
    result = run_cli(ROOT / "scripts" / "device_check.sh", cwd=tmp_path, program="bash", env={"PYTHON": str(python)})
    assert result.returncode == 1 and result.stdout == ""
    assert (
        result.stderr
        == f"device check: cannot import torch with {python}: ModuleNotFoundError: No module named 'torch'\n"
    )


@pytest.mark.slow
def test_the_device_check_on_a_gpu_machine_without_swwae_installed_is_one_line_naming_the_offline_way(tmp_path):
    """The lent GPU machine has no internet: an install that failed there is one line pointing to
    the offline recipe, before any step runs. (A python without site-packages: no swwae in it.)"""
    python = tmp_path / "python"
    python.write_text(f'#!/usr/bin/env bash\ncase "$1" in -c) echo 1 ;; -) exec "{sys.executable}" -I -S - ;; esac\n')
    python.chmod(0o755)
    result = run_cli(ROOT / "scripts" / "device_check.sh", cwd=tmp_path, program="bash", env={"PYTHON": str(python)})
    assert result.returncode == 1 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr == (
        "device check: swwae is not installed here: pip install -e '.[dev]' in this folder first"
        " (offline: docs/development.md)\n"
    )
    assert "**A GPU machine without internet**" in (ROOT / "docs" / "development.md").read_text()


def preflight(monkeypatch, capsys, lacking: set[str]) -> tuple[str, str | int | None]:
    """What the device check's install check (its python block, run in this process) prints and
    exits with, where the distributions ``lacking`` are not installed."""
    import importlib.metadata

    script = (ROOT / "scripts" / "device_check.sh").read_text()
    (block,) = re.findall(r"<<'EOF'\n(.*?)^EOF$", script, re.S | re.M)
    version = importlib.metadata.version

    def version_here(name: str) -> str:
        if name in lacking:
            raise importlib.metadata.PackageNotFoundError(name)
        return version(name)

    monkeypatch.setattr(importlib.metadata, "version", version_here)
    status = None
    try:
        exec(compile(block, "device_check.sh", "exec"), {"__name__": "__main__"})
    except SystemExit as exit:
        status = exit.code
    return capsys.readouterr().out, status


def test_the_device_check_names_the_test_stack_it_lacks_for_its_test_steps(monkeypatch, capsys):
    """A GPU machine with swwae's requirements but not pytest-xdist (the test steps' -n 4) nor
    hypothesis (conftest.py's import) ran both test steps to a usage error or a collection error:
    the install check names what those steps lack, so they say so and the benchmarks still run."""
    assert preflight(monkeypatch, capsys, set()) == ("\n", None)
    assert preflight(monkeypatch, capsys, {"pytest-xdist", "hypothesis"}) == ("pytest-xdist, hypothesis\n", None)
    out, status = preflight(monkeypatch, capsys, {"hydra-core", "pytest"})
    assert out == "" and status.startswith("device check: swwae needs hydra-core, not installed here: pip install")
    script = (ROOT / "scripts" / "device_check.sh").read_text()
    assert re.findall(r"^pytest_step ", script, re.M) and not re.findall(r"^step .* -m pytest", script, re.M)
    dev = re.search(r"^dev = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(), re.M).group(1)
    stack = re.search(r"^TEST_STACK = \((.*?)\)", script, re.M).group(1)
    assert {name.strip('" ') for name in stack.split(",")} <= {r.split(">")[0].strip('" ') for r in dev.split(",")}


def test_the_device_checks_steps_fit_its_budget_and_the_budget_its_8_minutes():
    """Each step that must run gets its whole time limit within the check's budget (the budget cuts
    the last ones short otherwise), and the budget fits the 8 minutes the check promises."""
    script = (ROOT / "scripts" / "device_check.sh").read_text()
    budget = int(re.search(r"^budget=(\d+)", script, re.M).group(1))
    limits = [int(limit) for limit in re.findall(r'^(?:step|pytest_step) "[^"]+" (\d+) ', script, re.M)]
    assert len(limits) >= 10 and sum(limits) <= budget <= 8 * 60


def lines(*rows: str) -> str:
    return "\n".join(rows) + "\n"


def test_the_device_checks_tally_of_a_test_step_finished_or_cut_short():
    closing = "=========== 1 failed, 70 passed, 3 skipped in 93.20s (0:01:33) ==========="
    failed = "FAILED tests/test_cuda.py::b - assert 1 == 2"
    finished = lines("tests/test_cuda.py::a PASSED", failed, closing)
    assert device_summary.tally(finished) == [closing, failed]
    assert device_summary.tally(finished, failures=False) == [closing]
    cut = lines("tests/test_cuda.py::a PASSED  [ 1%]", "tests/test_cuda.py::b FAILED  [ 2%]")
    cut += lines("tests/test_cuda.py::c PASSED  [ 3%]")  # -v lines, and no closing line: its time ran out
    assert device_summary.tally("") == device_summary.tally("\n", failures=False) == ["not run (no output)"]
    assert device_summary.tally(cut) == [
        "cut short: 2 passed, 1 failed, 0 errors before its time ran out",
        "tests/test_cuda.py::b FAILED  [ 2%]",
    ]
    # under -n 4 -v: a line as a test starts, one as it ends
    workers = lines("tests/test_cuda.py::a ", "[gw1] [ 1%] PASSED tests/test_cuda.py::a ")
    workers += lines("[gw0] [ 2%] FAILED tests/test_cuda.py::b ", "[gw2] [ 3%] ERROR tests/test_cuda.py::c ")
    assert device_summary.tally(workers) == [
        "cut short: 1 passed, 1 failed, 1 errors before its time ran out",
        "[gw0] [ 2%] FAILED tests/test_cuda.py::b ",
        "[gw2] [ 3%] ERROR tests/test_cuda.py::c ",
    ]


def test_the_device_checks_summary_quotes_the_precision_sweep_and_its_paired_report(tmp_path):
    """The sweep's summary.md, as ``train.py -m`` writes it into the check's folder, and ``swwae
    where-report``'s paired report of it: the lines that count their runs and their tables."""
    sweep = tmp_path / "precision_sweep"
    for number, (seed, precision) in enumerate(itertools.product(range(3), ["32-true", "bf16-mixed"])):
        write_job(sweep, number, "swwae_hard", seed, seed, 0.003, precision=precision)
    write_summary(sweep, plot_too=False)
    report = [str(sweep), "--by", "trainer.precision", "--arms", "32-true", "bf16-mixed"]
    assert where_report.main([*report, "--out", str(tmp_path / "precision_report")]) == 0
    summary = device_summary.summary(tmp_path, 1)
    wanted = {
        "precision_sweep/summary.md": ["6 jobs, 2 configs, 0 failed.", "| config |", "| `trainer.precision=32-true`"],
        "precision_report.md": ["6 runs, seeds 0-2 (3)", "| trainer.precision |", "Test error, paired", "| A - B |"],
    }
    for file, starts in wanted.items():
        quote = next(q for q in device_summary.QUOTES if q.file == file)
        lines = quote.lines((tmp_path / file).read_text())
        assert all(any(line.startswith(start) for line in lines) for start in starts), lines
        assert "\n".join(device_summary.set_apart([quote.title, *lines])) in summary


def test_the_device_checks_summary_holds_its_steps_tallies_and_tables_set_apart(tmp_path, capsys):
    steps = ["| CUDA tests (pytest -m cuda) | ok | 120 |", "| bench_pooling.py | timed out after 25 s | 25 |"]
    (tmp_path / "env.txt").write_text(lines("NVIDIA H200, 580.1, 143771 MiB", "torch 2.11.0, CUDA 13.0, NVIDIA H200"))
    (tmp_path / "steps.md").write_text(lines(*steps))
    (tmp_path / "cuda_tests.txt").write_text(lines("==== 74 passed in 101.00s ===="))
    training = ["training step (forward, backward, Adam step), batch 128, on cuda", ""]
    training += ["| shapes | variant | ratio |", "|---|---|---|", "| mnist 1x28x28 | native | 1.00x |"]
    training += ["| mnist 1x28x28 | soft | 1.40x |", "", "non-finite loss checks:", ""]
    training += ["| loss check | median ms | ratio |", "|---|---|---|", "| watched | 2.3 | 1.000x |", "all targets met"]
    (tmp_path / "bench_training.md").write_text(lines(*training))
    assert device_summary.main([str(tmp_path), "412"]) == 0
    summary = (tmp_path / "summary.md").read_text()
    assert capsys.readouterr().out == summary
    assert summary.startswith("# device check, ") and summary.splitlines()[0].endswith(", NVIDIA H200")
    assert lines("|---|---|---:|", *steps) in summary
    assert "\nCUDA tests: ==== 74 passed in 101.00s ====\n" in summary
    assert "\nfused kernels against the reference on the GPU: not run (no output)\n" in summary
    quoted_rows = [*training[:4], training[5], "", *training[-4:-1]]  # no native row, no prose; tables apart
    title = next(q.title for q in device_summary.QUOTES if q.file == "bench_training.md")
    assert f"{title}\n" + lines(*quoted_rows) + "\n" in summary
    assert summary.endswith(f"\n412 s in all; every output in {tmp_path}/\n")
    assert device_summary.main([str(tmp_path)]) == 2 and "usage:" in capsys.readouterr().err


def test_the_device_checks_summary_as_a_step_begins_marks_that_step_running_and_cut_short(tmp_path, capsys):
    """The check rewrites summary.md as each step begins (its name in running.txt), so that a KILL
    from outside leaves one; that summary says so, and the finished summary replaces it whole."""
    (tmp_path / "steps.md").write_text(lines("| CUDA tests (pytest -m cuda) | ok | 120 |"))
    (tmp_path / "running.txt").write_text("bench_pooling.py --device cuda --profile\n")
    assert device_summary.main([str(tmp_path), "121"]) == 0
    summary = (tmp_path / "summary.md").read_text()
    running = "| bench_pooling.py --device cuda --profile | cut short: running when this summary was written | - |"
    assert lines("|---|---|---:|", "| CUDA tests (pytest -m cuda) | ok | 120 |", running, "") in summary
    assert "\n\nWritten as the step marked running began, 121 s in. " in summary
    assert summary.endswith(f"\n121 s when this summary was written; every output in {tmp_path}/\n")
    (tmp_path / "running.txt").unlink()
    assert device_summary.main([str(tmp_path), "130"]) == 0
    capsys.readouterr()
    summary = (tmp_path / "summary.md").read_text()
    assert "running" not in summary and summary.endswith(f"\n130 s in all; every output in {tmp_path}/\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["steps.md", "summary.md"]  # no partial file left


def test_the_device_checks_summary_imports_the_standard_library_alone():
    """It runs as each step of the check begins and once the check is stopped: a second of torch's
    import each time would come off the GPU's minutes, and off the time a stop leaves to write it."""
    for path in (ROOT / "swwae" / "bench" / "__init__.py", ROOT / "swwae" / "bench" / "device_summary.py"):
        tree = ast.parse(path.read_text())
        imported = [alias.name for node in tree.body if isinstance(node, ast.Import) for alias in node.names]
        imported += [node.module for node in tree.body if isinstance(node, ast.ImportFrom)]
        assert imported and all(name.split(".")[0] in sys.stdlib_module_names for name in imported), (path, imported)


def test_the_device_checks_summary_with_its_reader_gone_is_still_written(tmp_path, monkeypatch):
    """A check stopped from outside may have lost its output's reader (the device tool's tee): the
    summary is written all the same, and said so (no "no summary" line from the check)."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "w") as gone:
        monkeypatch.setattr(sys, "stdout", gone)
        assert device_summary.main([str(tmp_path), "5"]) == 0
    assert (tmp_path / "summary.md").read_text().endswith(f"\n5 s in all; every output in {tmp_path}/\n")
