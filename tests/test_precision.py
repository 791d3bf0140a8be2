"""Mixed precision on the CPU (the CUDA twins are in test_cuda.py): soft pooling and its splat
compute in float32 inside autocast, hard switches are those of float32, every pooling mode
trains in bfloat16 autocast (and float16 with a grad scaler) with finite losses, and
``trainer.precision=bf16-mixed`` trains every model config through train.py."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F

from helpers.cli import last_error_line, train_here
from helpers.config import MODEL_CONFIGS
from swwae.loss import swwae_loss
from swwae.model import SWWAE
from swwae.pooling import MODES, WHERELESS_MODES, Unpool, WhatWherePool, make_pool
from swwae.training.run import train

# kernel, stride, padding: the 2x2 fast path, the matrix-product moments and the scatter splat
# of bigger windows (3x3), overlapping windows with padding (3x3 stride 2)
GEOMETRIES = [(2, 2, 0), (3, 3, 0), (3, 2, 1), (4, 4, 0)]


def bf16_input(shape=(2, 3, 12, 12), seed=0) -> torch.Tensor:
    """What a convolution hands a pool under bfloat16 autocast: values rounded to bfloat16."""
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed)).bfloat16()


def soft_pool_and_grads(pool: WhatWherePool, x: torch.Tensor):
    """(what, row, col, unpooled, d(loss)/dx) of one soft pool + unpool + backward."""
    x = x.detach().requires_grad_(True)
    what, where = pool(x)
    x_hat = Unpool(pool)(what, where)
    loss = x_hat.float().square().sum() + (where.row.float() * where.col.float()).sum()
    (grad,) = torch.autograd.grad(loss, x)
    return what, where.row, where.col, x_hat, grad


# soft pooling in float32 under autocast


@pytest.mark.parametrize("kernel, stride, padding", GEOMETRIES)
def test_soft_pooling_computes_in_float32_inside_autocast(kernel, stride, padding):
    """A bfloat16 input under autocast gives exactly what its float32 copy gives outside it:
    the softmax, the positions, the splat and their gradients all ran in float32 (in
    bfloat16, or with autocast's bfloat16 matrix product in the window moments, they differ)."""
    pool = WhatWherePool(kernel, stride, padding, mode="soft", beta=100.0)
    x = bf16_input()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = soft_pool_and_grads(pool, x)
    expected = soft_pool_and_grads(pool, x.float())
    for got, want in zip(mixed[:4], expected[:4]):
        assert got.dtype == torch.float32 and torch.equal(got, want)
    assert mixed[4].dtype == torch.bfloat16  # the input's gradient, in the input's dtype
    torch.testing.assert_close(mixed[4], expected[4].bfloat16(), rtol=0, atol=0)


def test_soft_pooling_of_a_float32_input_is_unchanged_by_autocast():
    pool = WhatWherePool(3, 3, mode="soft")
    x = torch.randn(2, 4, 9, 9, generator=torch.Generator().manual_seed(1))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = soft_pool_and_grads(pool, x)
    for got, want in zip(mixed, soft_pool_and_grads(pool, x)):
        assert got.dtype == torch.float32 and torch.equal(got, want)


def test_soft_splat_of_bfloat16_values_runs_in_float32_inside_autocast():
    pool = WhatWherePool(2, mode="soft")
    what, where = pool(torch.randn(2, 3, 8, 8))
    v = what.bfloat16()  # what a decoder convolution sends back under autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):
        mixed = Unpool(pool)(v, where)
    assert mixed.dtype == torch.float32 and torch.equal(mixed, Unpool(pool)(v.float(), where))
    assert where.mask.dtype == torch.float32


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_soft_pooling_in_true_half_precision_computes_in_float32_and_keeps_the_dtype(dtype):
    """Outside autocast (a network cast to half precision), the result is the float32 one,
    rounded once to the input's dtype."""
    pool = WhatWherePool(3, 2, 1, mode="soft")
    x = torch.randn(2, 3, 11, 11, generator=torch.Generator().manual_seed(2)).to(dtype)
    what, where = pool(x)
    x_hat = Unpool(pool)(what, where)
    want_what, want_where = pool(x.float())
    assert what.dtype == where.in_window_row.dtype == x_hat.dtype == dtype
    assert torch.equal(what, want_what.to(dtype)) and torch.equal(
        where.in_window_row, want_where.in_window_row.to(dtype)
    )


def test_soft_pooling_at_beta_100_is_finite_in_half_precision_for_large_activations():
    """beta (z - max) reaches -1e5 here: float16 itself would overflow to -inf."""
    x = (torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(3)) * 1000).half()
    for context in (torch.autocast("cpu", dtype=torch.float16), torch.autocast("cpu", enabled=False)):
        with context:
            what, where = WhatWherePool(2, mode="soft", beta=100.0)(x)
            for t in (what, where.row, where.col, where.mask):
                assert torch.isfinite(t).all()
        torch.testing.assert_close(what.float(), F.max_pool2d(x.float(), 2), rtol=1e-3, atol=0)


# hard switches


@pytest.mark.parametrize("kernel, stride, padding", GEOMETRIES)
def test_hard_switches_under_autocast_are_those_of_float32(kernel, stride, padding):
    """Max pooling is exact in any dtype: a bfloat16 input (ties included: bfloat16 has many)
    wins where its float32 copy wins, inside autocast or not, and unpools to the same image."""
    pool = WhatWherePool(kernel, stride, padding, mode="hard")
    x = bf16_input(seed=4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        what, where = pool(x)
        v = torch.randn(what.shape, generator=torch.Generator().manual_seed(5))  # float32, as a float32 op gives
        x_hat = Unpool(pool)(v, where)
    want_what, want_where = pool(x.float())
    assert torch.equal(where.indices, want_where.indices)
    assert torch.equal(where.mask.float(), want_where.mask) and torch.equal(what.float(), want_what)
    assert x_hat.dtype == torch.float32 and torch.equal(x_hat, Unpool(pool)(v, want_where))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        _, same = pool(x.float())
    assert torch.equal(same.indices, want_where.indices) and torch.equal(same.mask, want_where.mask)


# a training step in every mode


def mixed_step(mode: str, dtype: torch.dtype, scaler: torch.amp.GradScaler | None = None):
    """One training step of a small SWWAE under CPU autocast in ``dtype``: its loss terms and
    its parameters after the step."""
    torch.manual_seed(0)
    net = SWWAE(widths=[8, 16], pool_mode=mode, image_shape=(1, 28, 28), num_classes=10, beta=100.0)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    x = torch.rand(6, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    y = torch.tensor([0, 1, 2, -1, -1, 5])
    with torch.autocast("cpu", dtype=dtype):
        out = net(x)
        terms = swwae_loss(out, x, y, lambda_rec=1.0, lambda_m=0.1, lambda_nll=1.0)
    if scaler is None:
        terms["loss"].backward()
        optimizer.step()
    else:
        scaler.scale(terms["loss"]).backward()
        scaler.step(optimizer)
        scaler.update()
    return out, terms, list(net.parameters())


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_trains_a_step_in_bfloat16_autocast(mode):
    out, terms, params = mixed_step(mode, torch.bfloat16)
    assert out.recon.dtype == torch.bfloat16  # the convolutions did run in bfloat16
    for name, term in terms.items():
        assert term.dtype == torch.float32 and torch.isfinite(term), name
    assert all(p.grad is not None and torch.isfinite(p.grad).all() and torch.isfinite(p).all() for p in params)


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_trains_a_step_in_float16_autocast_through_a_grad_scaler(mode):
    """What ``16-mixed`` does on a GPU (Lightning refuses it on CPU), here on CPU: no
    gradient overflows at the default scale of 2**16, so the step is taken, not skipped."""
    scaler = torch.amp.GradScaler("cpu")
    out, terms, params = mixed_step(mode, torch.float16, scaler)
    assert out.recon.dtype == torch.float16
    assert all(torch.isfinite(term) for term in terms.values())
    assert scaler.get_scale() == 2.0**16  # no inf or NaN found in the scaled gradients
    assert all(torch.isfinite(p).all() for p in params)


@pytest.mark.parametrize("clip", [None, 1.0])
def test_16_mixed_clips_the_gradients_of_the_jobs_adam(monkeypatch, clip):
    """trainer.precision=16-mixed with trainer.gradient_clip_val: Lightning clips the grad scaler's
    gradients once unscaled, and refuses an optimiser that unscales them in its own step (a fused
    Adam, the job's on CUDA). Here the CUDA path on the CPU (torch fuses Adam there too), under
    Lightning's own 16-mixed plugin, which a Trainer refuses on the CPU: the job's Adam stays
    fused where nothing is clipped."""
    from types import SimpleNamespace

    from lightning.pytorch.plugins.precision import MixedPrecision

    from swwae import optim
    from swwae.training.module import SWWAEModule

    monkeypatch.setattr(optim, "FUSED_DEVICES", ("cuda", "cpu"))
    plugin = MixedPrecision("16-mixed", "cpu")
    module = SWWAEModule(image_shape=(1, 28, 28), widths=[4], scheduler="none")
    module._trainer = SimpleNamespace(gradient_clip_val=clip, precision_plugin=plugin, max_epochs=1)
    optimizer = module.configure_optimizers()
    assert bool(optimizer.defaults["fused"]) == (clip is None)
    x = torch.rand(2, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    plugin.scaler.scale(swwae_loss(module(x), x, torch.tensor([0, -1]))["loss"]).backward()
    if not optimizer.defaults["fused"]:  # Lightning unscales first where the optimiser does not
        plugin.scaler.unscale_(optimizer)
    plugin.clip_gradients(optimizer, clip or 0.0)  # Lightning's refusal, where it refuses
    plugin.scaler.step(optimizer)
    plugin.scaler.update()


@pytest.mark.parametrize("saved, built", [(True, False), (False, True)])
def test_a_resumed_run_steps_with_the_adam_it_built_not_the_one_its_checkpoint_saved(
    tmp_path, monkeypatch, saved, built
):
    """A GPU run's checkpoint holds a fused Adam's param groups (``fused: True``); torch's
    ``load_state_dict`` restores every setting of a group, so resumed on the CPU it stepped with a
    fused CPU Adam, not torch's default the job builds there; and a CPU run's checkpoint resumed
    on a GPU stepped without the fused kernel. The GPU's side is the CUDA path on the CPU here
    (torch fuses Adam there too, ``FUSED_DEVICES``)."""
    from helpers.faults import crash_at
    from swwae import optim

    fused_on = lambda fused: ("cuda", "cpu") if fused else ("cuda",)  # noqa: E731
    small = ["model.widths=[4]", "trainer.max_epochs=2", "trainer.limit_train_batches=2"]
    monkeypatch.setattr(optim, "FUSED_DEVICES", fused_on(saved))
    first = train_here(tmp_path, *small, *crash_at(epoch=1), name="first")
    last = tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "last.ckpt"
    assert first.returncode == 1
    assert bool(torch.load(last, weights_only=True)["optimizer_states"][0]["param_groups"][0]["fused"]) == saved
    monkeypatch.setattr(optim, "FUSED_DEVICES", fused_on(built))
    stepped = []
    step = torch.optim.Adam.step
    monkeypatch.setattr(
        torch.optim.Adam,
        "step",
        lambda self, *a, **k: stepped.append(bool(self.param_groups[0]["fused"])) or step(self, *a, **k),
    )
    more = train_here(tmp_path, *small, "resume=true", name="more")
    assert more.returncode == 0, more.stderr[-3000:]
    assert stepped and set(stepped) == {built}  # the Adam the job built for where it resumed


@pytest.mark.parametrize("mode", WHERELESS_MODES)
def test_where_free_pools_return_float32_inside_autocast_when_they_compute_in_it(mode):
    pool = make_pool(mode, channels=3)
    x = bf16_input((2, 3, 8, 8))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        what, where = pool(x)
        x_hat = Unpool(pool)(what, where)
    assert where is None and x_hat.shape == x.shape and torch.isfinite(x_hat).all()
    if mode == "wavelet":  # its filters and sums in float32, as in a float32 network
        assert what.dtype == x_hat.dtype == torch.float32
        torch.testing.assert_close(what, pool(x.float())[0], rtol=0, atol=0)


# through train.py


@pytest.mark.slow
@pytest.mark.parametrize("model", MODEL_CONFIGS)
def test_bf16_mixed_trains_every_model_config_with_finite_metrics(make_config, tmp_path, model):
    cfg = make_config(
        f"model={model}",
        "model.widths=[4,8]",
        "trainer.precision=bf16-mixed",
        "trainer.limit_val_batches=1",
        "data.batch_size=16",
    )
    assert math.isfinite(train(cfg))
    metrics = json.loads((tmp_path / "output" / "metrics.json").read_text())["metrics"]
    assert {"val/recon_mse", "test/recon_mse"} <= set(metrics)
    assert all(math.isfinite(value) for value in metrics.values()), metrics


@pytest.mark.slow
def test_a_bad_precision_is_one_error_line(tmp_path):
    result = train_here(tmp_path, "model.widths=[4]", "trainer.precision=bf17")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = last_error_line(result)
    assert line.startswith("error: ") and "bf17" in line and "bf16-mixed" in line


@pytest.mark.parametrize("precision", ["bf16-true", "16-true"])
def test_the_evaluation_metrics_sum_in_float32_in_a_network_converted_to_half_precision(precision):
    """Lightning's ``*-true`` precisions convert the whole LightningModule with ``.to(dtype)``,
    torchmetrics' states included: in bfloat16 a sum of squared errors keeps 8 bits (the MSE of
    10,000 images came out 2.6% high) and a count stops at 8,192 (an evaluation loss of 0.1 came
    out 0.125); and each batch's sum of squared errors, taken in the network's dtype, was rounded to
    8 bits before it was added (0.03% off, by how the sum was split over threads). The sums stay
    float32, the counts integers, after a reset too."""
    from lightning.pytorch.plugins.precision import HalfPrecision

    from swwae.training.module import SWWAEModule

    module = HalfPrecision(precision).convert_module(SWWAEModule(widths=[4])).eval()
    assert next(module.net.parameters()).dtype != torch.float32  # the network is converted
    metrics = module.metrics["val"]
    torch.manual_seed(0)  # 8 batches: a bfloat16 sum is off by more than the 1e-5 asked within a few
    x = torch.rand(1024, 1, 28, 28).to(module.dtype)
    errors = []
    with torch.no_grad():
        for batch in x.split(128):
            module._evaluate((batch, torch.zeros(len(batch), dtype=torch.long)), "val")
            errors.append((module(batch).recon.float() - batch.float()).pow(2).flatten())
    exact = torch.cat(errors).double().mean()
    assert metrics["recon_mse"].compute().item() == pytest.approx(exact.item(), rel=1e-5)
    metrics["loss"].reset()
    for _ in range(80):  # 10,240 images
        metrics["loss"].update(torch.tensor(0.1, dtype=module.dtype), 128)
    assert metrics["loss"].compute().item() == pytest.approx(torch.tensor(0.1, dtype=module.dtype).item(), rel=1e-4)
    assert (metrics["loss"].total.dtype, metrics["loss"].images.dtype) == (torch.float32, torch.int64)
