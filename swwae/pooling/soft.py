"""Soft pooling internals: the soft max and soft argmax of every window (``SoftPoolFunction``)
and the bilinear splat inside each window (``WindowSplat``), as autograd Functions with
hand-written backward passes (as plain autograd the same maths records dozens of ops, each one
more pass over memory), on tensors in window layout (``swwae.pooling.windows``), results and
gradients in their inputs' memory format (``swwae.pooling.layout``). Users go through
``WhatWherePool(mode="soft")`` and ``SoftWhere``; the names without a leading underscore are
the ones the package's other modules use. On CUDA, ``soft_pool`` and ``window_splat`` run the
same maths as fused kernels instead (``swwae.pooling.fused``): these functions are their
reference, and the CPU's path."""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import math
import re
import warnings

import torch
import torch.nn.functional as F
from torch import Tensor

from swwae.pooling.geometry import Geometry
from swwae.pooling.layout import in_layout, memory_format_of
from swwae.pooling.precision import in_float32
from swwae.pooling.windows import (
    combine_cells,
    from_windows,
    interleave,
    per_window,
    tiles_in_pairs,
    to_windows,
    valid_cells,
    window_max,
    window_origins,
    window_sum,
    window_view,
)

# Exponents below this are clamped before exp: exp(-80) ~ 1.8e-35 is a zero weight for
# every purpose (the winner has weight 1), while exp of anything below ~ -87 (float32
# denormals and underflow) is ~10x slower on CPU, and beta = 100 sends most exponents there.
LOGIT_FLOOR = -80.0


def _weight_moments(weights: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Each window's total weight, and its soft argmax (sum_ij (i, j) e_ij / total) in
    window cells: (N, C, Ho, Wo) each.

    For 2x2 windows, four additions of single planes (2x faster than halving the layout
    along each axis), and row_1 / total <= 1 exactly (rounding is monotonic). For bigger
    windows on CPU, one (3, K) x (K, Ho * Wo) matrix product per plane replaces 2 (k - 1)
    plane passes at ~2x the speed (on GPUs element-wise passes are cheap, and TF32 would
    round the weights); the caller clamps the positions into their windows."""
    n, c, kh, kw, ho, wo = weights.shape
    if (kh, kw) == (2, 2):
        lower = weights[:, :, 1, 0] + weights[:, :, 1, 1]
        right = weights[:, :, 0, 1] + weights[:, :, 1, 1]
        total = torch.add(weights[:, :, 0, 0], weights[:, :, 0, 1]).add_(lower)
        # divided out of place: under torch 2.11's torch.compile an output of an autograd
        # Function's forward that an in-place op made gets another output's grad (pytorch
        # issue 180642: wrong position grads here; 2.14 gets it right)
        return total, lower / total, right / total
    if kh * kw > 4 and weights.device.type == "cpu":
        cells = torch.arange(kh * kw, device=weights.device)
        moments = torch.stack((torch.ones_like(cells), cells // kw, cells % kw)).to(weights.dtype)
        total, row, col = torch.matmul(moments, weights.view(n * c, kh * kw, ho * wo)).view(n, c, 3, ho, wo).unbind(2)
        return total, row / total, col / total
    by_row, by_col = combine_cells(weights, 3), combine_cells(weights, 2)  # (N, C, k, Ho, Wo)
    total = combine_cells(by_row, 2)
    return total, _mean_offset(by_row, total), _mean_offset(by_col, total)


def _mean_offset(t: Tensor, total: Tensor) -> Tensor:
    """sum_i i * t_i / total over the cells (dim 2) of one window axis: with t the weights
    summed across the other axis, the soft argmax along this one."""
    k = t.shape[2]
    if k == 1:
        return torch.zeros_like(total)
    if k == 2:
        return t[:, :, 1] / total
    out = t[:, :, 1].clone()
    for i in range(2, k):
        out.add_(t[:, :, i], alpha=i)
    return out.div_(total)


def _left_cell(q: Tensor, k: int) -> Tensor:
    """The cell left of in-window position q along an axis of k cells: the bilinear splat
    at q reaches it and the next one. On a cell exactly, that cell (as floor()), except
    the last, which is the right one of its pair: the splat stays in the window."""
    return q.floor().clamp_(0, max(k - 2, 0))


def _splat_offsets(q_row: Tensor, q_col: Tensor, g: Geometry) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Where the bilinear splat at each in-window position starts: the cell above and left of it
    (the top-left of the 2x2 pixels it reaches), and the position's offsets from that cell, in [0, 1]."""
    (kh, kw) = g.kernel
    left_row, left_col = _left_cell(q_row, kh), _left_cell(q_col, kw)
    return left_row, left_col, q_row - left_row, q_col - left_col


def _top_left_pixels(left_row: Tensor, left_col: Tensor, g: Geometry, shape) -> Tensor:
    """The flat index, in the padded (H + 2 ph, W + 2 pw) image, of each splat's top-left pixel,
    (N, C, Ho, Wo), int32. A NaN position (its window held NaN or +inf) gets its window's first
    valid pixel (NaN weights there), not an index out of bounds (NaN cast to an integer)."""
    (ph, pw), width = g.padding, shape[-1] + 2 * g.padding[1]
    (first_r, lo_r, _), (first_c, lo_c, _) = window_origins(g, shape[-2:], left_row)
    window_pixel = (first_r + ph) * width + first_c + pw  # (Ho, Wo): each window's first pixel
    top_left = torch.add(left_col, window_pixel).add_(left_row, alpha=width)  # small integers: exact
    return torch.where(top_left.isnan(), (lo_r + ph) * width + lo_c + pw, top_left).int()


def _splat_corners(top_left: Tensor, g: Geometry, shape) -> Tensor:
    """The flat indices, in the padded image, of the 2x2 pixels each splat reaches, (N, C, 2, 2,
    Ho, Wo): a plane of every window's pixel per corner, so that each op on them runs along whole
    planes (a 1-cell axis repeats its pixel, with weight 0 on the copy)."""
    (kh, kw), width = g.kernel, shape[-1] + 2 * g.padding[1]
    down, right = (width if kh > 1 else 0), (1 if kw > 1 else 0)
    step = torch.arange(2, device=top_left.device)  # not torch.tensor(..., device=): a blocking copy to a GPU
    corners = step.view(2, 1) * down + step * right  # [[0, right], [down, down + right]]
    return top_left[:, :, None, None] + corners[..., None, None]  # int64 (corners'): no int64 copy of top_left first


def add_at(image: Tensor, index: Tensor, values: Tensor, flat: bool | None = None) -> Tensor:
    """image[n, c, index[n, c, i]] += values[n, c, i], in place, for (N, C, L) tensors.

    On CPU, ``scatter_add_`` row by row: parallel over (n, c), each row in a fixed order,
    deterministic. Elsewhere (``flat``), one ``scatter_add_`` over the flattened image:
    CUDA runs it with atomics (exact wherever windows do not overlap: one value a pixel),
    and deterministically under ``torch.use_deterministic_algorithms``, which refuses a
    multi-dimensional one in older torch."""
    if flat is None:
        flat = image.device.type != "cpu"
    if not flat:
        return image.scatter_add_(2, index, values)
    n, c, length = image.shape
    rows = torch.arange(0, n * c * length, length, device=image.device).view(n, c, 1)
    image.view(-1).scatter_add_(0, (index + rows).view(-1), values.reshape(-1))
    return image


class SoftPoolFunction(torch.autograd.Function):
    """x -> (what, row, col): soft max and soft argmax of every window (see WhatWherePool),
    the positions relative to each window's first cell.

    Backward, per window with weights a, for incoming grads (gw, gr, gc) and
    u_i = z_i gw + r_i gr + c_i gc (r_i, c_i: cell i's row and column in the window):
    dL/dz_i = a_i gw + beta a_i (u_i - sum_j a_j u_j).
    """

    @staticmethod
    def forward(ctx, x: Tensor, geometry: Geometry, beta: float):
        (kh, kw), padded = geometry.kernel, any(geometry.padding)
        ctx.layout = memory_format_of(x)
        x = x.contiguous()
        z = to_windows(x, geometry, fill=-math.inf)  # (N, C, kh, kw, Ho, Wo); pads never win
        top = window_max(z)
        # logits beta (z - top): each window's max subtracted (softmax is shift-invariant),
        # so they are <= 0, exactly 0 at the max, whatever the scale of x (unlike
        # beta z - beta top); then clamped, which also makes -inf cells finite
        logits = z.sub_(per_window(top)).mul_(beta).clamp_(min=LOGIT_FLOOR)
        weights = logits.exp()  # unnormalised, 1 at the max
        if padded:  # padded cells never win
            weights.mul_(valid_cells(geometry, x.shape[-2:], x))
        total, q_row, q_col = _weight_moments(weights)
        # what = sum(a z) = top + sum(a logits) / beta: finite with a -inf cell (zero
        # weight), and free of the cancellation of sum(a z) when all z are large
        weighted = logits.mul_(weights)
        mean_logit = window_sum(weighted).div_(total)
        what = torch.add(top, mean_logit, alpha=1 / beta)
        if padded or kh > 2 or kw > 2:  # the clamp undoes rounding, keeps positions off pads
            (first_r, lo_r, hi_r), (first_c, lo_c, hi_c) = window_origins(geometry, x.shape[-2:], x)
            q_row = torch.clamp(q_row, lo_r - first_r, hi_r - first_r)
            q_col = torch.clamp(q_col, lo_c - first_c, hi_c - first_c)
        ctx.save_for_backward(weights, weighted, total, mean_logit, q_row, q_col)
        ctx.geometry, ctx.beta, ctx.shape = geometry, beta, x.shape
        return in_layout(what, ctx.layout), q_row, q_col

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_what: Tensor, grad_row: Tensor, grad_col: Tensor):
        weights, weighted, total, mean_logit, q_row, q_col = ctx.saved_tensors
        beta, (kh, kw) = ctx.beta, ctx.geometry.kernel
        grad_what = grad_what.contiguous()
        # With e the unnormalised weights, s their sum (a = e / s), l the logits and
        # z = top + l / beta: dL/dz_ij = G e_ij l_ij + e_ij (K + beta (R i + Q j)), per
        # window G = gw / s, R = gr / s, Q = gc / s and K = G (1 - mean(l)) - beta (R row +
        # Q col) (in-window positions): the 1 / s goes into the per-window coefficients, so
        # the normalised weights are never materialised.
        g, r, q = grad_what / total, grad_row / total, grad_col / total
        k = torch.addcmul(g, g, mean_logit, value=-1)
        k.addcmul_(r, q_row, value=-beta).addcmul_(q, q_col, value=-beta)
        rows = torch.arange(kh, device=k.device, dtype=k.dtype).view(kh, 1, 1)
        cols = torch.arange(kw, device=k.device, dtype=k.dtype).view(kw, 1, 1)
        per_row = torch.addcmul(k.unsqueeze(2), rows, r.unsqueeze(2), value=beta)  # (N, C, kh, Ho, Wo)
        per_col = q.unsqueeze(2) * (cols * beta)  # (N, C, kw, Ho, Wo)
        grad = per_row.unsqueeze(3) + per_col.unsqueeze(2)
        del per_row, per_col, r, q, k  # before the next allocations: a lower peak
        grad.mul_(weights).addcmul_(weighted, per_window(g))
        return from_windows(grad, ctx.geometry, ctx.shape).contiguous(memory_format=ctx.layout), None, None


class WindowSplat(torch.autograd.Function):
    """(v, row, col) -> bilinear splat of each v at its position, inside its own window
    (row, col relative to the window's first cell, in [0, k - 1]).

    The splat puts v's bilinear weights on the 2x2 pixels around its position, which stay
    inside the window. 2x2 windows, the common case, are those 2x2 pixels: the splat
    and its gradients are linear interpolations, a few ops on per-window planes, placed
    as whole windows. Bigger windows add the 4 weights onto their pixels (scatter_add)
    and gather the gradients back from them.
    """

    @staticmethod
    def forward(ctx, v: Tensor, q_row: Tensor, q_col: Tensor, geometry: Geometry, shape):
        ctx.geometry, ctx.shape, ctx.layout = geometry, shape, memory_format_of(v)
        v = v.contiguous()
        if geometry.kernel == (2, 2):
            ctx.save_for_backward(v, q_row, q_col)
            image = WindowSplat.splat_windows(v, q_row, q_col, geometry, shape)
        else:  # the backward reads the same pixels: their index kept (int32, one a window), not recomputed
            left_row, left_col, frac_row, frac_col = _splat_offsets(q_row, q_col, geometry)
            top_left = _top_left_pixels(left_row, left_col, geometry, shape)
            ctx.save_for_backward(v, q_row, q_col, top_left)
            image = WindowSplat.splat_corners(v, frac_row, frac_col, top_left, geometry, shape)
        return in_layout(image, ctx.layout)

    @staticmethod
    def splat_windows(v: Tensor, q_row: Tensor, q_col: Tensor, geometry: Geometry, shape) -> Tensor:
        """The splat of 2x2 windows, (N, C, H, W) in plain layout, from v in it."""
        lower = v * q_row  # v's share on the window's lower row
        if tiles_in_pairs(geometry, shape, v.dtype):  # window rows are image rows
            rows = torch.stack((v - lower, lower), 3)  # (N, C, Ho, 2, Wo)
            right = rows * q_col.unsqueeze(3)
            return interleave(rows.sub_(right), right).reshape(shape)
        if torch.compiler.is_compiling():  # no out= into strided views (the compiler fuses these)
            rows = torch.stack((v - lower, lower), 2)  # (N, C, 2, Ho, Wo)
            right = rows * q_col.unsqueeze(2)
            return from_windows(torch.stack((rows - right, right), 3), geometry, shape)
        cells = v.new_empty(v.shape[:2] + (2, 2) + v.shape[2:])
        for i, on_row in enumerate((v - lower, lower)):
            right = torch.mul(on_row, q_col, out=cells[:, :, i, 1])
            torch.sub(on_row, right, out=cells[:, :, i, 0])
        return from_windows(cells, geometry, shape)

    @staticmethod
    def splat_corners(v: Tensor, frac_row: Tensor, frac_col: Tensor, top_left: Tensor, geometry: Geometry, shape):
        """The splat of bigger windows, (N, C, H, W) in plain layout: the 4 weights of each, added
        onto their pixels."""
        index = _splat_corners(top_left, geometry, shape)
        lower = v * frac_row
        rows = torch.stack((v - lower, lower), 2)  # (N, C, 2, Ho, Wo): upper and lower pixels
        right = rows * frac_col.unsqueeze(2)
        values = torch.stack((rows.sub_(right), right), 3)  # (N, C, 2, 2, Ho, Wo), as index
        (n, c, height, width), (ph, pw) = shape, geometry.padding
        image = add_at(v.new_zeros(n, c, (height + 2 * ph) * (width + 2 * pw)), index.flatten(2), values.flatten(2))
        return image.view(n, c, height + 2 * ph, width + 2 * pw)[:, :, ph : ph + height, pw : pw + width]

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        v, q_row, q_col, *top_left = ctx.saved_tensors
        g, (ph, pw) = ctx.geometry, ctx.geometry.padding
        grad = grad.contiguous()
        padded = F.pad(grad, (pw, pw, ph, ph)) if ph or pw else grad
        if g.kernel == (2, 2):
            by_rows = window_view(padded, g).permute(0, 1, 4, 2, 5, 3)  # a view, no copy
            grad_v, grad_row, grad_col = WindowSplat.bilinear_grads(by_rows, v, q_row, q_col)
        else:  # the splat only reached the 2x2 pixels around each position: gather those
            frac_row, frac_col = _splat_offsets(q_row, q_col, g)[2:]  # the left cells freed at once
            index = _splat_corners(top_left[0], g, ctx.shape)
            values = padded.flatten(2).gather(2, index.flatten(2)).view(index.shape)  # (N, C, 2, 2, Ho, Wo)
            by_rows = values.permute(0, 1, 4, 2, 5, 3)  # (N, C, Ho, 2, Wo, 2), a view
            grad_v, grad_row, grad_col = WindowSplat.bilinear_grads(by_rows, v, frac_row, frac_col)
        return grad_v.contiguous(memory_format=ctx.layout), grad_row, grad_col, None, None

    @staticmethod
    def bilinear_grads(g: Tensor, v: Tensor, frac_row: Tensor, frac_col: Tensor):
        """Grads of a bilinear splat of v at (frac_row, frac_col) in [0, 1]^2 onto 2x2
        cells, from the cells' incoming grad ``g``, (N, C, Ho, 2, Wo, 2) by window rows:
        ``g`` interpolated at frac_col along each row, then at frac_row; the position
        grads are the slopes of those interpolations."""
        across = g[..., 1] - g[..., 0]  # (N, C, Ho, 2, Wo): slope along each cell row
        at_col = torch.addcmul(g[..., 0], across, frac_col.unsqueeze(3))  # value at frac_col
        down = at_col[:, :, :, 1] - at_col[:, :, :, 0]
        grad_v = torch.addcmul(at_col[:, :, :, 0], down, frac_row)
        grad_col = torch.lerp(across[:, :, :, 0], across[:, :, :, 1], frac_row).mul_(v)
        return grad_v, down.mul_(v), grad_col


# where the fused kernels (swwae.pooling.fused, Triton) run the soft where instead of the functions
# above: CUDA. The tests add "cpu" under Triton's interpreter (TRITON_INTERPRET=1); an empty set
# runs the reference everywhere (the benchmarks compare the two so)
FUSED_DEVICES = {"cuda"}
FUSED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)  # what the kernels read (float64: the reference)
# bfloat16 tensors only on GPUs with bfloat16 units (compute capability 8.0, A100, on): Triton 3.2
# (torch 2.6) cannot build the kernels' bf16 reads for older ones (T4: sm_75), where bf16 is emulated
BF16_FROM_CAPABILITY = (8, 0)


@contextlib.contextmanager
def fused_kernels_on(*devices: str):
    """The soft where through the fused kernels on ``devices`` only (none: the reference
    everywhere) while the block runs: the benchmarks and tests compare the two so."""
    before = set(FUSED_DEVICES)
    FUSED_DEVICES.clear()
    FUSED_DEVICES.update(devices)
    try:
        yield
    finally:
        FUSED_DEVICES.clear()
        FUSED_DEVICES.update(before)


# the oldest Triton the kernels are tested with (under its interpreter, and compiled for sm_75
# to sm_90): 3.2, torch 2.6's; under 3.0 and 3.1 (torch 2.4, 2.5) they fail, so the reference runs
OLDEST_TRITON = (3, 2)


@functools.cache
def _triton_ready() -> bool:
    """Whether Triton ``OLDEST_TRITON`` or later is installed (asked, and Triton imported, the
    first time a soft where runs on a device of ``FUSED_DEVICES``; never on others)."""
    if importlib.util.find_spec("triton") is None:
        return False
    import triton

    return tuple(int(part) for part in re.findall(r"\d+", triton.__version__)[:2]) >= OLDEST_TRITON


def _bf16_units(device: torch.device) -> bool:
    """Whether CUDA ``device`` computes in bfloat16 itself (``BF16_FROM_CAPABILITY``)."""
    return torch.cuda.get_device_capability(device) >= BF16_FROM_CAPABILITY


def _span(t: Tensor) -> int:
    """One more than the farthest element's offset from ``t``'s first (a view's reach, not its size)."""
    return 1 + sum((size - 1) * abs(stride) for size, stride in zip(t.shape, t.stride())) if t.numel() else 0


def fused_kernels_run(*tensors: Tensor, extent: int = 0) -> bool:
    """Whether the soft where of these tensors runs the fused kernels: on a device of
    ``FUSED_DEVICES`` (an NVIDIA GPU: never compiled for AMD's), in a dtype they read (bfloat16 on
    GPUs with bfloat16 units), with Triton (``OLDEST_TRITON`` on) that could build them here
    (``_FusedStart``), outside torch.compile (which fuses the reference itself), and with every
    offset they compute in 32 bits: the tensors' spans and ``extent`` (the elements of what the
    kernels make, for the caller to say)."""
    device = tensors[0].device.type
    return (
        device in FUSED_DEVICES
        and not (device == "cuda" and torch.version.hip)  # ROCm's GPUs are "cuda" too: kernels untried there
        and all(t.dtype in FUSED_DTYPES for t in tensors)
        and (device != "cuda" or all(t.dtype != torch.bfloat16 for t in tensors) or _bf16_units(tensors[0].device))
        and max(extent, *(_span(t) for t in tensors)) < 2**31
        and not torch.compiler.is_compiling()
        and _triton_ready()
        and not _fused_start.failed
    )


class _FusedStart:
    """Whether the fused kernels have run in this process, or why they cannot. Triton builds each
    kernel at its first launch, with a C compiler and the GPU's driver; a machine without them (a
    slim container, an old driver) fails there, before anything ran. That first failure warns once
    and leaves the reference running (the same results); after one fused call ran, errors are
    raised as they come (no fallback hides a fault of the kernels)."""

    ran = False
    failed: str | None = None

    def run(self, fused_call, reference_call):
        if self.ran:
            return fused_call()
        try:
            result = fused_call()
        except torch.cuda.OutOfMemoryError:
            raise  # the reference takes more memory, not less
        except Exception as err:  # Triton's own errors have no common class
            self.failed = f"{type(err).__name__}: {next(iter(str(err).strip().splitlines()), '')}"
        else:
            self.ran = True
            return result
        warnings.warn(
            f"swwae.pooling: the soft where's fused kernels cannot start here ({self.failed}); the "
            "reference path runs instead: the same results, slower on a GPU",
            RuntimeWarning,
            stacklevel=3,  # the line of swwae.pooling that asked for the soft where
        )
        return reference_call()


_fused_start = _FusedStart()


def soft_pool(x: Tensor, geometry: Geometry, beta: float) -> tuple[Tensor, Tensor, Tensor]:
    """(what, row, col) of every window, positions relative to each window: the fused kernels
    where they run (``fused_kernels_run``), else ``SoftPoolFunction``; in float32 under autocast
    and for half-precision inputs (``swwae.pooling.precision``) either way."""
    windows = x.shape[0] * x.shape[1] * math.prod(geometry.output_size(x.shape[-2:]))
    if fused_kernels_run(x, extent=5 * windows):  # the backward's five coefficients a window
        from swwae.pooling import fused

        return _fused_start.run(
            lambda: fused.soft_pool(x, geometry, beta, LOGIT_FLOOR), lambda: _soft_pool(x, geometry, beta)
        )
    return _soft_pool(x, geometry, beta)


def window_splat(v: Tensor, q_row: Tensor, q_col: Tensor, geometry: Geometry, shape) -> Tensor:
    """The splat of v at in-window positions (q_row, q_col), in their promoted dtype, and in
    float32 under autocast and for half-precision inputs (``swwae.pooling.precision``): the
    fused kernels where they run (``fused_kernels_run``), else ``WindowSplat``."""
    if fused_kernels_run(v, q_row, q_col, extent=math.prod(shape)):
        from swwae.pooling import fused

        return _fused_start.run(
            lambda: fused.window_splat(v, q_row, q_col, geometry, shape),
            lambda: _window_splat(v, q_row, q_col, geometry, shape),
        )
    return _window_splat(v, q_row, q_col, geometry, shape)


@in_float32
def _soft_pool(x: Tensor, geometry: Geometry, beta: float) -> tuple[Tensor, Tensor, Tensor]:
    return SoftPoolFunction.apply(x, geometry, beta)


@in_float32
def _window_splat(v: Tensor, q_row: Tensor, q_col: Tensor, geometry: Geometry, shape) -> Tensor:
    dtype = torch.promote_types(v.dtype, q_row.dtype)
    return WindowSplat.apply(v.to(dtype), q_row.to(dtype), q_col.to(dtype), geometry, tuple(shape))
