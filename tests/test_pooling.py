"""The pooling contract (docs/architecture.md 4.1): what, where, and unpooling bound to its pool;
its functional form; the package standing alone; a mode's facts in its table entry."""

import itertools
import json
import math
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.config import ROOT
from helpers.pooling import geometries, soft_reference, windows
from swwae.pooling import (
    MODES,
    POOL_MODES,
    WHERE_MODES,
    WHERELESS_MODES,
    Pool,
    PoolMode,
    Setting,
    Unpool,
    WhatWherePool,
    make_pool,
    splat,
    unpool2d,
    what_where_pool2d,
)
from swwae.pooling.geometry import Geometry
from swwae.pooling.soft import add_at
from swwae.pooling.windows import from_windows, to_windows, window_max

SEED_X = torch.tensor([[1.0, 2, 3], [13, 3, 1], [4, 2, 9]]).view(1, 1, 3, 3)


@st.composite
def gaussian_inputs(draw):
    """A random pooling geometry (``helpers.pooling.geometries``: kernels 1-4, strides 1-4,
    padding up to kernel // 2, odd, even and rectangular sizes, batch and channels above 1)
    and a float64 Gaussian input it fits."""
    geometry, shape, seed = draw(geometries())
    return geometry, torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def tie_free(*shape, dtype=torch.float64):
    """Distinct values at least 0.1 apart: a large beta then makes soft equal hard."""
    return torch.randperm(math.prod(shape), generator=torch.Generator().manual_seed(0)).to(dtype).view(shape) / 10


# hard: the seed documents' examples


def test_seed_example_overlapping_windows_count_wins():
    what, where = WhatWherePool(kernel_size=2, stride=1)(SEED_X)
    assert what.squeeze().tolist() == [[13, 3], [13, 9]]
    assert where.mask.squeeze().tolist() == [[0, 0, 1], [2, 0, 0], [0, 0, 1]]


def test_seed_example_arange_wins_bottom_right_of_every_window():
    x = torch.arange(36.0).view(1, 1, 6, 6)
    _, where = WhatWherePool(kernel_size=2, stride=2)(x)
    expected = torch.zeros(6, 6)
    expected[1::2, 1::2] = 1
    assert torch.equal(where.mask.squeeze(), expected)


def test_hard_what_is_max_pool_and_mask_is_one_hot_of_its_indices():
    x = torch.randn(4, 3, 10, 10)
    what, where = WhatWherePool(kernel_size=2)(x)
    expected_what, indices = F.max_pool2d(x, 2, return_indices=True)
    one_hot = torch.zeros(4, 3, 100).scatter_(2, indices.flatten(2), 1.0).view_as(x)
    assert torch.equal(what, expected_what)
    assert torch.equal(where.mask, one_hot)
    assert not where.mask.requires_grad


def test_hard_mask_counts_overlapping_wins():
    x = torch.randn(2, 2, 9, 9)
    what, where = WhatWherePool(kernel_size=3, stride=1)(x)
    assert where.mask.sum() == what.numel()  # every window has exactly one winner
    assert where.mask.max() > 1  # some pixel wins several windows


def test_hard_mask_is_the_pools_switches_after_its_input_is_changed_in_place():
    """The where keeps the input's memory, not a copy: the mask, read after an in-place op on the
    pool's input (a skip path's relu_, a reused buffer), was the max pooling of the new values."""
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(0))
    pool = WhatWherePool(kernel_size=3, stride=2, padding=1)
    what, where = pool(x)
    expected = where.unpool(torch.ones_like(what)).clone()
    xr = x.clone().requires_grad_(True)
    assert torch.equal(expected, torch.autograd.grad(F.max_pool2d(xr, 3, 2, 1).sum(), xr)[0])
    x.neg_()
    assert torch.equal(where.mask, expected)
    assert torch.equal(Unpool(pool)(torch.ones_like(what), where), expected)


def test_ties_pick_the_winner_max_pool_picks_and_padding_never_wins():
    x = -torch.ones(1, 1, 4, 4)  # all tied, padded cells would be 0 > -1 if they could win
    _, where = WhatWherePool(kernel_size=3, stride=2, padding=1)(x)
    _, indices = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    assert where.mask.sum() == indices.numel()
    assert torch.equal(
        where.mask, torch.zeros(1, 1, 16).scatter_add_(2, indices.flatten(2), torch.ones(1, 1, 4)).view_as(x)
    )


@settings(max_examples=150, deadline=None)
@given(gaussian_inputs())
def test_hard_unpool_is_the_adjoint_of_pool(case):
    geometry, x = case
    pool = WhatWherePool(**geometry)
    what, where = pool(x)
    v = torch.randn_like(what)
    x_hat = Unpool(pool)(v, where)
    assert x_hat.shape == x.shape
    # <unpool(v), x> == <v, pool(x)>: v[w] lands on the pixel that holds what[w]
    assert torch.allclose((x_hat * x).sum(), (v * what).sum(), atol=1e-9)
    assert torch.equal(Unpool(pool)(torch.ones_like(what), where), where.mask)


@settings(max_examples=60, deadline=None)
@given(gaussian_inputs(), st.sampled_from(MODES))
def test_every_mode_returns_the_input_shape_without_output_size(case, mode):
    geometry, x = case
    if mode == "wavelet":
        geometry = dict(kernel_size=2)
        if min(x.shape[-2:]) < 2:
            return
    pool = make_pool(mode, channels=x.shape[1], **geometry).double()
    what, where = pool(x)
    assert Unpool(pool).double()(what, where).shape == x.shape


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("geometry", [dict(kernel_size=2), dict(kernel_size=3, stride=2, padding=1)])
def test_every_mode_pools_and_unpools_an_empty_batch(mode, geometry):
    """A batch of no images, as max_pool2d takes one: empty maps of the shapes a full batch would
    give, and a backward pass (soft pooling's window gather asked reshape for -1 columns of nothing)."""
    if mode == "wavelet":
        geometry = dict(kernel_size=2)
    x = torch.zeros(0, 3, 12, 12, requires_grad=True)
    pool = make_pool(mode, channels=3, **geometry)
    what, where = pool(x)
    assert what.shape == F.max_pool2d(x, **geometry).shape
    x_hat = Unpool(pool)(what, where)
    x_hat.sum().backward()
    assert x_hat.shape == x.grad.shape == x.shape


@pytest.mark.parametrize("size", [(8, 8), (7, 9)])
def test_stride_equal_kernel_unpool_is_masked_nearest_upsampling(size):
    x = torch.randn(2, 3, *size)
    pool = WhatWherePool(kernel_size=2)
    what, where = pool(x)
    v = torch.randn_like(what)
    up = F.interpolate(v, scale_factor=2, mode="nearest")
    up = F.pad(up, (0, size[1] - up.shape[-1], 0, size[0] - up.shape[-2]))
    assert torch.equal(Unpool(pool)(v, where), up * where.mask)


def test_hard_gradients_flow_to_input_and_to_unpooled_values():
    x = torch.randn(2, 2, 6, 6, requires_grad=True)
    pool = WhatWherePool(kernel_size=2)
    what, where = pool(x)
    v = (what * 2).detach().requires_grad_(True)
    (Unpool(pool)(v, where) ** 2).sum().backward()
    assert x.grad is None or torch.count_nonzero(x.grad) == 0  # the switches are constants
    assert torch.allclose(v.grad, 2 * v.detach())
    (grad,) = torch.autograd.grad(pool(x)[0].sum(), x)
    assert torch.equal(grad, where.mask)  # the gradient-of-sum trick, read off autograd


def test_deterministic_algorithms_and_bit_identical_runs():
    torch.use_deterministic_algorithms(True)
    try:
        results = []
        for _ in range(2):
            x = torch.randn(3, 4, 11, 11, generator=torch.Generator().manual_seed(1), requires_grad=True)
            outs = []
            for mode in WHERE_MODES:
                pool = WhatWherePool(kernel_size=3, stride=2, padding=1, mode=mode)
                what, where = pool(x)
                x_hat = Unpool(pool)(what, where)
                (grad,) = torch.autograd.grad(x_hat.square().sum(), x)
                outs += [what, x_hat, where.mask, grad]
            results.append(outs)
        assert all(torch.equal(a, b) for a, b in zip(*results))
    finally:
        torch.use_deterministic_algorithms(False)


def test_works_under_no_grad_inference_mode_and_eval():
    x = torch.randn(2, 3, 8, 8)
    for context in (torch.no_grad, torch.inference_mode):
        for mode in MODES:
            pool = make_pool(mode, channels=3).eval()
            with context():
                what, where = pool(x)
                x_hat = Unpool(pool)(what, where)
                if where is not None:
                    assert where.mask.shape == x.shape
            assert x_hat.shape == x.shape


# soft


def test_soft_gradcheck_wrt_input_and_values():
    pool = WhatWherePool(kernel_size=3, stride=2, padding=1, mode="soft", beta=2.0)
    unpool = Unpool(pool)
    x = torch.randn(1, 2, 5, 6, dtype=torch.float64, requires_grad=True)
    v = torch.randn(1, 2, 3, 3, dtype=torch.float64, requires_grad=True)

    def through_both(x, v):
        what, where = pool(x)
        return what, unpool(v, where)

    assert torch.autograd.gradcheck(through_both, (x, v))


def test_soft_tends_to_hard_as_beta_grows():
    x = tie_free(2, 3, 9, 9)
    hard, soft = WhatWherePool(3, 2), WhatWherePool(3, 2, mode="soft", beta=1e3)
    (what_h, where_h), (what_s, where_s) = hard(x), soft(x)
    v = torch.randn_like(what_h, dtype=torch.float64)
    assert torch.allclose(what_s, what_h, atol=1e-9)
    assert torch.allclose(where_s.mask, where_h.mask, atol=1e-9)
    assert torch.allclose(Unpool(soft)(v, where_s), Unpool(hard)(v, where_h), atol=1e-9)


def test_soft_small_beta_is_smooth():
    x = tie_free(1, 1, 4, 4)
    what, where = WhatWherePool(2, mode="soft", beta=0.01)(x)
    assert torch.allclose(what, F.avg_pool2d(x, 2), atol=1e-2)  # beta -> 0: the mean
    assert torch.allclose(where.mask.sum(), torch.tensor(4.0, dtype=x.dtype))  # mass preserved


@pytest.mark.parametrize("scale", [1.0, 50.0])
def test_soft_is_finite_for_large_beta_and_activations(scale):
    x = (torch.rand(4, 8, 14, 14) * scale).requires_grad_(True)
    pool = WhatWherePool(kernel_size=2, mode="soft", beta=100.0)
    what, where = pool(x)
    x_hat = Unpool(pool)(what, where)
    (grad,) = torch.autograd.grad(x_hat.sum() + what.sum(), x)
    for t in (what, where.row, where.col, where.mask, x_hat, grad):
        assert torch.isfinite(t).all()


def test_soft_positions_stay_inside_the_input_and_off_padding():
    x = torch.randn(2, 2, 5, 5) * 10
    _, where = WhatWherePool(kernel_size=3, stride=2, padding=1, mode="soft")(x)
    assert where.row.min() >= 0 and where.row.max() <= 4
    assert where.col.min() >= 0 and where.col.max() <= 4


@settings(max_examples=80, deadline=None)
@given(gaussian_inputs(), st.sampled_from([0.5, 4.0, 100.0]))
@pytest.mark.slow
def test_soft_matches_the_plain_autograd_reference(case, beta):
    geometry, x = case
    x = (x * 3).requires_grad_(True)
    pool = WhatWherePool(**geometry, mode="soft", beta=beta)
    what, where = pool(x)
    ref_what, ref_row, ref_col = soft_reference(x, geometry, beta)  # x is float64: the graph reaches it
    assert torch.allclose(what, ref_what, atol=1e-9)
    assert torch.allclose(where.row, ref_row, atol=1e-9) and torch.allclose(where.col, ref_col, atol=1e-9)
    v = torch.randn_like(what).requires_grad_(True)
    x_hat = Unpool(pool)(v, where)
    ref_x_hat = splat(v, ref_row, ref_col, x.shape)  # the generic 4-corner splat
    assert torch.allclose(x_hat, ref_x_hat, atol=1e-9)
    assert torch.allclose(where.mask, splat(torch.ones_like(v), ref_row, ref_col, x.shape), atol=1e-9)
    if beta < 100:  # at beta = 100 the gradients are too ill-conditioned to compare
        w_what, w_hat = torch.randn_like(what), torch.randn_like(x_hat)
        grads = torch.autograd.grad((what * w_what).sum() + (x_hat * w_hat).sum(), (x, v))
        ref_grads = torch.autograd.grad((ref_what * w_what).sum() + (ref_x_hat * w_hat).sum(), (x, v))
        for grad, ref in zip(grads, ref_grads):
            assert torch.allclose(grad, ref, atol=1e-7)


@pytest.mark.parametrize(
    "geometry, size",
    [
        (dict(kernel_size=2), (4, 6)),  # windows tile the image: the interleaving fast path
        (dict(kernel_size=2), (5, 7)),  # odd sizes: a row and a column left out
        (dict(kernel_size=2, stride=1), (4, 5)),  # overlapping 2x2 windows
        (dict(kernel_size=2, padding=1), (4, 5)),  # padded 2x2 windows
        (dict(kernel_size=(2, 3), stride=(2, 1), padding=(1, 1)), (4, 5)),  # rectangular
        (dict(kernel_size=3), (7, 8)),  # bigger windows apart: placed by one copy, 4-corner scatter splat
        (dict(kernel_size=2, stride=3), (7, 7)),  # gaps between the windows
        (dict(kernel_size=2, padding=1), (5, 5)),  # 2-wide windows apart, odd padded width
    ],
)
@pytest.mark.slow
def test_soft_gradcheck_on_each_path(geometry, size):
    pool = WhatWherePool(**geometry, mode="soft", beta=1.5)
    unpool = Unpool(pool)
    x = torch.randn(2, 2, *size, dtype=torch.float64, requires_grad=True)
    v = torch.randn_like(pool(x)[0]).requires_grad_(True)

    def through_both(x, v):
        what, where = pool(x)
        return what, where.row, where.col, unpool(v, where), unpool(what, where)

    assert torch.autograd.gradcheck(through_both, (x, v))


@settings(max_examples=60, deadline=None)
@given(geometries(), st.sampled_from([torch.float32, torch.float64]))
def test_window_cells_go_back_to_their_pixels_as_col2im_adds_them(case, dtype):
    """``from_windows``, the soft pool's way back to the image (its backward pass), adds the
    cells of overlapping windows as ``F.fold`` (col2im) does, in its order: the same bits."""
    geometry, shape, seed = case
    g = Geometry(**geometry)
    ho, wo = g.output_size(shape[-2:])
    (kh, kw), (n, c) = g.kernel, shape[:2]
    cells = torch.randn(n, c, kh, kw, ho, wo, generator=torch.Generator().manual_seed(seed), dtype=dtype)
    folded = F.fold(cells.reshape(n, c * kh * kw, ho * wo), shape[-2:], g.kernel, padding=g.padding, stride=g.stride)
    assert torch.equal(from_windows(cells, g, shape), folded)


@pytest.mark.parametrize(
    "geometry, size",
    [
        (dict(kernel_size=4), (8, 12)),  # windows tiling the map, few a row: gathers both ways
        (dict(kernel_size=7), (14, 7)),
        (dict(kernel_size=(4, 5)), (8, 10)),
        (dict(kernel_size=2), (4, 40)),  # many a row: a strided copy in, a gather back
        (dict(kernel_size=3, stride=2, padding=1), (7, 9)),  # overlapping, padded: a gather in
        (dict(kernel_size=3, stride=2), (5, 41)),  # overlapping, many a row: strided copies
    ],
)
def test_the_window_layout_is_im2cols_and_tiling_windows_go_back_to_their_pixels(geometry, size):
    """The window layout is im2col's (``F.unfold``), whichever way it is made (a gather where
    windows are few a row, a strided copy otherwise and for channels-last input); where windows
    tile the image, every pixel is one window's cell and comes back as it was."""
    g = Geometry(**geometry)
    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0))
    cells = to_windows(x, g)
    im2col = F.unfold(x, g.kernel, padding=g.padding, stride=g.stride)
    assert torch.equal(cells, im2col.view(cells.shape))
    assert torch.equal(to_windows(x.contiguous(memory_format=torch.channels_last), g), cells)
    if g.tiles(size):
        assert torch.equal(from_windows(cells, g, x.shape), x)


@pytest.mark.parametrize("plane", [(1, 1), (4, 4), (6, 6), (7, 7), (8, 8), (9, 9)])
def test_window_max_is_each_windows_largest_cell_nan_included(plane):
    """Plane by plane or by torch's reduction (as the planes' length makes it faster), the same
    maxima, and NaN where a window holds one."""
    cells = torch.randn(2, 3, 3, 2, *plane, generator=torch.Generator().manual_seed(1))
    cells[0, 1, 2, 1, 0, 0] = math.nan
    cells[1, 2, :, :, -1, -1] = -math.inf
    torch.testing.assert_close(window_max(cells), cells.flatten(2, 3).amax(2), rtol=0, atol=0, equal_nan=True)


def test_splat_adds_the_same_row_by_row_and_flat():
    """Bigger windows splat with add_at: row by row on CPU, flat elsewhere (CUDA, where it
    must stay deterministic); CI has no GPU, so the flat path is checked here."""
    generator = torch.Generator().manual_seed(3)
    index = torch.randint(0, 10, (2, 3, 40), generator=generator)  # repeated targets add up
    values = torch.randn(2, 3, 40, dtype=torch.float64, generator=generator)
    rows = add_at(torch.zeros(2, 3, 10, dtype=torch.float64), index, values, flat=False)
    flat = add_at(torch.zeros(2, 3, 10, dtype=torch.float64), index, values, flat=True)
    expected = torch.zeros(2, 3, 10, dtype=torch.float64)
    for n, c, i in itertools.product(range(2), range(3), range(40)):
        expected[n, c, index[n, c, i]] += values[n, c, i]
    torch.testing.assert_close(rows, expected)
    torch.testing.assert_close(flat, expected)


@pytest.mark.parametrize("kernel, stride, padding", [(2, 2, 0), (2, 1, 0), (3, 2, 1), (3, 3, 1)])
def test_soft_is_deterministic_and_works_without_grad(kernel, stride, padding):
    x = torch.randn(3, 4, 12, 12, generator=torch.Generator().manual_seed(2))
    pool = WhatWherePool(kernel, stride, padding, mode="soft")

    def run():
        xr = x.clone().requires_grad_(True)
        what, where = pool(xr)
        x_hat = Unpool(pool)(what * 2, where)
        (grad,) = torch.autograd.grad(x_hat.square().sum() + where.row.sum(), xr)
        return what, where.row, where.col, where.mask, x_hat, grad

    torch.use_deterministic_algorithms(True)
    try:
        first, second = run(), run()
    finally:
        torch.use_deterministic_algorithms(False)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    for context in (torch.no_grad, torch.inference_mode):
        with context():
            what, where = pool(x)
            assert torch.equal(what, first[0]) and torch.equal(where.mask, first[3])
            assert torch.equal(Unpool(pool)(what * 2, where), first[4])


def test_soft_float32_at_beta_100_is_the_softmax_to_float_precision():
    # exponents below -80 are clamped (exp is slow there): weights that small are zeros
    x = torch.randn(2, 3, 8, 8) * 5
    what, where = WhatWherePool(2, mode="soft", beta=100.0)(x)
    ref_what, ref_row, ref_col = soft_reference(x, dict(kernel_size=2), 100.0)  # in float64
    assert torch.allclose(what.double(), ref_what, atol=1e-5)
    assert torch.allclose(where.row.double(), ref_row, atol=1e-5)
    assert torch.allclose(where.col.double(), ref_col, atol=1e-5)
    assert torch.allclose(where.mask.sum(), torch.tensor(float(what.numel())))  # mass kept


@pytest.mark.parametrize("scale", [1e8, 1e20, 1e30, 1e35])
@pytest.mark.parametrize("shape", [(2, 4, 8, 8), (1, 16, 8, 8)])
def test_soft_of_large_finite_values_is_still_near_the_max(scale, shape):
    """beta (z - max) is exactly 0 at the max; -beta max + beta z (one fused multiply-add)
    would leave the rounding error of beta max, > 80 once beta |x| >~ 1e9, and send every
    exponent to the floor: what would be the window mean (it was, before a fix)."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(0)) * scale
    what, where = WhatWherePool(kernel_size=2, mode="soft", beta=100.0)(x)
    torch.testing.assert_close(what, F.max_pool2d(x, 2), rtol=1e-5, atol=0)
    assert torch.isfinite(where.row).all() and torch.isfinite(where.mask).all()


def test_soft_ignores_a_minus_inf_cell_like_max_pool2d():
    x = torch.tensor([[1.0, 2.0], [-math.inf, 0.0]]).view(1, 1, 2, 2).requires_grad_(True)
    what, where = WhatWherePool(2, mode="soft", beta=100.0)(x)
    assert torch.allclose(what, torch.tensor(2.0))
    assert torch.allclose(where.row, torch.tensor(0.0)) and torch.allclose(where.col, torch.tensor(1.0))
    assert torch.isfinite(where.mask).all()
    what.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize(
    "kernel, size", [(1, (4, 4)), ((1, 1), (3, 3)), ((2, 2), (2, 2)), ((2, 1), (2, 2)), ((3, 3), (3, 3))]
)
@pytest.mark.parametrize("batch", [(1, 1), (2, 3)])
def test_soft_never_writes_into_its_input_and_has_a_backward_pass(kernel, size, batch):
    """One window covering the whole input, or 1x1 windows: the strided view of the
    windows is x itself, contiguous, and must still be copied before being written into
    (it was not, once: the input changed, and autograd refused the backward pass)."""
    x = torch.randn(*batch, *size)
    before = x.clone()
    x.requires_grad_(True)
    pool = WhatWherePool(kernel_size=kernel, mode="soft", beta=1.0)
    what, where = pool(x)
    assert torch.equal(x.detach(), before)
    (grad_what,) = torch.autograd.grad(what.sum(), x, retain_graph=True)
    assert torch.isfinite(grad_what).all()
    (what.sum() + Unpool(pool)(what, where).sum()).backward()
    assert torch.equal(x.detach(), before) and torch.isfinite(x.grad).all()
    if kernel in (1, (1, 1)):  # what is x itself
        assert torch.equal(what, before) and torch.allclose(x.grad, 2 * torch.ones_like(x))


# bad input


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(mode="sideways"), "mode"),
        (dict(mode="soft", beta=0.0), "beta"),
        (dict(kernel_size=0), "kernel_size"),
        (dict(kernel_size=2, padding=2), "padding"),
    ],
)
def test_bad_arguments_are_rejected(kwargs, message):
    with pytest.raises(ValueError, match=message):
        WhatWherePool(**kwargs)


def test_kernel_larger_than_the_feature_map_is_a_clear_error():
    with pytest.raises(ValueError, match="larger than the 3x3 feature map"):
        WhatWherePool(kernel_size=4)(torch.randn(1, 1, 3, 3))


@pytest.mark.parametrize("mode", POOL_MODES)
def test_integer_input_is_a_clear_error(mode):
    with pytest.raises(ValueError, match="floating-point values, got torch.uint8"):
        make_pool(mode, channels=1)(torch.zeros(1, 1, 4, 4, dtype=torch.uint8))


def test_unknown_mode_lists_the_choices():
    with pytest.raises(ValueError, match="upsample"):
        make_pool("maxish")


# where-free baselines


@pytest.mark.parametrize("mode", WHERELESS_MODES)
@pytest.mark.parametrize("size", [(28, 28), (7, 7), (6, 10)])
def test_baselines_round_trip_shapes_and_have_no_where(mode, size):
    x = torch.randn(2, 4, *size, requires_grad=True)
    pool = make_pool(mode, channels=4, kernel_size=2)
    what, where = pool(x)
    assert where is None
    x_hat = Unpool(pool)(what, where)
    assert x_hat.shape == x.shape
    x_hat.sum().backward()
    assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("kernel, wavelet", [(2, "haar"), (4, "haar"), (4, "db2")])
@pytest.mark.parametrize("size", [(8, 8), (28, 28), (7, 7)])
def test_wavelet_unpool_of_pooled_constant_image_gives_it_back(kernel, wavelet, size):
    x = torch.full((1, 3, *size), 0.7)
    pool = make_pool("wavelet", kernel_size=kernel, wavelet=wavelet)
    what, _ = pool(x)
    assert torch.allclose(what, torch.full_like(what, 0.7), atol=1e-5)  # the band is a mean
    assert torch.allclose(Unpool(pool)(what, None), x, atol=1e-5)


@pytest.mark.parametrize("wavelet", ["haar", "db2", "db3"])
@pytest.mark.parametrize("size", [(8, 8), (7, 9), (28, 28), (16, 11)])
def test_wavelet_pool_and_unpool_are_ptwts_transforms(wavelet, size):
    """The band ptwt.wavedec2(mode="reflect") gives, level by level, and ptwt.waverec2's inverse
    with zero details, bit for bit in float32 and with the same gradients; but the padding is
    slices and flips, whose backward is deterministic on CUDA (F.pad's reflection backward
    raises there under use_deterministic_algorithms), and the filters stay on the device."""
    import ptwt

    x = torch.randn(2, 3, *size, generator=torch.Generator().manual_seed(0), requires_grad=True)
    for kernel in (2, 4):
        expected, sizes = x, []
        for _ in range(kernel // 2):
            sizes.append(expected.shape[-2:])
            expected = ptwt.wavedec2(expected, wavelet, level=1, mode="reflect")[0] / 2
        pool = make_pool("wavelet", kernel_size=kernel, wavelet=wavelet)
        what, _ = pool(x)
        assert torch.equal(what, expected)
        back, expected_back = Unpool(pool)(what, None), expected
        for height, width in reversed(sizes):
            zeros = torch.zeros_like(expected_back)
            expected_back = ptwt.waverec2((expected_back * 2, (zeros, zeros, zeros)), wavelet)[..., :height, :width]
        assert torch.equal(back, expected_back)
        weights = torch.randn(back.shape, generator=torch.Generator().manual_seed(1))
        (grad,) = torch.autograd.grad((back * weights).sum() + what.square().sum(), x)
        (expected_grad,) = torch.autograd.grad((expected_back * weights).sum() + expected.square().sum(), x)
        torch.testing.assert_close(grad, expected_grad, rtol=1e-6, atol=1e-6)


def test_upsample_baseline_is_nearest_upsampling():
    x = torch.randn(1, 2, 8, 8)
    pool = make_pool("upsample")
    what, _ = pool(x)
    assert torch.equal(what, F.max_pool2d(x, 2))
    assert torch.equal(Unpool(pool)(what, None), F.interpolate(what, scale_factor=2, mode="nearest"))


def test_dropping_the_where_falls_back_to_nearest_upsampling():
    x = torch.randn(1, 2, 7, 7)
    pool = WhatWherePool(kernel_size=2)
    what, where = pool(x)
    dropped = Unpool(pool)(what, None)
    assert dropped.shape == x.shape
    assert torch.equal(dropped[..., :6, :6], F.interpolate(what, scale_factor=2, mode="nearest"))


def test_unpool_binds_to_its_own_pool_not_the_last_one_run():
    a, b = WhatWherePool(kernel_size=2), WhatWherePool(kernel_size=3, stride=3)
    xa, xb = torch.randn(1, 1, 8, 8), torch.randn(1, 1, 9, 9)
    wa, _ = a(xa)
    b(xb)
    assert Unpool(a)(wa, None).shape == xa.shape
    assert Unpool(b)(b(xb)[0], None).shape == xb.shape


@pytest.mark.parametrize(
    "geometry, message",
    [
        (dict(kernel_size=2.5), "kernel_size must be an int or a pair of ints, got 2.5"),  # was a TypeError
        (dict(kernel_size=(2.5, 2)), r"kernel_size must be an int or a pair of ints, got \(2.5, 2\)"),  # was (2, 2)
        (dict(kernel_size="2"), "kernel_size must be an int or a pair of ints, got '2'"),
        (dict(kernel_size=(2,)), r"kernel_size must be an int or a pair of ints, got \(2,\)"),
        (dict(kernel_size=2, stride=1.5), "stride must be an int or a pair of ints, got 1.5"),
        (dict(kernel_size=3, padding=[1, 0.5]), r"padding must be an int or a pair of ints, got \[1, 0.5\]"),
    ],
)
@pytest.mark.parametrize("mode", ["hard", "avg"])
def test_a_geometry_of_other_than_whole_numbers_is_one_line(geometry, message, mode):
    with pytest.raises(ValueError, match=f"^{message}$"):
        make_pool(mode, **geometry)


@pytest.mark.parametrize("mode", MODES)
def test_unpooling_without_a_where_to_a_size_the_values_do_not_come_from_is_one_line(mode):
    """A pool run since on another size: its values went up to that size without a word; a
    wavelet's inverse transform gave another size than the output_size asked."""
    pool = make_pool(mode, channels=3)
    unpool = Unpool(pool)
    what, _ = pool(torch.randn(1, 3, 8, 8))
    pool(torch.randn(1, 3, 12, 12))
    with pytest.raises(ValueError, match=r"^unpooling 4x4 values without a where or output_size: .* 12x12 to 6x6; "):
        unpool(what)
    assert unpool(what, output_size=(8, 8)).shape == (1, 3, 8, 8)
    if mode == "wavelet":  # 9x9 pools to 5x5: nothing brings 4x4 up to it
        with pytest.raises(ValueError, match=r"^unpooling brings 4x4 values up to 9x9, which pools to 5x5: "):
            unpool(what, output_size=(9, 9))


@pytest.mark.parametrize("mode", MODES)
def test_unpooling_to_an_output_size_its_values_do_not_pool_from_is_one_line(mode):
    """Nearest upsampling (upsample, avg, a where dropped) brought 4x4 values up to any output_size
    asked, 20x20 included, and the wavelet's inverse transform cropped them to a smaller one, without
    a word; with a where, output_size was ignored; an output_size without (H, W) was Python's
    unpacking error. (The transposed convolution says so itself: torch's line.)"""
    pool = make_pool(mode, channels=3)
    unpool = Unpool(pool)
    what, where = pool(torch.randn(1, 3, 8, 8))
    wrong = r"^(unpooling brings 4x4 values up to .*output_size must be the size|requested an output size of)"
    for size in [(20, 20), (6, 6), (1, 3, 12, 8)]:
        with pytest.raises(ValueError, match=wrong):
            unpool(what, where, output_size=size)
        with pytest.raises(ValueError, match=wrong):
            unpool(what, output_size=size)
    with pytest.raises(ValueError, match=r"^output_size must end with the \(H, W\) to unpool to, got \(8,\)$"):
        unpool(what, where, output_size=(8,))
    assert unpool(what, where, output_size=(1, 3, 8, 8)).shape == (1, 3, 8, 8)
    if mode != "wavelet":  # 9x9 pools to 4x4 in floor mode (the wavelet pads it to 5x5)
        assert unpool(what, output_size=(9, 9)).shape == (1, 3, 9, 9)


def test_nearest_unpooling_takes_the_sizes_ceil_mode_pools_from_too():
    """A registered mode may pad odd sizes (its entry's ``ceil``): 5 windows of 2 over 9 pixels."""
    pool = make_pool("upsample")
    v = torch.randn(1, 1, 5, 5)
    up = Unpool(pool)(v, output_size=(9, 9))
    assert torch.equal(up[..., ::2, ::2], v) and torch.equal(up[..., 1::2, 1::2], v[..., :4, :4])


@pytest.mark.parametrize("mode", WHERE_MODES)
def test_unpooling_values_not_shaped_like_the_what_is_one_line(mode):
    """A broadcastable v (one channel, one image) would splat through a soft where without a word."""
    pool = WhatWherePool(kernel_size=2, mode=mode)
    what, where = pool(torch.randn(2, 3, 8, 8))
    for shape in [(1, 1, 4, 4), (2, 3, 1, 1), (3, 4, 4), (2, 3, 4, 5)]:
        with pytest.raises(
            ValueError, match=r"^unpooling takes values shaped like the pool's what, \(2, 3, 4, 4\), got"
        ):
            Unpool(pool)(torch.ones(shape), where)
    assert Unpool(pool)(what, where).shape == (2, 3, 8, 8)


def test_strided_unpool_weights_belong_to_the_decoder_only():
    pool = make_pool("strided", channels=3)
    unpool = Unpool(pool)
    names = [n for n, _ in unpool.named_parameters()]
    assert names and all(n.startswith("upsampler.") for n in names)


@pytest.mark.parametrize(
    "mode, geometry",
    [
        ("soft", dict(kernel_size=2, beta=10.0)),
        ("soft", dict(kernel_size=3, stride=2, padding=1, beta=10.0)),
        ("wavelet", dict(kernel_size=4, wavelet="db2")),
    ],
)
def test_pools_computing_on_planes_keep_channels_last_and_give_the_contiguous_results(mode, geometry):
    """As native max pooling does: what, the unpooled image and the gradients come back in the
    layout they came in (so the convolutions and element-wise ops around them meet theirs), with
    the very values of plain inputs (swwae.pooling.layout)."""
    x = torch.randn(2, 4, 9, 9)
    results = []
    for layout in (torch.contiguous_format, torch.channels_last):
        leaf = x.clone(memory_format=layout).requires_grad_(True)
        pool = make_pool(mode, channels=4, **geometry)
        what, where = pool(leaf)
        v = (what * 1.5).detach().requires_grad_(True)
        unpooled = Unpool(pool)(v, where)
        (unpooled.square().sum() + what.sum()).backward()
        results.append((what, unpooled, leaf.grad, v.grad))
    assert all(t.is_contiguous(memory_format=torch.channels_last) for t in results[1])
    for plain, last in zip(*results):
        assert torch.equal(plain, last)


# the contract under extreme values (the single-input cases, huge finite values, a -inf cell,
# 1x1 and whole-input windows are with the soft pooling tests above)


F32 = torch.finfo(torch.float32)
SPECIAL = [math.inf, -math.inf, math.nan, F32.max, -F32.max, 1e30, -1e30, F32.tiny, -F32.tiny, 1e-45, 0.0, -0.0]
MODERATE = 1e3  # |x| up to here: soft must match its float64 definition


@st.composite
def extreme_inputs(draw):
    """A random geometry (``helpers.pooling.geometries``: kernels 1-4, strides 1-4, padding
    up to kernel // 2, odd and rectangular sizes) and a float32 input mixing moderate values
    with +-inf, NaN, the largest and smallest floats, and -0.0."""
    geometry, shape, seed = draw(geometries(max_size=9, max_batch=2))
    special_share = draw(st.sampled_from([0.0, 0.05, 0.3, 1.0]))
    gen = torch.Generator().manual_seed(seed)
    x = (torch.rand(shape, generator=gen) * 2 - 1) * draw(st.sampled_from([1.0, MODERATE]))
    picks = torch.rand(shape, generator=gen) < special_share
    specials = torch.tensor(SPECIAL)[torch.randint(len(SPECIAL), shape, generator=gen)]
    x = torch.where(picks, specials, x)
    beta = draw(st.sampled_from([1e-3, 1.0, 10.0, 100.0]))
    return geometry, x, beta


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_inputs())
def test_hard_pooling_is_max_pool2d_for_any_value_nan_and_inf_included(case):
    """hard: ``what`` is F.max_pool2d bit for bit, whatever the values: NaN wins its
    windows (as in max_pool2d), +-inf pass through; the mask is unpool(ones), one win per
    window; the unpooling is shaped like the input. Never an exception."""
    geometry, x, _ = case
    pool = WhatWherePool(mode="hard", **geometry)
    what, where = pool(x)
    expected = F.max_pool2d(x, geometry["kernel_size"], geometry["stride"], geometry["padding"])
    torch.testing.assert_close(what, expected, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(Unpool(pool)(torch.ones_like(what), where), where.mask)
    assert where.mask.shape == x.shape and where.mask.sum() == what.numel()
    if torch.isfinite(x).all() and x.abs().max() <= MODERATE:  # the adjoint identity, where sums are finite
        v = torch.randn(what.shape, generator=torch.Generator().manual_seed(0))
        back = Unpool(pool)(v, where).double()  # overlapping windows add in float32: a rounding error
        lhs, rhs = (back * x.double()).sum(), (v.double() * what.double()).sum()
        assert (lhs - rhs).abs() <= 1e-6 * (v.double().abs() * what.double().abs()).sum() + 1e-9


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(extreme_inputs())
@pytest.mark.slow
def test_soft_pooling_survives_any_value_and_keeps_the_damage_inside_its_windows(case):
    """soft, documented behaviour: never an exception, every output shaped right, the
    input left as it was. A window of finite values (any magnitude, up to the largest
    float) and -inf cells gets the soft max and soft argmax of its float64 definition, -inf
    cells weighing 0, whatever its neighbours hold: NaN and inf stay in their windows. A
    window holding NaN gives NaN, as in max_pool2d. A window holding +inf gives NaN
    (max_pool2d: +inf): its logits are beta (z - max) = inf - inf. So does a window of
    -inf only (max_pool2d: -inf)."""
    geometry, x, beta = case
    pool = WhatWherePool(mode="soft", beta=beta, **geometry)
    before = x.clone()
    x.requires_grad_(True)
    what, where = pool(x)
    back = Unpool(pool)(what, where)
    back.sum().backward()  # the backward pass runs too
    assert back.shape == where.mask.shape == x.shape and x.grad.shape == x.shape
    torch.testing.assert_close(x.detach(), before, rtol=0, atol=0, equal_nan=True)

    cells = windows(before, geometry, -math.inf)
    finite = torch.isfinite(cells)
    comparable = (finite | (cells == -math.inf)).all(-1) & finite.any(-1)
    ref_what, ref_row, ref_col = soft_reference(before, geometry, beta)
    scale = torch.where(finite, cells, 0.0).abs().amax(-1).clamp_min(1.0).double()
    assert torch.all((what.double() - ref_what).abs()[comparable] <= 1e-5 * scale[comparable])
    assert torch.all((where.row.double() - ref_row).abs()[comparable] <= 1e-4)
    assert torch.all((where.col.double() - ref_col).abs()[comparable] <= 1e-4)
    has_nan = torch.isnan(cells).any(-1)
    assert torch.isnan(what[has_nan]).all()
    assert torch.isnan(what[(cells == math.inf).any(-1) | ~finite.any(-1)]).all()


@pytest.mark.parametrize("kernel", [(2, 2), (1, 2), (2, 1), (3, 3)])
def test_soft_unpooling_backward_survives_nan_positions(kernel):
    """A window holding NaN or +inf has a NaN soft argmax; the backward pass of the
    unpooling must give NaN gradients there, not an out-of-bounds gather (a NaN position
    cast to an index is -2**63: it was, once)."""
    x = torch.tensor([[math.nan, 1.0, 2.0], [3.0, math.inf, 0.0], [1.0, 2.0, 3.0]]).view(1, 1, 3, 3)
    x.requires_grad_(True)
    pool = WhatWherePool(kernel_size=kernel, mode="soft", beta=1.0)
    what, where = pool(x)
    Unpool(pool)(what, where).sum().backward()
    assert x.grad.shape == x.shape


# the functional form


@settings(max_examples=40, deadline=None)
@given(gaussian_inputs(), st.sampled_from(WHERE_MODES), st.sampled_from([None, 0.5, 100.0]))
def test_the_functional_form_is_the_module_bit_for_bit(case, mode, beta):
    geometry, x = case
    x.requires_grad_(True)
    pool = WhatWherePool(**geometry, mode=mode, beta=beta)
    forms = [
        (pool, lambda v, where: Unpool(pool)(v, where)),
        (lambda x: what_where_pool2d(x, **geometry, mode=mode, beta=beta), unpool2d),
    ]
    v = torch.randn(pool(x)[0].shape, dtype=x.dtype, generator=torch.Generator().manual_seed(0))
    results = []
    for pooling, unpooling in forms:
        what, where = pooling(x)
        back = unpooling(v, where)
        (grad,) = torch.autograd.grad(what.square().sum() + (back * x).sum(), x)
        results.append((what, where.mask, back, grad))
    assert all(torch.equal(a, b) for a, b in zip(*results, strict=True))


def test_the_functional_form_keeps_the_contract_example_and_is_the_adjoint():
    what, where = what_where_pool2d(SEED_X, kernel_size=2, stride=1)
    assert what.squeeze().tolist() == [[13, 3], [13, 9]]
    assert where.mask.squeeze().tolist() == [[0, 0, 1], [2, 0, 0], [0, 0, 1]]
    assert torch.equal(unpool2d(torch.ones_like(what), where), where.mask)
    # <unpool(v), x> == <v, pool(x)>, in float64: in float32 a sum of terms near 10 that cancels to
    # near 0 differs in its order's rounding by more than a relative tolerance of it
    x = SEED_X.double()
    what, where = what_where_pool2d(x, kernel_size=2, stride=1)
    v = torch.randn_like(what)
    assert torch.allclose((unpool2d(v, where) * x).sum(), (v * what).sum(), rtol=0, atol=1e-12)


@pytest.mark.parametrize("mode", WHERELESS_MODES)
def test_the_functional_form_takes_only_the_modes_that_keep_a_where(mode):
    with pytest.raises(ValueError, match=f"^what-where pooling takes a mode that keeps a where .*, got {mode!r}$"):
        what_where_pool2d(SEED_X, 2, mode=mode)
    with pytest.raises(TypeError, match="^unpool2d takes the where that what_where_pool2d returned, got NoneType"):
        unpool2d(SEED_X, None)


# a mode's facts are its table entry; the classes pool


class ScaledAvgPool(Pool):
    """A mode of the tests' own, with a setting of its own: the mean of each window, scaled."""

    def __init__(self, kernel_size=2, stride=None, padding=0, gain=1.0):
        super().__init__(kernel_size, stride, padding)
        self.gain = gain

    def pool(self, x: torch.Tensor):
        g = self.geometry
        return self.gain * F.avg_pool2d(x, g.kernel, g.stride, g.padding), None


def test_make_pool_gives_a_class_the_settings_its_entry_declares_checked():
    gain = Setting(2.0, "the scale", gt=0)
    x = torch.rand(1, 1, 4, 4)
    with POOL_MODES.registered(PoolMode("scaled", ScaledAvgPool, "no where: scaled means", settings={"gain": gain})):
        assert torch.equal(make_pool("scaled")(x)[0], 2 * F.avg_pool2d(x, 2))  # the declared default
        assert torch.equal(make_pool("scaled", gain=3, beta=1.0)(x)[0], 3 * F.avg_pool2d(x, 2))  # beta: soft's
        with pytest.raises(ValueError, match="^gain must be > 0, got -1$"):
            make_pool("scaled", gain=-1)
        with pytest.raises(TypeError, match="^gain must be a number, got 'x'$"):
            make_pool("scaled", gain="x")
    with pytest.raises(TypeError, match="^make_pool got 'gain', a setting of no pooling mode; the modes' settings: "):
        make_pool(MODES[0], gain=3)


def test_a_where_pool_reads_its_settings_and_their_defaults_from_the_table():
    for mode in WHERE_MODES:
        entry = POOL_MODES[mode]
        x = torch.randn(1, 2, 6, 6)
        expected = what_where_pool2d(x, 2, mode=mode, **entry.values({}))[0]
        assert torch.equal(WhatWherePool(2, mode=mode)(x)[0], expected)
        assert torch.equal(make_pool(mode)(x)[0], expected)


@pytest.mark.parametrize("name", ["Hard", "", "a b/c", "hard"])
def test_a_mode_name_is_a_new_lower_case_identifier(name):
    before = POOL_MODES.names()
    with pytest.raises(ValueError) as refused:
        POOL_MODES.register(PoolMode(name, ScaledAvgPool, "no where: refused"))
    assert str(refused.value).startswith(f"pooling mode {name!r}") and "\n" not in str(refused.value)
    assert POOL_MODES.names() == before


# the package stands alone

HEAVY = ("pywt", "ptwt", "lightning", "pytorch_lightning", "hydra", "omegaconf")


@pytest.mark.slow
def test_the_package_stands_alone_and_loads_pywavelets_for_wavelet_pools_only():
    """One fresh interpreter: importing swwae.pooling loads nothing of swwae beside it (nor
    torch), building and running each mode loads no framework, and PyWavelets only for a
    wavelet pool; at the end every module of the package is loaded, still nothing else of swwae."""
    code = f"""
import importlib, json, pkgutil, sys

WATCHED = {HEAVY!r}

def loaded():  # what the pooling must not bring: the rest of swwae, the frameworks, PyWavelets
    return {{m if m.startswith("swwae.") else m.split(".")[0] for m in sys.modules
            if m.split(".")[0] in WATCHED or m.startswith("swwae.") and not m.startswith("swwae.pooling")}}

import swwae.pooling
steps = {{"import swwae.pooling": sorted(loaded() | {{"torch"}} & set(sys.modules))}}
seen = loaded()
import torch
from swwae.pooling import POOL_MODES, Unpool, make_pool, unpool2d, what_where_pool2d

def step(name):
    global seen
    steps[name], seen = sorted(loaded() - seen), loaded()

x = torch.rand(1, 2, 8, 8)
what, where = what_where_pool2d(x, 2)
unpool2d(what, where)
step("functional")
for mode in POOL_MODES:
    pool = make_pool(mode, channels=2)
    what, where = pool(x)
    Unpool(pool)(what, where)
    step(mode)
for module in pkgutil.iter_modules(swwae.pooling.__path__):
    importlib.import_module("swwae.pooling." + module.name)
step("every module")
print(json.dumps(steps))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    expected = {"import swwae.pooling": [], "functional": [], "every module": []}
    expected |= {mode: ["pywt"] if mode == "wavelet" else [] for mode in POOL_MODES}
    assert json.loads(result.stdout) == expected
