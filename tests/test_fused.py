"""The fused soft-where kernels (swwae.pooling.fused) against the reference path (swwae.pooling.soft):
the same what, where, splat and gradients to float32 rounding, over random geometries and the
values the contract names (-inf cells, NaN and +inf, large activations), in every layout and
dtype they read, bit-identical run to run. On a machine without CUDA they run on the CPU under
Triton's interpreter (TRITON_INTERPRET=1); on CUDA, compiled, on the GPU. Every kernel also
compiles for the GPUs users train on, without one (Triton's compiler, ptxas included)."""

from __future__ import annotations

import collections
import contextlib
import importlib
import math
import os
import subprocess
import sys
import traceback
import unittest.mock
import warnings

import pytest
import torch
from hypothesis import given, settings

from helpers.config import ROOT
from helpers.pooling import geometries
from helpers.syncs import CountLaunches
from scripts import bench_pooling
from swwae.bench.harness import peak_memory
from swwae.pooling import Unpool, WhatWherePool, soft
from swwae.pooling.geometry import Geometry

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"  # cpu: Triton's interpreter (conftest.py)
if not soft._triton_ready():
    oldest = ".".join(map(str, soft.OLDEST_TRITON))
    cannot = f"needs Triton {oldest} or later (Linux builds of torch 2.6 and later bring it; else the reference runs)"
elif DEVICE == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
    cannot = "no CUDA device, and Triton's interpreter is off (TRITON_INTERPRET)"
else:
    cannot = None
fused = None if cannot else importlib.import_module("swwae.pooling.fused")
# skipped test by test, not as a module: every module collects everywhere (tests/test_extras.py);
# the interpreter computes with numpy, which warns of the NaN and inf that the tests feed it
pytestmark = [
    pytest.mark.skipif(cannot is not None, reason=str(cannot)),
    pytest.mark.filterwarnings("ignore:.*encountered in:RuntimeWarning"),
]


def kernels(on: bool):
    """The soft where through the fused kernels on DEVICE (on) or through the reference (off)."""
    return soft.fused_kernels_on(DEVICE) if on else soft.fused_kernels_on()


SENTINEL, ROOM = 1234.5, 256  # what fills the memory beside the kernels' tensors, and how many elements


def in_room(t: torch.Tensor, made: list | None = None) -> torch.Tensor:
    """A copy of ``t``, its strides kept, between ROOM elements of SENTINEL: a kernel reading beside
    it reads SENTINEL, and its results part from the reference's (``made``: where its memory is noted)."""
    span = 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    memory = torch.full((2 * ROOM + span,), SENTINEL, dtype=t.dtype, device=t.device)
    if made is not None:
        made.append((memory, span))
    return memory.as_strided(t.shape, t.stride(), ROOM).copy_(t)


class GuardedTorch:
    """``torch`` as ``swwae.pooling.fused`` sees it inside ``guarded()``: every tensor it makes (its
    outputs and gradients, ``empty``, ``empty_like``, ``zeros_like``) lies between ROOM elements of
    SENTINEL on either side, its values and strides as torch made them."""

    def __init__(self):
        self.made = []  # (memory, span of the tensor in it)

    def __getattr__(self, name):
        return getattr(torch, name)

    def empty(self, *args, **kwargs):
        return in_room(torch.empty(*args, **kwargs), self.made)

    def empty_like(self, *args, **kwargs):
        return in_room(torch.empty_like(*args, **kwargs), self.made)

    def zeros_like(self, *args, **kwargs):
        return in_room(torch.zeros_like(*args, **kwargs), self.made)

    def written_outside(self) -> int:
        """How many elements beside the tensors the kernels changed."""
        return sum(
            int((torch.cat([memory[:ROOM], memory[ROOM + span :]]) != SENTINEL).sum()) for memory, span in self.made
        )


@contextlib.contextmanager
def guarded():
    """The fused kernels' writes held to their tensors: what they write beside them (which Triton's
    interpreter lets pass, and a GPU answers with a fault or another tensor's values) fails the
    test, where it would otherwise corrupt the process's memory or pass unseen."""
    torch_there = GuardedTorch()
    with unittest.mock.patch.object(fused, "torch", torch_there):
        yield
    assert torch_there.made, "the kernels made no tensor: nothing was guarded"
    assert torch_there.written_outside() == 0, "a kernel wrote outside its tensors"


def pool_and_unpool(x: torch.Tensor, geometry: dict, beta: float, fused_on: bool):
    """(what, row, col, unpooled) of ``x`` and the grads of a fixed random loss on all four; the
    kernels' reads and writes held to their tensors (``in_room``, ``guarded``)."""
    with kernels(fused_on), guarded() if fused_on else contextlib.nullcontext():
        leaf = in_room(x.detach()).requires_grad_(True)
        pool = WhatWherePool(**geometry, mode="soft", beta=beta)
        what, where = pool(leaf)
        v = in_room((what * 1.5).detach()).requires_grad_(True)
        positions = [in_room(t.detach()).requires_grad_(True) for t in (where.in_window_row, where.in_window_col)]
        where.in_window_row, where.in_window_col = positions
        unpooled = Unpool(pool)(v, where)
        outputs = (what, where.row, where.col, unpooled)
        weights = [
            torch.randn(t.shape, generator=torch.Generator().manual_seed(i)).to(t) for i, t in enumerate(outputs)
        ]
        loss = sum((t.float() * w.float()).nansum() for t, w in zip(outputs, weights))
        loss.backward()
    return [t.detach() for t in outputs], [leaf.grad, v.grad, *(p.grad for p in positions)]


def assert_close(fused_values, reference_values, atol=1e-5, rtol=1e-5):
    for got, want in zip(fused_values, reference_values):
        assert got.shape == want.shape and got.dtype == want.dtype
        assert torch.equal(got.isnan(), want.isnan()), "NaN in other places"
        torch.testing.assert_close(got, want, atol=atol, rtol=rtol, equal_nan=True)


@settings(max_examples=30 if DEVICE == "cpu" else 8, deadline=None)  # on a GPU each geometry compiles anew
@given(geometries(max_size=9, max_batch=2))
def test_the_fused_kernels_compute_the_reference_over_any_geometry(case):
    geometry, shape, seed = case
    x = (torch.randn(shape, generator=torch.Generator().manual_seed(seed)) * 2).to(DEVICE)
    for beta in (0.5, 100.0):
        fused_out, fused_grads = pool_and_unpool(x, geometry, beta, True)
        ref_out, ref_grads = pool_and_unpool(x, geometry, beta, False)
        assert_close(fused_out, ref_out)
        assert_close(fused_grads, ref_grads, atol=1e-4 * beta)  # the pool's grads scale with beta


@pytest.mark.parametrize(
    "geometry", [dict(kernel_size=7), dict(kernel_size=5, stride=3, padding=2), dict(kernel_size=(2, 5), stride=2)]
)
def test_windows_bigger_than_the_unrolled_ones_give_the_reference_too(geometry):
    """Windows of more than ``UNROLLED_CELLS`` cells take their rows in a loop (the any-geometry
    test's reach 4x4): bigger ones, overlapping and padded, give the reference's results too."""
    x = (torch.randn(2, 3, 15, 16, generator=torch.Generator().manual_seed(3)) * 2).to(DEVICE)
    fused_out, fused_grads = pool_and_unpool(x, geometry, 100.0, True)
    ref_out, ref_grads = pool_and_unpool(x, geometry, 100.0, False)
    assert_close(fused_out, ref_out)
    assert_close(fused_grads, ref_grads, atol=1e-2)  # the pool's grads scale with beta


def test_the_fused_kernels_run_where_they_should_and_nowhere_else():
    x = torch.randn(2, 3, 8, 8, device=DEVICE, requires_grad=True)
    with kernels(True):
        what, _ = WhatWherePool(2, mode="soft")(x)
        assert type(what.grad_fn).__name__ == "FusedSoftPoolBackward"
        assert type(WhatWherePool(2, mode="soft")(x.double())[0].grad_fn).__name__ == "SoftPoolFunctionBackward"
    with kernels(False):
        assert type(WhatWherePool(2, mode="soft")(x)[0].grad_fn).__name__ == "SoftPoolFunctionBackward"
    assert not soft.fused_kernels_run(torch.zeros(2, device="meta"))  # only the devices named


@pytest.fixture
def first_start(monkeypatch):
    """The fused kernels as in a new process: not yet run, not failed."""
    monkeypatch.setattr(soft, "_fused_start", soft._FusedStart())
    return soft._fused_start


def test_kernels_that_cannot_start_leave_the_reference_running_after_one_warning(monkeypatch, first_start):
    """Triton builds a kernel at its first launch (a C compiler, the driver): where that fails, the
    reference runs, with the same results, and says why once."""
    x = torch.randn(2, 3, 8, 8, device=DEVICE, requires_grad=True)

    def cannot_build(*args):
        raise RuntimeError("Failed to find C compiler. Please specify via CC environment variable.\nmore")

    monkeypatch.setattr(fused, "soft_pool", cannot_build)
    with kernels(True):
        with pytest.warns(RuntimeWarning, match=r"cannot start here \(RuntimeError: Failed to find C compiler\. "):
            what, where = WhatWherePool(2, mode="soft")(x)
        assert type(what.grad_fn).__name__ == "SoftPoolFunctionBackward"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # said once
            Unpool(WhatWherePool(2, mode="soft"))(what, where)  # the splat too, without trying again
        assert not soft.fused_kernels_run(x)
    assert first_start.failed == "RuntimeError: Failed to find C compiler. Please specify via CC environment variable."


def test_once_the_kernels_ran_their_errors_are_raised(monkeypatch, first_start):
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    with kernels(True):
        WhatWherePool(2, mode="soft")(x)
        assert first_start.ran
        monkeypatch.setattr(fused, "soft_pool", lambda *args: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            WhatWherePool(2, mode="soft")(x)


@pytest.mark.skipif(DEVICE != "cuda", reason="needs a CUDA device")
def test_a_rocm_build_runs_the_reference_on_its_gpus(monkeypatch):
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    assert soft.fused_kernels_run(x)
    monkeypatch.setattr(torch.version, "hip", "6.2.41133")  # what a ROCm build of torch says
    assert not soft.fused_kernels_run(x)


@pytest.mark.parametrize("version, fused", [("3.1.0", False), ("3.2.0", True), ("3.10.0+git1a2b3c", True)])
def test_a_triton_older_than_the_kernels_are_tested_with_runs_the_reference(monkeypatch, version, fused):
    import triton

    monkeypatch.setattr(triton, "__version__", version)
    soft._triton_ready.cache_clear()
    try:
        with kernels(True):
            what, _ = WhatWherePool(2, mode="soft")(torch.randn(1, 1, 4, 4, device=DEVICE, requires_grad=True))
    finally:
        soft._triton_ready.cache_clear()
    assert type(what.grad_fn).__name__ == ("FusedSoftPoolBackward" if fused else "SoftPoolFunctionBackward")


@pytest.mark.parametrize(
    "shape, geometry",
    [
        ((2**11, 2**10, 32, 32), dict(kernel_size=3, stride=2)),  # the input, and so the splat's output, past 2**31
        ((2**9, 2**10, 32, 32), dict(kernel_size=2, stride=1)),  # the backward's 5 coefficients a window past it
    ],
)
def test_the_reference_takes_what_32_bit_offsets_cannot_reach(shape, geometry):
    """Meta tensors (no memory) of these sizes: the pool or the splat would index past 2**31
    elements somewhere, so it runs the reference, whose int64 indexing reaches everything."""
    x = torch.empty(shape, device="meta", requires_grad=True)
    with soft.fused_kernels_on("meta"):
        pool = WhatWherePool(**geometry, mode="soft")
        what, where = pool(x)
        assert type(what.grad_fn).__name__ == "SoftPoolFunctionBackward"
        if x.numel() >= 2**31:  # the splat's output too (from under 2**31 windows)
            assert type(Unpool(pool)(what, where).grad_fn).__name__ == "WindowSplatBackward"
        view = torch.empty(2**31 + 2, device="meta")[::2]  # under 2**31 elements, reaching past it
        assert not soft.fused_kernels_run(view) and soft.fused_kernels_run(view[: 2**20])


@pytest.mark.parametrize(
    "geometry",
    [
        dict(kernel_size=2),  # windows tile x: each pixel written by its window
        dict(kernel_size=3, stride=2),  # overlapping, the last row and column in no window: the gather's zeros
        dict(kernel_size=3, stride=2, padding=1),
        dict(kernel_size=3),  # apart, the last row and column in no window: zeros first
        dict(kernel_size=2, stride=3),
    ],
)
def test_no_output_or_gradient_is_left_to_the_memory_the_kernels_were_given(monkeypatch, geometry):
    """Fresh tensors full of NaN: where a kernel left an element unwritten, it would show."""

    def poisoned(make):
        return lambda *args, **kwargs: make(*args, **kwargs).fill_(math.nan)

    for name in ("empty", "empty_like"):
        monkeypatch.setattr(torch, name, poisoned(getattr(torch, name)))
    x = torch.randn(2, 3, 10, 12, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    fused_out, fused_grads = pool_and_unpool(x, geometry, 10.0, True)
    monkeypatch.undo()
    ref_out, ref_grads = pool_and_unpool(x, geometry, 10.0, False)
    assert_close(fused_out, ref_out)
    assert_close(fused_grads, ref_grads, atol=1e-3)


def as_view(values: torch.Tensor, kind: str):
    """A leaf and a view of it that is not dense (``torch.empty_like`` lays such a tensor's
    gradient out otherwise), holding ``values`` (a broadcast: their first sample's)."""
    n, c, h, w = values.shape
    if kind == "broadcast":  # stride 0 along the batch
        leaf = values[:1].clone().requires_grad_(True)
        return leaf, leaf.expand(n, c, h, w)
    spread = {"crop": (n, c, h + 1, w + 2), "channel chunk": (n, 2 * c, h, w), "every other column": (n, c, h, 2 * w)}
    pick = {
        "crop": lambda t: t[:, :, 1:, 1:-1],
        "channel chunk": lambda t: t.chunk(2, dim=1)[1],
        "every other column": lambda t: t[..., ::2],
    }[kind]
    leaf = torch.zeros(spread[kind], dtype=values.dtype, device=values.device)
    pick(leaf).copy_(values)
    leaf.requires_grad_(True)
    return leaf, pick(leaf)


@pytest.mark.parametrize("kind", ["crop", "channel chunk", "every other column", "broadcast"])
@pytest.mark.parametrize("geometry", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_the_fused_kernels_take_views_that_are_not_dense(kind, geometry):
    """An input, values and positions that are views of bigger tensors (a crop, a channel chunk,
    every other column) or broadcasts: the reference's results and gradients. The backward
    kernels write each gradient at its input's strides: into ``torch.empty_like`` of a view they
    wrote past its memory (the process aborted) or over one sample twice."""
    x = torch.randn(2, 3, 9, 10, generator=torch.Generator().manual_seed(0)).to(DEVICE) * 2
    g = Geometry(**geometry)
    with kernels(False):  # the same positions for both: a splat's gradients jump where a position crosses a cell
        _, row, col = soft.soft_pool(as_view(x, kind)[1], g, 10.0)
    v = torch.randn(row.shape, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    results = []
    for on in (True, False):
        with kernels(on), guarded() if on else contextlib.nullcontext():
            (x_leaf, x_view), (v_leaf, v_view) = as_view(x, kind), as_view(v, kind)
            (row_leaf, row_view), (col_leaf, col_view) = as_view(row.detach(), kind), as_view(col.detach(), kind)
            what, _, _ = outputs = soft.soft_pool(x_view, g, 10.0)
            assert type(what.grad_fn).__name__ == ("FusedSoftPoolBackward" if on else "SoftPoolFunctionBackward")
            outputs += (soft.window_splat(v_view, row_view, col_view, g, x.shape),)
            weights = [torch.randn(t.shape, generator=torch.Generator().manual_seed(i)).to(t) for i, t in
                       enumerate(outputs)]  # fmt: skip
            loss = sum((t * w).sum() for t, w in zip(outputs, weights))
            grads = torch.autograd.grad(loss, [x_leaf, v_leaf, row_leaf, col_leaf])
        results.append(([t.detach() for t in outputs], grads))
    assert_close(results[0][0], results[1][0])
    assert_close(results[0][1], results[1][1], atol=1e-3)


@pytest.mark.parametrize("value", [-math.inf, math.inf, math.nan, 1e30])
@pytest.mark.parametrize("geometry", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_the_fused_kernels_treat_extreme_values_as_the_reference_does(value, geometry):
    """-inf weighs nothing, NaN and +inf give NaN windows (and NaN gradients inside them only),
    huge values stay finite where the reference's are. Seeded, as every input here: at beta = 100 a
    window with one clear winner has its position within rounding of a cell, where the splat's
    position gradient jumps (its left cell changes), so an input drawn from whatever state the
    global generator is in made the comparison pass or fail with the order the tests ran in."""
    x = torch.randn(1, 2, 7, 7, generator=torch.Generator().manual_seed(0))
    x[0, 0, 2, 3] = value
    x[0, 1, 0, 0] = value
    x = x.to(DEVICE)
    fused_out, fused_grads = pool_and_unpool(x, geometry, 100.0, True)
    ref_out, ref_grads = pool_and_unpool(x, geometry, 100.0, False)
    assert_close(fused_out, ref_out)
    assert_close(fused_grads, ref_grads, atol=1e-2)


@pytest.mark.parametrize("geometry", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_the_fused_kernels_keep_channels_last_and_give_the_contiguous_results(geometry):
    x = torch.randn(2, 5, 9, 9, device=DEVICE)
    contiguous_out, contiguous_grads = pool_and_unpool(x, geometry, 10.0, True)
    last_out, last_grads = pool_and_unpool(x.contiguous(memory_format=torch.channels_last), geometry, 10.0, True)
    assert last_out[0].is_contiguous(memory_format=torch.channels_last)
    assert last_out[3].is_contiguous(memory_format=torch.channels_last)
    assert last_grads[0].is_contiguous(memory_format=torch.channels_last)
    assert_close(last_out, contiguous_out, atol=0, rtol=0)
    assert_close(last_grads, contiguous_grads, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_the_fused_kernels_read_half_precision_as_the_reference_computes_it(dtype):
    """The reference casts a half-precision input up, computes in float32 and rounds its results
    to the input's dtype; the kernels read the input as it is and compute in float32: the same
    results, to the half dtype's rounding. (Positions, rounded, may land on the other side of a
    cell border, where the splat's gradients jump: those are compared at the same positions.)"""
    g = Geometry(3, 2, 1)
    x = torch.randn(2, 3, 8, 8, device=DEVICE).to(dtype).requires_grad_(True)
    half = dict(atol=2e-2, rtol=2 * torch.finfo(dtype).eps)
    results = []
    for pool in (lambda: fused.soft_pool(x, g, 100.0, soft.LOGIT_FLOOR), lambda: soft.soft_pool(x, g, 100.0)):
        with kernels(False):
            outputs = pool()
            (grad,) = torch.autograd.grad(outputs[0].float().sum(), x)
        results.append([*outputs, grad])
    assert results[0][0].dtype == dtype
    assert_close(results[0], results[1], **half)
    _, row, col = soft.soft_pool(x.detach().float(), g, 100.0)
    v = torch.randn(row.shape, device=DEVICE).to(dtype).requires_grad_(True)
    splats = []
    for splat in (fused.window_splat, soft.window_splat):
        with kernels(False):
            out = splat(v, row, col, g, x.shape)
            splats.append(
                [out, *torch.autograd.grad((out.float() * torch.arange(out.numel()).view(out.shape).sin()).sum(), v)]
            )
    assert_close(splats[0], splats[1], **half)


def test_the_fused_kernels_give_float32_inside_autocast():
    x = torch.randn(2, 3, 8, 8, device=DEVICE)
    with kernels(True), torch.autocast(DEVICE, dtype=torch.bfloat16):
        pool = WhatWherePool(2, mode="soft")
        what, where = pool(x.to(torch.bfloat16))
        unpooled = Unpool(pool)(what.to(torch.bfloat16), where)
    assert what.dtype == where.in_window_row.dtype == unpooled.dtype == torch.float32


def test_the_fused_kernels_are_bit_identical_run_to_run_and_under_deterministic_algorithms():
    x = torch.randn(3, 4, 11, 11, device=DEVICE)
    geometry = dict(kernel_size=3, stride=2)  # overlapping windows: the gathers' sums
    first = pool_and_unpool(x, geometry, 100.0, True)
    with torch.inference_mode(False):
        torch.use_deterministic_algorithms(True)
        try:
            second = pool_and_unpool(x, geometry, 100.0, True)
        finally:
            torch.use_deterministic_algorithms(False)
    for a, b in zip(first[0] + first[1], second[0] + second[1]):
        assert torch.equal(a, b)


CUDA_TARGETS = ["75", "80", "86", "90"]  # T4 (Colab); A100; RTX 30xx, A10, A40; H100 and H200
COMPILE_EVERY_KERNEL = """
import inspect, sys, triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource
from swwae.pooling import fused
from swwae.pooling.geometry import Geometry
from swwae.pooling.soft import BF16_FROM_CAPABILITY

POINTERS = {"x", "what", "row", "col", "grad_what", "grad_row", "grad_col", "grad_x", "coefficients", "v", "q_rows",
            "q_cols", "out", "grad", "grad_v"}
def kinds(g):  # each kernel's constants for windows g
    geometry, reach, last = fused._geometry_args(g), fused._reach(g), fused._last_cells(g)
    return {
        "_pool_forward": dict(geometry, FLOOR=-80.0),
        "_pool_backward": dict(geometry, FLOOR=-80.0, WRITE_CELLS=False),
        "_pool_backward_gather": dict(geometry, FLOOR=-80.0, **reach),
        "_splat_forward": dict(geometry, **reach, **last),
        "_splat_backward": dict(geometry, **last),
    }
small = Geometry((3, 3), (2, 2), (1, 1))  # every cell unrolled
big = Geometry((5, 5), (3, 3), (2, 2))  # more than fused.UNROLLED_CELLS: rows in a loop
for arch in sys.argv[1:]:
    # float32 tensors with channels_last and cells written; half-precision tensors (what a bf16
    # model outside autocast hands over) with the overlapping windows' coefficients, where the
    # soft where sends bf16 to the kernels; big windows' loops in float32, for the newest GPU
    variants = [(small, True, True, "fp32"), (small, False, False, "bf16")]
    if (int(arch[:-1]), int(arch[-1])) < BF16_FROM_CAPABILITY:
        variants[1] = (small, False, False, "fp16")
    if arch == sys.argv[-1]:
        variants.append((big, False, False, "fp32"))
    for windows, channels_last, write, dtype in variants:
        for name, constants in kinds(windows).items():
            kernel = getattr(fused, name)
            constexprs = dict(constants, CHANNELS_LAST=channels_last, BLOCK=fused.BLOCK)
            if "WRITE_CELLS" in constexprs:
                constexprs["WRITE_CELLS"] = write
            pointers = {a: "*fp32" if a == "coefficients" else f"*{dtype}" for a in kernel.arg_names if a in POINTERS}
            signature = {a: "constexpr" if a in constexprs else pointers.get(a, "fp32" if a == "beta" else "i32")
                         for a in kernel.arg_names}
            if "constexprs" in inspect.signature(ASTSource).parameters:  # Triton >= 3.3: by argument index
                source = ASTSource(kernel, signature, constexprs={(kernel.arg_names.index(k),): v
                                                                   for k, v in constexprs.items()})
            else:  # Triton 3.2: by name
                source = ASTSource(kernel, signature, constants=constexprs)
            target = GPUTarget("cuda", int(arch), 32)
            binary = triton.compile(source, target=target, options=dict(num_warps=fused.WARPS))
            assert binary.asm["cubin"], name
            print(f"sm_{arch} {name} {len(binary.asm['cubin'])} bytes")
"""


@pytest.mark.parametrize("capability, reads_bf16", [((7, 5), False), ((8, 0), True), ((9, 0), True)])
def test_bf16_tensors_go_to_the_kernels_only_on_gpus_with_bf16_units(monkeypatch, capability, reads_bf16):
    """The GPUs on which the soft where hands bf16 tensors to its kernels: those with bf16 units. A
    T4 (sm_75) has none, and Triton 3.2 cannot build the kernels' bf16 reads for it."""
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    assert soft._bf16_units(torch.device("cuda", 0)) is reads_bf16


@pytest.mark.slow
def test_every_fused_kernel_compiles_for_the_gpus_users_train_on():
    """Triton's compiler (to PTX, then ptxas) needs no GPU: a kernel that the interpreter runs but
    the compiler refuses fails here, not on a user's GPU. A process of its own: the compiler needs
    Triton loaded without its interpreter."""
    environment = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run(
        [sys.executable, "-c", COMPILE_EVERY_KERNEL, *CUDA_TARGETS],
        cwd=ROOT, env=environment, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(done.stdout.splitlines()) == 10 * len(CUDA_TARGETS) + 5  # + the big windows' 5, once


def test_a_soft_network_trains_the_same_step_through_the_fused_kernels():
    """The network's own use (conv outputs pooled, decoder values unpooled at the positions, the
    middle losses): the same loss and gradients as through the reference."""
    from swwae.loss import swwae_loss
    from swwae.model import SWWAE

    x = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    y = torch.tensor([0, 1, -1, -1], device=DEVICE)
    results = []
    for on in (True, False):
        torch.manual_seed(0)
        net = SWWAE(widths=[4, 8], pool_mode="soft", pool_size=3, image_shape=(1, 28, 28), num_classes=10).to(DEVICE)
        with kernels(on):
            loss = swwae_loss(net(x), x, y, lambda_rec=1.0, lambda_m=0.5, lambda_nll=1.0)["loss"]
            assert ({"FusedSoftPoolBackward", "FusedSplatBackward"} <= graph_nodes(loss)) == on
            loss.backward()
        results.append([loss.detach(), *(p.grad for p in net.parameters())])
    assert_close(results[0], results[1], atol=1e-5, rtol=1e-4)


class LaunchesOutsideTheInterpreter(CountLaunches):
    """``CountLaunches`` less the ops of Triton's interpreter, which runs kernels with torch's own
    ops on the CPU."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if any("triton/runtime/" in frame.filename for frame in traceback.extract_stack()):
            return func(*args, **(kwargs or {}))
        return super().__torch_dispatch__(func, types, args, kwargs)


def graph_nodes(t: torch.Tensor) -> set[str]:
    """The names of the autograd nodes that ``t`` was computed through."""
    seen, todo, names = set(), [t.grad_fn], set()
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        todo += [next_node for next_node, _ in node.next_functions]
    return names


def test_around_its_kernels_the_soft_where_makes_no_device_work_but_a_zero_fill():
    """A training step of a soft network through the fused kernels makes, outside them, the device
    ops of its hard twin's step less hard pooling's own (max pooling, its backward as the unpooling,
    the gather of its backward), and at most a zero fill a stage, for the gradient of an input
    whose windows leave pixels out (``helpers.syncs.CountLaunches``; under the interpreter, its own
    ops left out). On a GPU, where a small network's step is its launches, the soft where adds
    only its kernels: four a stage, five where windows overlap."""
    from swwae.loss import swwae_loss
    from swwae.model import SWWAE

    x = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(1)).to(DEVICE)
    y = torch.tensor([0, -1], device=DEVICE)
    counts = {}
    for mode in ("hard", "soft"):  # 3x3 windows: 28 -> 9 (a row and a column in none) -> 3
        net = SWWAE(widths=[4, 8], pool_mode=mode, pool_size=3, image_shape=(1, 28, 28), num_classes=10).to(DEVICE)
        optimizer = torch.optim.Adam(net.parameters())
        with kernels(True), LaunchesOutsideTheInterpreter() as counted:
            swwae_loss(net(x), x, y, lambda_rec=1.0, lambda_m=0.5, lambda_nll=1.0)["loss"].backward()
            optimizer.step()
        counts[mode] = counted.by_origin
    hard_pooling = {"max_pool2d_with_indices", "max_pool2d_with_indices_backward", "gather"}
    assert hard_pooling <= set(counts["hard"]), counts["hard"]  # the names are torch's still
    rest = collections.Counter({op: n for op, n in counts["hard"].items() if op not in hard_pooling})
    assert counts["soft"] - rest == collections.Counter(zeros_like=1), (counts["soft"] - rest, rest - counts["soft"])
    assert not rest - counts["soft"]


@pytest.mark.parametrize("case", bench_pooling.CASES)
def test_soft_pool_and_unpool_through_the_kernels_keep_to_the_memory_target(case):
    """The soft where's memory target on a GPU (``bench_pooling.MEMORY_TARGETS``: 1.5x native),
    held without one: the peak of what torch allocates (on the CPU under the interpreter, the
    tensors a GPU's allocator would hand out) for bench_pooling's soft pool + unpool, forward and
    backward, against its native max pooling + unpooling's (the reference path: 1.6x and 2.5x). A
    per-window tensor kept for the backward, or made on the way, would break it."""
    x = torch.randn(2, 8, 28, 28, generator=torch.Generator().manual_seed(0)).to(DEVICE)
    geometry = bench_pooling.parse_case(case)
    native = peak_memory(lambda: bench_pooling.backward(bench_pooling.native_step(**geometry), x), DEVICE)
    with kernels(True):
        soft_step = bench_pooling.swwae_step(**geometry, mode="soft")
        fused_peak = peak_memory(lambda: bench_pooling.backward(soft_step, x), DEVICE)
    assert fused_peak <= bench_pooling.MEMORY_TARGETS["soft"] * native, f"{fused_peak / native:.2f}x native"
