"""The soft where as fused Triton kernels: soft pooling and its splat, forward and backward, each
one pass over its windows, for CUDA (``swwae.pooling.soft`` chooses them there).

Why: the reference path (``swwae.pooling.soft``) is a few dozen whole-tensor ops (the window
layout's copy, the exponentials, the moments, the splat's planes), each one more pass over
memory; on a GPU those passes are the whole cost, and soft pool + unpool ran several times as
long as native max pooling there. Here each program takes a block of windows (or pixels) and
keeps everything of a window in registers:

* ``pool_forward``: each window's max, then its weights' sums in one more pass over its cells
  (from cache): the soft max and the soft argmax, written once;
* ``pool_backward``: the same sums again, from the input alone (no per-window tensor is kept
  between forward and backward), then each cell's gradient. Windows apart write their own
  cells; overlapping windows write five coefficients per window that ``pool_backward_gather``
  sums per pixel, in a fixed order;
* ``splat_forward``: per pixel, the bilinear deposits of the (at most ceil(k / s) ** 2) windows
  over it;
* ``splat_backward``: per window, the gradients of its value and position from its cells.

No atomics: every sum has a fixed order, so results are bit-identical run to run and the kernels
run under ``torch.use_deterministic_algorithms(True)``. The maths is the reference's, in float32
whatever the input's dtype (half-precision inputs are read as they are, not copied up first):
the same stable logits ``beta (z - max)``, clamped at the same floor, the same clamp of the
positions into their windows' valid cells, the same place for a NaN position. Results agree with
the reference to float32 rounding; the tests check that on the CPU under Triton's interpreter
(``TRITON_INTERPRET=1``), and on CUDA where there is one.
"""

from __future__ import annotations

import contextlib

import torch
import triton
import triton.language as tl
from torch import Tensor

from swwae.pooling.geometry import Geometry
from swwae.pooling.layout import memory_format_of
from swwae.pooling.precision import HALF_DTYPES

BLOCK = 256  # windows or pixels per program
WARPS = 4
# windows of up to so many cells (2x2, 3x3) have every cell's code unrolled; bigger ones take their
# rows in a loop. Unrolled, a 7x7 window's 4 kernels took 12.7 s to build and its pool's backward
# needed 255 registers a thread and spilled 312 bytes to memory (sm_90, on 2 CPU cores); as loops of
# rows 1.3 s, 96 registers, none spilled. (A loop's kind cannot be chosen by a value in Triton:
# each such loop is written both ways below.)
UNROLLED_CELLS = tl.constexpr(9)


# helpers


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _channels_last(t: Tensor) -> bool:
    """Whether ``t`` is laid out (N, H, W, C): its programs then walk channels fastest."""
    return memory_format_of(t) == torch.channels_last


def _empty(shape, like: Tensor, dtype: torch.dtype, memory_format: torch.memory_format | None = None) -> Tensor:
    """An empty tensor of ``shape`` in ``memory_format``, by default ``like``'s (channels_last or contiguous)."""
    return torch.empty(shape, device=like.device, dtype=dtype, memory_format=memory_format or memory_format_of(like))


def _dense(t: Tensor) -> Tensor:
    """``t`` itself where it fills its memory in its layout (contiguous or channels_last), else a
    contiguous copy. The backward passes write their gradients with their inputs' strides into
    ``empty_like`` tensors, which take other strides for a view that skips elements (a slice) or
    repeats them (an expand): past the end of the gradient's memory."""
    return t if t.is_contiguous(memory_format=memory_format_of(t)) else t.contiguous()


def output_dtype(*tensors: Tensor) -> torch.dtype:
    """The dtype of the kernels' floating outputs, as ``swwae.pooling.precision`` has it for the
    reference: float32 inside autocast; outside it, the dtype of a half-precision input if there
    is one, else the inputs' promoted dtype."""
    if torch.is_autocast_enabled(tensors[0].device.type):
        return torch.float32
    half = [t.dtype for t in tensors if t.dtype in HALF_DTYPES]
    if half:
        return half[0]
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    return dtype


def _grid(count: int):
    return (_ceil_div(count, BLOCK),)  # not triton.cdiv: a few microseconds a call, a launch waits for them


def _geometry_args(g: Geometry) -> dict:
    (kh, kw), (sh, sw), (ph, pw) = g.kernel, g.stride, g.padding
    return dict(KH=kh, KW=kw, SH=sh, SW=sw, PH=ph, PW=pw)


def _reach(g: Geometry) -> dict:
    """How many windows at most cover a pixel, per axis."""
    return dict(NH=_ceil_div(g.kernel[0], g.stride[0]), NW=_ceil_div(g.kernel[1], g.stride[1]))


def _last_cells(g: Geometry) -> dict:
    """The last cell a splat's left corner may take, per axis (k - 2; 0 for a 1-cell axis)."""
    return dict(LAST_ROW=max(g.kernel[0] - 2, 0), LAST_COL=max(g.kernel[1] - 2, 0))


# kernels: every program takes BLOCK windows (n, c, ho, wo) or pixels (n, c, r, q), in the
# order of the tensor's memory layout (channels fastest for channels_last)


# fmt: off
@triton.jit
def _unravel(idx, C, H, W, CHANNELS_LAST: tl.constexpr):
    """(n, c, h, w) of flat position ``idx`` of an (N, C, H, W) tensor walked in memory order."""
    if CHANNELS_LAST:
        c, rest = idx % C, idx // C
        w, rest = rest % W, rest // W
        h, n = rest % H, rest // H
    else:
        w, rest = idx % W, idx // W
        h, rest = rest % H, rest // H
        c, n = rest % C, rest // C
    return n, c, h, w


@triton.jit
def _ravel(n, c, h, w, C, H, W, CHANNELS_LAST: tl.constexpr):
    """The flat position of (n, c, h, w) in an (N, C, H, W) tensor walked in memory order:
    ``_unravel``'s inverse."""
    if CHANNELS_LAST:
        return ((n * H + h) * W + w) * C + c
    return ((n * C + c) * H + h) * W + w


@triton.jit
def _clamped(value, lo, hi):
    """``value`` clamped into [lo, hi]; NaN stays NaN."""
    value = tl.maximum(value, lo, propagate_nan=tl.PropagateNan.ALL)
    return tl.minimum(value, hi, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _cell(x, base, r, q, live, H, W, sxh, sxw):
    """Input cell (r, q) of each window, in float32 (-inf on padding), and whether it is inside."""
    inside = live & (r >= 0) & (r < H) & (q >= 0) & (q < W)
    return tl.load(x + base + r * sxh + q * sxw, mask=inside, other=float("-inf")).to(tl.float32), inside


@triton.jit
def _logit(z, top, beta, FLOOR: tl.constexpr):
    """beta (z - max), clamped at FLOOR: <= 0, 0 at the max, finite for -inf cells."""
    return tl.maximum((z - top) * beta, FLOOR, propagate_nan=tl.PropagateNan.ALL)


@triton.jit
def _covering(pixel, a: tl.constexpr, P: tl.constexpr, S: tl.constexpr, K: tl.constexpr, OUT):
    """Along one axis, for the gathers: the ``a``-th window, counting back from the last, that may
    cover ``pixel``, the pixel's cell in it, and whether it does."""
    window = (pixel + P) // S - a
    cell = pixel + P - window * S
    return window, cell, (window >= 0) & (window < OUT) & (cell < K)


@triton.jit
def _row_max(top, i, x, base, r0, q0, live, H, W, sxh, sxw, KW: tl.constexpr):
    """``top`` and the cells of row ``i`` of each window: their max."""
    for j in tl.static_range(KW):
        z, inside = _cell(x, base, r0 + i, q0 + j, live, H, W, sxh, sxw)
        top = tl.maximum(top, z, propagate_nan=tl.PropagateNan.ALL)
    return top


@triton.jit
def _row_sums(total, rows, cols, logits, i, x, base, r0, q0, live, H, W, sxh, sxw, top, beta,
              KW: tl.constexpr, FLOOR: tl.constexpr):
    """The sums of ``_window_sums`` with the cells of row ``i`` of each window added."""
    for j in tl.static_range(KW):
        z, inside = _cell(x, base, r0 + i, q0 + j, live, H, W, sxh, sxw)
        logit = _logit(z, top, beta, FLOOR)
        e = tl.where(inside, tl.exp(logit), 0.0)
        total += e
        rows += e * i
        cols += e * j
        logits += e * logit
    return total, rows, cols, logits


@triton.jit
def _window_sums(x, base, r0, q0, live, H, W, sxh, sxw, beta,
                 KH: tl.constexpr, KW: tl.constexpr, FLOOR: tl.constexpr, BLOCK: tl.constexpr):
    """Each window's max, and with e = exp(logit) its sums of e, e i, e j and e logit: one pass
    for the max, one (from cache) for the sums. Padded cells weigh 0. Small windows' rows are
    unrolled (``UNROLLED_CELLS``), bigger windows' taken in a loop."""
    top = tl.full((BLOCK,), float("-inf"), tl.float32)
    if KH * KW <= UNROLLED_CELLS:
        for i in tl.static_range(KH):
            top = _row_max(top, i, x, base, r0, q0, live, H, W, sxh, sxw, KW)
    else:
        for i in tl.range(KH):
            top = _row_max(top, i, x, base, r0, q0, live, H, W, sxh, sxw, KW)
    total = tl.zeros((BLOCK,), tl.float32)
    rows = tl.zeros((BLOCK,), tl.float32)
    cols = tl.zeros((BLOCK,), tl.float32)
    logits = tl.zeros((BLOCK,), tl.float32)
    if KH * KW <= UNROLLED_CELLS:
        for i in tl.static_range(KH):
            total, rows, cols, logits = _row_sums(total, rows, cols, logits, i, x, base, r0, q0, live, H, W,
                                                  sxh, sxw, top, beta, KW, FLOOR)
    else:
        for i in tl.range(KH):
            total, rows, cols, logits = _row_sums(total, rows, cols, logits, i, x, base, r0, q0, live, H, W,
                                                  sxh, sxw, top, beta, KW, FLOOR)
    # the positions clamped into the window's valid cells: rounding never leaves them, nor pads
    q_row = _clamped(rows / total, tl.maximum(-r0, 0).to(tl.float32), tl.minimum(H - 1 - r0, KH - 1).to(tl.float32))
    q_col = _clamped(cols / total, tl.maximum(-q0, 0).to(tl.float32), tl.minimum(W - 1 - q0, KW - 1).to(tl.float32))
    return top, total, logits / total, q_row, q_col


@triton.jit
def _pool_forward(x, what, row, col, windows, C, H, W, HO, WO, sxn, sxc, sxh, sxw, son, soc, soh, sow, beta,
                  KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr,
                  PW: tl.constexpr, FLOOR: tl.constexpr, CHANNELS_LAST: tl.constexpr, BLOCK: tl.constexpr):
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < windows
    n, c, ho, wo = _unravel(idx, C, HO, WO, CHANNELS_LAST)
    top, total, mean_logit, q_row, q_col = _window_sums(
        x, n * sxn + c * sxc, ho * SH - PH, wo * SW - PW, live, H, W, sxh, sxw, beta, KH, KW, FLOOR, BLOCK)
    out = n * son + c * soc + ho * soh + wo * sow
    tl.store(what + out, top + mean_logit / beta, mask=live)
    tl.store(row + out, q_row, mask=live)
    tl.store(col + out, q_col, mask=live)


@triton.jit
def _write_row_grads(grad_x, i, x, base, r0, q0, live, H, W, sxh, sxw, top, beta, g, k, r_coef, q_coef,
                     KW: tl.constexpr, FLOOR: tl.constexpr):
    """The gradients of the cells of row ``i`` of each window, written (windows apart)."""
    for j in tl.static_range(KW):
        z, inside = _cell(x, base, r0 + i, q0 + j, live, H, W, sxh, sxw)
        logit = _logit(z, top, beta, FLOOR)
        grad = tl.exp(logit) * (g * logit + k + r_coef * i + q_coef * j)
        tl.store(grad_x + base + (r0 + i) * sxh + (q0 + j) * sxw, grad, mask=inside)


@triton.jit
def _pool_backward(x, grad_what, grad_row, grad_col, grad_x, coefficients, windows, C, H, W, HO, WO,
                   sxn, sxc, sxh, sxw, sgn, sgc, sgh, sgw, beta,
                   KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr,
                   PW: tl.constexpr, FLOOR: tl.constexpr, CHANNELS_LAST: tl.constexpr, WRITE_CELLS: tl.constexpr,
                   BLOCK: tl.constexpr):
    # with e the unnormalised weights, s their sum, l the logits: dL/dz_ij = e_ij (G l_ij + K +
    # beta (R i + Q j)), per window G = gw / s, R = gr / s, Q = gc / s, K = G (1 - mean(l)) -
    # beta (R row + Q col) (swwae.pooling.soft.SoftPoolFunction.backward); grad_x has x's strides
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < windows
    n, c, ho, wo = _unravel(idx, C, HO, WO, CHANNELS_LAST)
    base, r0, q0 = n * sxn + c * sxc, ho * SH - PH, wo * SW - PW
    top, total, mean_logit, q_row, q_col = _window_sums(
        x, base, r0, q0, live, H, W, sxh, sxw, beta, KH, KW, FLOOR, BLOCK)
    at = n * sgn + c * sgc + ho * sgh + wo * sgw
    g = tl.load(grad_what + at, mask=live, other=0.0).to(tl.float32) / total
    r_coef = tl.load(grad_row + at, mask=live, other=0.0).to(tl.float32) / total * beta
    q_coef = tl.load(grad_col + at, mask=live, other=0.0).to(tl.float32) / total * beta
    k = g * (1 - mean_logit) - (r_coef * q_row + q_coef * q_col)
    if WRITE_CELLS:  # windows apart: each cell is this window's alone
        if KH * KW <= UNROLLED_CELLS:
            for i in tl.static_range(KH):
                _write_row_grads(grad_x, i, x, base, r0, q0, live, H, W, sxh, sxw, top, beta, g, k, r_coef, q_coef,
                                 KW, FLOOR)
        else:
            for i in tl.range(KH):
                _write_row_grads(grad_x, i, x, base, r0, q0, live, H, W, sxh, sxw, top, beta, g, k, r_coef, q_coef,
                                 KW, FLOOR)
    else:  # overlapping windows: (top, G, K, beta R, beta Q) per window, summed per pixel next
        own = idx  # in x's memory order, as the gather's neighbouring pixels read them (coalesced)
        tl.store(coefficients + own, top, mask=live)
        tl.store(coefficients + windows + own, g, mask=live)
        tl.store(coefficients + 2 * windows + own, k, mask=live)
        tl.store(coefficients + 3 * windows + own, r_coef, mask=live)
        tl.store(coefficients + 4 * windows + own, q_coef, mask=live)


@triton.jit
def _pool_backward_gather(x, coefficients, grad_x, pixels, windows, C, H, W, HO, WO, sxn, sxc, sxh, sxw, beta,
                          KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr,
                          PH: tl.constexpr, PW: tl.constexpr, NH: tl.constexpr, NW: tl.constexpr,
                          FLOOR: tl.constexpr, CHANNELS_LAST: tl.constexpr, BLOCK: tl.constexpr):
    # each pixel sums the gradients of the windows over it (at most NH x NW), in a fixed order
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < pixels
    n, c, r, q = _unravel(idx, C, H, W, CHANNELS_LAST)
    at = n * sxn + c * sxc + r * sxh + q * sxw
    z = tl.load(x + at, mask=live, other=0.0).to(tl.float32)
    grad = tl.zeros((BLOCK,), tl.float32)
    for a in tl.static_range(NH):
        ho, i, on_row = _covering(r, a, PH, SH, KH, HO)
        for b in tl.static_range(NW):
            wo, j, on_col = _covering(q, b, PW, SW, KW, WO)
            on = live & on_row & on_col
            own = _ravel(n, c, ho, wo, C, HO, WO, CHANNELS_LAST)
            top = tl.load(coefficients + own, mask=on, other=0.0)
            g = tl.load(coefficients + windows + own, mask=on, other=0.0)
            k = tl.load(coefficients + 2 * windows + own, mask=on, other=0.0)
            r_coef = tl.load(coefficients + 3 * windows + own, mask=on, other=0.0)
            q_coef = tl.load(coefficients + 4 * windows + own, mask=on, other=0.0)
            logit = _logit(z, top, beta, FLOOR)
            grad += tl.where(on, tl.exp(logit) * (g * logit + k + r_coef * i + q_coef * j), 0.0)
    tl.store(grad_x + at, grad, mask=live)


@triton.jit
def _splat_axis(position, first_valid, cell, LAST: tl.constexpr):
    """Along one axis: whether a splat at in-window ``position`` reaches ``cell``, the bilinear
    weight it puts there and its derivative in the position. The splat reaches the cell left of
    the position and the next one, kept in the window (LAST: the last left cell, k - 2, or 0 for a
    1-cell axis); a NaN position (its window held NaN or +inf) lands on the first valid cell."""
    left = tl.minimum(tl.maximum(tl.floor(position), 0.0), LAST * 1.0)
    left = tl.where(position != position, first_valid.to(tl.float32), left)
    frac = position - left
    on_left, on_right = cell == left, cell == left + 1
    weight = tl.where(on_left, 1 - frac, tl.where(on_right, frac, 0.0))
    slope = tl.where(on_left, -1.0, tl.where(on_right, 1.0, 0.0))
    return on_left | on_right, weight, slope


@triton.jit
def _splat_forward(v, q_rows, q_cols, out, pixels, C, H, W, HO, WO,
                   svn, svc, svh, svw, sqn, sqc, sqh, sqw, son, soc, soh, sow,
                   KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr,
                   PW: tl.constexpr, NH: tl.constexpr, NW: tl.constexpr, LAST_ROW: tl.constexpr,
                   LAST_COL: tl.constexpr, CHANNELS_LAST: tl.constexpr, BLOCK: tl.constexpr):
    # each pixel sums the deposits of the windows over it (at most NH x NW), in a fixed order
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < pixels
    n, c, r, q = _unravel(idx, C, H, W, CHANNELS_LAST)
    image = tl.zeros((BLOCK,), tl.float32)
    for a in tl.static_range(NH):
        ho, i, on_row = _covering(r, a, PH, SH, KH, HO)
        for b in tl.static_range(NW):
            wo, j, on_col = _covering(q, b, PW, SW, KW, WO)
            on = live & on_row & on_col
            value = tl.load(v + n * svn + c * svc + ho * svh + wo * svw, mask=on, other=0.0).to(tl.float32)
            at = n * sqn + c * sqc + ho * sqh + wo * sqw
            q_row = tl.load(q_rows + at, mask=on, other=0.0).to(tl.float32)
            q_col = tl.load(q_cols + at, mask=on, other=0.0).to(tl.float32)
            hit_row, weight_row, _ = _splat_axis(q_row, tl.maximum(PH - ho * SH, 0), i.to(tl.float32), LAST_ROW)
            hit_col, weight_col, _ = _splat_axis(q_col, tl.maximum(PW - wo * SW, 0), j.to(tl.float32), LAST_COL)
            image += tl.where(on & hit_row & hit_col, value * weight_row * weight_col, 0.0)
    tl.store(out + n * son + c * soc + r * soh + q * sow, image, mask=live)


@triton.jit
def _splat_row_grads(by_value, by_row, by_col, i, grad, n, c, r0, q0, live, H, W, sgn, sgc, sgh, sgw, q_row, q_col,
                     KW: tl.constexpr, LAST_ROW: tl.constexpr, LAST_COL: tl.constexpr):
    """``_splat_backward``'s sums with the cells of row ``i`` of each window added."""
    hit_row, weight_row, slope_row = _splat_axis(q_row, tl.maximum(-r0, 0), i * 1.0, LAST_ROW)
    for j in tl.static_range(KW):
        hit_col, weight_col, slope_col = _splat_axis(q_col, tl.maximum(-q0, 0), j * 1.0, LAST_COL)
        r, q = r0 + i, q0 + j
        inside = live & (r >= 0) & (r < H) & (q >= 0) & (q < W)
        g = tl.load(grad + n * sgn + c * sgc + r * sgh + q * sgw, mask=inside, other=0.0).to(tl.float32)
        hit = hit_row & hit_col  # elsewhere nothing, not a NaN weight times 0
        by_value += tl.where(hit, weight_row * weight_col * g, 0.0)
        by_row += tl.where(hit, slope_row * weight_col * g, 0.0)
        by_col += tl.where(hit, weight_row * slope_col * g, 0.0)
    return by_value, by_row, by_col


@triton.jit
def _splat_backward(grad, v, q_rows, q_cols, grad_v, grad_row, grad_col, windows, C, H, W, HO, WO,
                    sgn, sgc, sgh, sgw, svn, svc, svh, svw, sqn, sqc, sqh, sqw,
                    KH: tl.constexpr, KW: tl.constexpr, SH: tl.constexpr, SW: tl.constexpr, PH: tl.constexpr,
                    PW: tl.constexpr, LAST_ROW: tl.constexpr, LAST_COL: tl.constexpr,
                    CHANNELS_LAST: tl.constexpr, BLOCK: tl.constexpr):
    # the grads have their inputs' strides (v's; q_rows', which q_cols shares)
    idx = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    live = idx < windows
    n, c, ho, wo = _unravel(idx, C, HO, WO, CHANNELS_LAST)
    at_v, at_q = n * svn + c * svc + ho * svh + wo * svw, n * sqn + c * sqc + ho * sqh + wo * sqw
    value = tl.load(v + at_v, mask=live, other=0.0).to(tl.float32)
    q_row = tl.load(q_rows + at_q, mask=live, other=0.0).to(tl.float32)
    q_col = tl.load(q_cols + at_q, mask=live, other=0.0).to(tl.float32)
    r0, q0 = ho * SH - PH, wo * SW - PW
    by_value = tl.zeros((BLOCK,), tl.float32)
    by_row = tl.zeros((BLOCK,), tl.float32)
    by_col = tl.zeros((BLOCK,), tl.float32)
    if KH * KW <= UNROLLED_CELLS:
        for i in tl.static_range(KH):
            by_value, by_row, by_col = _splat_row_grads(by_value, by_row, by_col, i, grad, n, c, r0, q0, live, H, W,
                                                        sgn, sgc, sgh, sgw, q_row, q_col, KW, LAST_ROW, LAST_COL)
    else:
        for i in tl.range(KH):
            by_value, by_row, by_col = _splat_row_grads(by_value, by_row, by_col, i, grad, n, c, r0, q0, live, H, W,
                                                        sgn, sgc, sgh, sgw, q_row, q_col, KW, LAST_ROW, LAST_COL)
    tl.store(grad_v + at_v, by_value, mask=live)
    # along a 1-cell axis the position cannot move: no gradient
    if KH > 1:
        by_row = value * by_row
    else:
        by_row = by_row * 0.0
    if KW > 1:
        by_col = value * by_col
    else:
        by_col = by_col * 0.0
    tl.store(grad_row + at_q, by_row, mask=live)
    tl.store(grad_col + at_q, by_col, mask=live)
# fmt: on


# autograd


class FusedSoftPool(torch.autograd.Function):
    """x -> (what, row, col), as ``swwae.pooling.soft.SoftPoolFunction``, by ``_pool_forward``
    and ``_pool_backward``: only x is saved."""

    @staticmethod
    def forward(ctx, x: Tensor, geometry: Geometry, beta: float, floor: float, dtype: torch.dtype):
        x = _dense(x)
        n, c, height, width = x.shape
        ho, wo = geometry.output_size((height, width))
        layout = memory_format_of(x)
        what, row, col = (_empty((n, c, ho, wo), x, dtype, layout) for _ in range(3))
        args = dict(**_geometry_args(geometry), FLOOR=floor, CHANNELS_LAST=layout == torch.channels_last, BLOCK=BLOCK)
        if what.numel():
            _pool_forward[_grid(what.numel())](
                x, what, row, col, what.numel(), c, height, width, ho, wo, *x.stride(), *what.stride(), beta,
                **args, num_warps=WARPS,
            )  # fmt: skip
        ctx.save_for_backward(x)
        ctx.geometry, ctx.beta, ctx.args = geometry, beta, args
        return what, row, col

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_what: Tensor, grad_row: Tensor, grad_col: Tensor):
        (x,) = ctx.saved_tensors
        g, args = ctx.geometry, ctx.args
        n, c, height, width = x.shape
        ho, wo = g.output_size((height, width))
        windows = n * c * ho * wo
        like = memory_format_of(x)  # the three grads in one layout (autograd may hand them in others)
        grad_what, grad_row, grad_col = (t.contiguous(memory_format=like) for t in (grad_what, grad_row, grad_col))
        (kh, kw), (sh, sw) = g.kernel, g.stride
        apart = sh >= kh and sw >= kw
        # every pixel written: by its window's cells where windows tile x, by the gather where they overlap
        written = windows > 0 and (g.tiles((height, width)) or not apart)
        grad_x = torch.empty_like(x) if written else torch.zeros_like(x)  # x's strides
        if windows == 0:
            return grad_x, None, None, None, None
        coefficients = grad_x if apart else torch.empty(5 * windows, device=x.device, dtype=torch.float32)
        _pool_backward[_grid(windows)](
            x, grad_what, grad_row, grad_col, grad_x, coefficients, windows, c, height, width, ho, wo,
            *x.stride(), *grad_what.stride(), ctx.beta, **args, WRITE_CELLS=apart, num_warps=WARPS,
        )  # fmt: skip
        if not apart:
            _pool_backward_gather[_grid(x.numel())](
                x, coefficients, grad_x, x.numel(), windows, c, height, width, ho, wo, *x.stride(), ctx.beta,
                **args, **_reach(g), num_warps=WARPS,
            )  # fmt: skip
        return grad_x, None, None, None, None


class FusedSplat(torch.autograd.Function):
    """(v, row, col) -> the bilinear splat of each v at its in-window position, as
    ``swwae.pooling.soft.WindowSplat``, by ``_splat_forward`` and ``_splat_backward``."""

    @staticmethod
    def forward(ctx, v: Tensor, q_row: Tensor, q_col: Tensor, geometry: Geometry, shape, dtype: torch.dtype):
        v, q_row, q_col = _dense(v), _dense(q_row), _dense(q_col)
        n, c, height, width = shape
        ho, wo = v.shape[-2:]
        if q_col.stride() != q_row.stride():  # the kernels take one set of strides for both
            q_row, q_col = q_row.contiguous(), q_col.contiguous()
        out = _empty((n, c, height, width), v, dtype)
        args = dict(**_geometry_args(geometry), **_last_cells(geometry), BLOCK=BLOCK)
        if out.numel():
            _splat_forward[_grid(out.numel())](
                v, q_row, q_col, out, out.numel(), c, height, width, ho, wo, *v.stride(), *q_row.stride(),
                *out.stride(), **args, **_reach(geometry), CHANNELS_LAST=_channels_last(out), num_warps=WARPS,
            )  # fmt: skip
        ctx.save_for_backward(v, q_row, q_col)
        ctx.shape, ctx.args = shape, args
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad: Tensor):
        v, q_row, q_col = ctx.saved_tensors
        n, c, height, width = ctx.shape
        ho, wo = v.shape[-2:]
        grad = grad.contiguous(memory_format=memory_format_of(v))  # walked in v's order: neighbours read neighbours
        grad_v, grad_row, grad_col = torch.empty_like(v), torch.empty_like(q_row), torch.empty_like(q_row)
        if v.numel():
            _splat_backward[_grid(v.numel())](
                grad, v, q_row, q_col, grad_v, grad_row, grad_col, v.numel(), c, height, width, ho, wo,
                *grad.stride(), *v.stride(), *q_row.stride(), **ctx.args, CHANNELS_LAST=_channels_last(v),
                num_warps=WARPS,
            )  # fmt: skip
        return grad_v, grad_row, grad_col, None, None, None


def _on_device_of(t: Tensor):
    """Triton launches on the current CUDA device, not on its tensors': theirs made current where
    they differ (a network on cuda:1 while cuda:0 is current; Lightning makes a run's device current
    itself, and autograd runs a device's backward with it current)."""
    if t.is_cuda and t.device.index != torch.cuda.current_device():
        return torch.cuda.device(t.device)
    return contextlib.nullcontext()


def soft_pool(x: Tensor, geometry: Geometry, beta: float, floor: float) -> tuple[Tensor, Tensor, Tensor]:
    """(what, row, col) of ``x``: the soft max and the in-window soft argmax of every window,
    exponents clamped at ``floor`` (``swwae.pooling.soft``'s)."""
    with _on_device_of(x):
        return FusedSoftPool.apply(x, geometry, beta, floor, output_dtype(x))


def window_splat(v: Tensor, q_row: Tensor, q_col: Tensor, geometry: Geometry, shape) -> Tensor:
    """The bilinear splat of each v at its in-window position (q_row, q_col), shaped ``shape``."""
    with _on_device_of(v):
        return FusedSplat.apply(v, q_row, q_col, geometry, tuple(shape), output_dtype(v, q_row))
