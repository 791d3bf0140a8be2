"""The CUDA paths, against the CPU results the rest of the suite checks: the pooling contract
(hard is max_pool2d, the adjoint, overlaps add; soft with its GPU-only flat scatter), every
mode deterministic under ``torch.use_deterministic_algorithms``, bf16 and fp16 forward and
backward, channels_last inputs, peak memory on CUDA, a training step that waits for the GPU
only where it logs, and quick ``trainer=gpu`` runs. Skipped without a CUDA device;
``bash scripts/device_check.sh`` runs them where there is one (``pytest -m cuda``)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch
import torch.nn.functional as F

from helpers.cli import train_cli
from helpers.faults import with_callback
from helpers.pooling import soft_reference
from helpers.syncs import SyncsPerBatch
from swwae.bench.harness import peak_memory
from swwae.loss import swwae_loss
from swwae.model import SWWAE
from swwae.optim import adam
from swwae.pooling import MODES, Unpool, WhatWherePool
from swwae.pooling.soft import add_at
from swwae.training.checkpoints import host_copy
from swwae.training.run import train

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")]

# cuBLAS is deterministic only with a fixed workspace; it reads this when its handle is made
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")

CUDA = torch.device("cuda")
# kernel, stride, padding: 2x2 (the fast paths), overlapping, padded, bigger windows (the flat
# scatter splat and the element-wise window moments that only run off CPU), rectangular
GEOMETRIES = [(2, 2, 0), (2, 1, 0), (3, 2, 1), (3, 3, 0), (4, 4, 0), ((2, 3), (1, 2), (1, 1))]
SIZES = [(12, 12), (11, 9)]


def generator(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def pool_unpool_grad(pool: WhatWherePool, x: torch.Tensor, v: torch.Tensor):
    """(what, mask, unpool(v), d(sum(unpool(v)^2) + sum(what^2))/dx, d/dv) on x's device."""
    x, v = x.detach().requires_grad_(True), v.detach().requires_grad_(True)
    what, where = pool(x)
    x_hat = Unpool(pool)(v, where)
    grad_x, grad_v = torch.autograd.grad(x_hat.square().sum() + what.square().sum(), (x, v))
    return what, where.mask, x_hat, grad_x, grad_v


@pytest.fixture
def deterministic():
    was = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    yield
    torch.use_deterministic_algorithms(was)


# the pooling contract on CUDA


@pytest.mark.parametrize("kernel, stride, padding", GEOMETRIES)
@pytest.mark.parametrize("size", SIZES)
def test_hard_pooling_on_cuda_is_max_pool2d_and_gives_the_cpu_switches(kernel, stride, padding, size):
    pool = WhatWherePool(kernel, stride, padding, mode="hard")
    x = torch.randn(2, 3, *size, generator=generator(0), dtype=torch.float64)
    what, where = pool(x.to(CUDA))
    assert torch.equal(what, F.max_pool2d(x.to(CUDA), kernel, stride, padding))
    _, cpu_where = pool(x)
    assert torch.equal(where.indices.cpu(), cpu_where.indices)
    assert torch.equal(where.mask.cpu(), cpu_where.mask)  # K where a pixel wins K windows
    v = torch.randn(what.shape, generator=generator(1), dtype=torch.float64)
    x_hat = Unpool(pool)(v.to(CUDA), where)
    torch.testing.assert_close(x_hat.cpu(), Unpool(pool)(v, cpu_where), rtol=1e-12, atol=1e-12)  # overlaps add
    # the adjoint: <unpool(v), x> == <v, pool(x)>
    torch.testing.assert_close((x_hat * x.to(CUDA)).sum(), (v.to(CUDA) * what).sum(), rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(Unpool(pool)(torch.ones_like(what), where), where.mask)


@pytest.mark.parametrize("kernel, stride, padding", GEOMETRIES)
@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("beta", [4.0, 100.0])
def test_soft_pooling_on_cuda_matches_the_cpu_and_the_definition(kernel, stride, padding, size, beta):
    """float64, so the comparison is of the algorithms, not of rounding."""
    pool = WhatWherePool(kernel, stride, padding, mode="soft", beta=beta)
    x = torch.randn(2, 3, *size, generator=generator(2), dtype=torch.float64)
    v = torch.randn(pool(x)[0].shape, generator=generator(3), dtype=torch.float64)
    on_cuda = pool_unpool_grad(pool, x.to(CUDA), v.to(CUDA))
    for got, want in zip(on_cuda, pool_unpool_grad(pool, x, v)):  # values, then gradients (beta amplifies)
        assert got.is_cuda
        torch.testing.assert_close(got.cpu(), want, rtol=1e-7, atol=1e-7)
    what, where = pool(x.to(CUDA))
    geometry = dict(kernel_size=kernel, stride=stride, padding=padding)
    for got, want in zip((what, where.row, where.col), soft_reference(x, geometry, beta)):
        torch.testing.assert_close(got.cpu(), want.detach(), rtol=1e-9, atol=1e-9)
    # overlaps add and nothing is lost: each window's value splats with weights summing to 1
    torch.testing.assert_close(on_cuda[2].sum(), v.to(CUDA).sum(), rtol=1e-9, atol=1e-9)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA devices")
def test_soft_pooling_on_a_gpu_other_than_the_current_one_gives_the_cpu_results():
    """Triton launches its kernels on the current device, whatever their tensors': a network on
    cuda:1 while cuda:0 is current (float32: the fused kernels' path)."""
    pool = WhatWherePool(3, 2, 1, mode="soft", beta=10.0)
    x = torch.randn(2, 3, 11, 9, generator=generator(4))
    v = torch.randn(pool(x)[0].shape, generator=generator(5))
    with torch.cuda.device(0):
        on_the_other = pool_unpool_grad(pool, x.to("cuda:1"), v.to("cuda:1"))
    for got, want in zip(on_the_other, pool_unpool_grad(pool, x, v)):
        assert got.device == torch.device("cuda:1")
        torch.testing.assert_close(got.cpu(), want, rtol=1e-4, atol=1e-3)  # float32; beta amplifies the grads


def test_the_flat_scatter_adds_repeated_targets_on_cuda_as_the_cpu_does_row_by_row(deterministic):
    index = torch.randint(0, 50, (4, 8, 300), generator=generator(4))
    values = torch.randn(4, 8, 300, generator=generator(5), dtype=torch.float64)
    rows = add_at(torch.zeros(4, 8, 50, dtype=torch.float64), index, values)  # CPU: row by row
    flat = [
        add_at(torch.zeros(4, 8, 50, dtype=torch.float64, device=CUDA), index.to(CUDA), values.to(CUDA))
        for _ in range(2)
    ]  # CUDA: flat, deterministic under use_deterministic_algorithms
    torch.testing.assert_close(flat[0].cpu(), rows, rtol=1e-12, atol=1e-12)
    assert torch.equal(flat[0], flat[1])


@pytest.mark.parametrize("mode", ["hard", "soft"])
@pytest.mark.parametrize("kernel, stride, padding", [(2, 2, 0), (3, 2, 1)])
def test_channels_last_inputs_on_cuda_give_the_contiguous_results(mode, kernel, stride, padding):
    pool = WhatWherePool(kernel, stride, padding, mode=mode)
    x = torch.randn(2, 8, 12, 12, generator=generator(6), device="cpu").to(CUDA)
    v = torch.randn(pool(x)[0].shape, generator=generator(7)).to(CUDA)
    last = pool_unpool_grad(pool, x.to(memory_format=torch.channels_last), v.to(memory_format=torch.channels_last))
    for got, want in zip(last, pool_unpool_grad(pool, x, v)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_a_network_in_channels_last_on_cuda_trains_like_a_contiguous_one():
    net = SWWAE(widths=[8, 16], pool_mode="soft", image_shape=(3, 32, 32), num_classes=10).to(CUDA)
    x = torch.rand(4, 3, 32, 32, generator=generator(8)).to(CUDA)
    contiguous = net(x).recon
    torch.testing.assert_close(
        net.to(memory_format=torch.channels_last)(x.to(memory_format=torch.channels_last)).recon,
        contiguous,
        rtol=1e-4,
        atol=1e-5,
    )


def test_projections_of_a_network_on_cuda_are_those_of_the_cpu():
    """docs/analysis.md's notebook on a GPU: ``strongest`` and ``project`` of a network and images
    on CUDA (their picks index each other there) give the CPU's picks and projections. In float64:
    in float32 cuDNN convolves in TF32 by default, whose rounding (about 5e-4) reorders two
    channels whose peaks differ by 1.1e-4 here."""
    from swwae.projection import project, strongest

    torch.manual_seed(0)
    net = SWWAE(widths=[4, 8], num_classes=None).double().eval()
    x = torch.rand(6, 1, 28, 28, generator=generator(14), dtype=torch.float64)
    results = []
    for device in ("cpu", CUDA):
        model, images = net.to(device), x.to(device)
        for distinct in (True, False):
            picks = strongest(model, images, 2, top=4, distinct_channels=distinct)
            results.append((picks.channel.cpu(), project(model, images[picks.image], picks, 2).cpu()))
    for (cpu_channels, cpu_proj), (cuda_channels, cuda_proj) in zip(results[:2], results[2:]):
        assert torch.equal(cpu_channels, cuda_channels)
        torch.testing.assert_close(cuda_proj, cpu_proj, rtol=1e-4, atol=1e-5)


def test_the_jobs_fused_adam_updates_channels_last_parameters_as_torchs_plain_adam_does():
    """swwae.optim.adam is fused on CUDA: from the same gradients, it must update parameters laid
    out channels_last (the job's channels_last=true) as the plain per-tensor Adam does."""
    torch.manual_seed(0)
    net = SWWAE(widths=[8, 16], image_shape=(3, 32, 32), num_classes=10).to(CUDA, memory_format=torch.channels_last)
    x = torch.rand(8, 3, 32, 32, generator=generator(9)).to(CUDA).contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, 10, (8,), generator=generator(10)).to(CUDA)
    swwae_loss(net(x), x, y, lambda_rec=1.0, lambda_m=0.1, lambda_nll=1.0)["loss"].backward()
    assert any(p.dim() == 4 and p.is_contiguous(memory_format=torch.channels_last) for p in net.parameters())
    assert adam(net.parameters(), lr=1e-2).defaults["fused"]  # the path under test
    updated = []
    for make in (lambda ps: adam(ps, lr=1e-2), lambda ps: torch.optim.Adam(ps, lr=1e-2, foreach=False)):
        params = [p.detach().clone().requires_grad_() for p in net.parameters()]  # clone keeps the layout
        for param, original in zip(params, net.parameters()):
            param.grad = original.grad.clone()
        optimizer = make(params)
        for _ in range(2):
            optimizer.step()
        updated.append(params)
    for fused, plain in zip(*updated):
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-6)


def test_a_fused_adams_checkpoint_resumed_with_torchs_plain_adam_counts_its_steps_on_the_host():
    """A GPU run's checkpoint holds a fused Adam; resumed where the job builds torch's plain Adam
    (16-mixed with gradient clipping: ``swwae.optim.adam``), torch's ``load_state_dict`` leaves
    each parameter's step count on the GPU, where the plain Adam reads it every step (a host sync
    a parameter a step): the job moves the counts to the host as it starts training."""
    from types import SimpleNamespace

    from swwae.training.module import SWWAEModule

    module = SWWAEModule(widths=[4]).to(CUDA)
    params = list(module.parameters())
    for p in params:
        p.grad = torch.ones_like(p)
    fused = torch.optim.Adam(params, lr=1e-3, fused=True)
    fused.step()
    plain = torch.optim.Adam(params, lr=1e-3, foreach=False)
    plain.load_state_dict(fused.state_dict())
    assert plain.param_groups[0]["fused"] and all(s["step"].is_cuda for s in plain.state.values())
    module.trainer = SimpleNamespace(optimizers=[plain])
    module.on_train_start()
    assert not plain.param_groups[0]["fused"]
    assert all(s["step"].device.type == "cpu" and s["step"].item() == 1 for s in plain.state.values())


# determinism


def one_step(mode: str, x: torch.Tensor, y: torch.Tensor):
    """Loss and every gradient of one step of a small SWWAE (dropout and batch norm on)."""
    torch.manual_seed(0)
    net = SWWAE(
        widths=[8, 16], pool_mode=mode, image_shape=tuple(x.shape[1:]), num_classes=10, dropout=0.2, batch_norm=True
    ).to(x.device)
    loss = swwae_loss(net(x), x, y, lambda_rec=1.0, lambda_m=0.1, lambda_nll=1.0)["loss"]
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in net.parameters() if p.grad is not None]


def test_a_checkpoints_host_copy_of_gpu_tensors_is_pinned_and_holds_the_values_of_that_moment():
    """The background writer's copy (``host_copy``): asynchronous copies into pinned memory, every
    one finished when it returns, a tensor met twice copied once, host tensors copied too."""
    weights = torch.randn(256, 256, device=CUDA)
    checkpoint = {"state_dict": {"w": weights, "again": weights}, "cpu": torch.ones(3), "epoch": 2}
    expected = weights.cpu()
    torch.cuda._sleep(10**8)  # the GPU busy for a while: a copy not waited for would not have landed
    copied = host_copy(checkpoint)
    weights.add_(1.0)  # training goes on
    w = copied["state_dict"]["w"]
    assert w.device.type == "cpu" and w.is_pinned() and torch.equal(w, expected)
    assert copied["state_dict"]["again"] is w and copied["epoch"] == 2
    assert copied["cpu"] is not checkpoint["cpu"] and torch.equal(copied["cpu"], checkpoint["cpu"])


@pytest.mark.parametrize("mode", MODES)
def test_every_mode_is_bit_reproducible_on_cuda_under_deterministic_algorithms(deterministic, mode):
    """No op of any mode raises (nn.MaxUnpool2d and F.pad(mode="reflect") would), and the loss
    and every gradient come out bit-identical twice."""
    x = torch.rand(6, 3, 32, 32, generator=generator(9)).to(CUDA)
    y = torch.tensor([0, 1, 2, -1, -1, 5], device=CUDA)
    (loss_a, grads_a), (loss_b, grads_b) = one_step(mode, x, y), one_step(mode, x, y)
    assert torch.isfinite(loss_a) and torch.equal(loss_a, loss_b)
    assert len(grads_a) == len(grads_b) > 0 and all(torch.equal(a, b) for a, b in zip(grads_a, grads_b))


# mixed precision


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_mode_trains_a_step_on_cuda_in_half_precision_autocast(mode, dtype):
    """bf16: finite loss and gradients; fp16: the same through a grad scaler, which finds no
    overflow at its starting scale (2**16), so the step is taken: by the job's Adam, fused on CUDA."""
    torch.manual_seed(0)
    net = SWWAE(widths=[8, 16], pool_mode=mode, image_shape=(1, 28, 28), num_classes=10, beta=100.0).to(CUDA)
    optimizer = adam(net.parameters(), lr=1e-3)
    assert optimizer.defaults["fused"]
    scaler = torch.amp.GradScaler("cuda", enabled=dtype == torch.float16)
    x = torch.rand(16, 1, 28, 28, generator=generator(10)).to(CUDA)
    y = torch.randint(0, 10, (16,), generator=generator(11)).to(CUDA)
    with torch.autocast("cuda", dtype=dtype):
        out = net(x)
        terms = swwae_loss(out, x, y, lambda_rec=1.0, lambda_m=0.1, lambda_nll=1.0)
    assert out.recon.dtype == dtype and all(torch.isfinite(t) for t in terms.values())
    scaler.scale(terms["loss"]).backward()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)
    scaler.step(optimizer)
    scaler.update()
    assert scaler.get_scale() == (2.0**16 if dtype == torch.float16 else 1.0)
    assert all(torch.isfinite(p).all() for p in net.parameters())


@pytest.mark.parametrize("kernel, stride, padding", [(2, 2, 0), (3, 3, 0), (3, 2, 1)])
def test_soft_pooling_computes_in_float32_inside_cuda_autocast(deterministic, kernel, stride, padding):
    """Bit for bit the float32 result (deterministic: the scatter of overlapping windows adds
    in a fixed order)."""
    pool = WhatWherePool(kernel, stride, padding, mode="soft", beta=100.0)
    x = torch.randn(2, 4, 12, 12, generator=generator(12)).to(CUDA).bfloat16()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        what, where = pool(x)
        x_hat = Unpool(pool)(what, where)
    want_what, want_where = pool(x.float())
    assert what.dtype == where.row.dtype == x_hat.dtype == torch.float32
    assert torch.equal(what, want_what) and torch.equal(where.row, want_where.row)
    assert torch.equal(x_hat, Unpool(pool)(want_what, want_where))


def test_hard_switches_inside_cuda_autocast_are_those_of_float32():
    pool = WhatWherePool(3, 2, 1, mode="hard")
    x = torch.randn(2, 4, 12, 12, generator=generator(13)).to(CUDA).bfloat16()
    with torch.autocast("cuda", dtype=torch.bfloat16):
        _, where = pool(x)
    _, want = pool(x.float())
    assert torch.equal(where.indices, want.indices) and torch.equal(where.mask.float(), want.mask)


# memory and host syncs


def test_peak_memory_on_cuda_is_the_high_water_mark_of_the_step():
    def step():
        a = torch.empty(2**18, device=CUDA)  # 1 MiB
        b = torch.empty(2**18, device=CUDA)
        del a, b
        torch.empty(2**18, device=CUDA)

    kept = torch.empty(2**20, device=CUDA)  # allocated before: not counted
    assert peak_memory(step, CUDA) == 2 * 2**20
    del kept


def test_pool_unpool_memory_on_cuda_hard_is_no_more_than_native():
    """The bench's memory target (hard <= 1.1x native max (un)pooling), asserted where it is a
    count of bytes, not a time."""
    x = torch.randn(32, 16, 28, 28, generator=generator(14)).to(CUDA)

    def native():
        xx = x.detach().requires_grad_(True)
        what, indices = F.max_pool2d(xx, 2, return_indices=True)
        F.max_unpool2d(what, indices, 2, output_size=x.shape[-2:]).square().sum().backward()

    def hard():
        pool = WhatWherePool(2)
        xx = x.detach().requires_grad_(True)
        what, where = pool(xx)
        Unpool(pool)(what, where).square().sum().backward()

    native(), hard()  # warm-up: cuDNN and the allocator
    assert peak_memory(hard, CUDA) <= 1.1 * peak_memory(native, CUDA)


@pytest.mark.parametrize("model, pool_size", [("swwae_hard", 3), ("swwae_soft", 3), ("wavelet", 2)])
def test_training_steps_on_cuda_wait_for_the_gpu_only_where_they_log(make_config, monkeypatch, model, pool_size):
    """As tests/test_host_sync.py, on the GPU: only reads of CUDA tensors count, plus blocking
    copies to and from it; steps 1, 2, 4, 5 have none (3x3 pools: the soft pool's bigger-window
    paths)."""
    spy = SyncsPerBatch("cuda")
    with_callback(monkeypatch, spy)
    train(
        make_config(
            f"model={model}",
            "trainer=gpu",
            "model.widths=[8,16]",
            f"model.pool_size={pool_size}",
            "data.num_labels=100",
            "trainer.limit_train_batches=6",
            "trainer.log_every_n_steps=3",
            "trainer.limit_val_batches=1",
            "test=false",
        )
    )
    assert len(spy.batches) == 6
    assert [spy.batches[i] for i in (0, 1, 3, 4)] == [{}] * 4, spy.batches
    assert spy.batches[2], "the check step reads back: the counting itself works"


# train.py on the GPU


def finite_metrics(tmp_path, name: str) -> dict:
    metrics = json.loads((tmp_path / "outputs" / name / "metrics.json").read_text())["metrics"]
    assert all(math.isfinite(v) for v in metrics.values()), metrics
    return metrics


@pytest.mark.slow
@pytest.mark.parametrize(
    "overrides",
    [
        ["trainer=gpu", "trainer.precision=bf16-mixed", "model=swwae_soft"],
        ["trainer=gpu", "trainer.precision=16-mixed", "model=swwae_soft"],
        ["trainer=gpu", "trainer.precision=bf16-mixed", "model=wavelet"],
        ["trainer=ddp", "trainer.accelerator=gpu", "trainer.devices=1", "model.batch_norm=true"],  # NCCL, sync BN
    ],
    ids=["bf16-soft", "fp16-soft", "bf16-wavelet", "ddp-nccl"],
)
def test_quick_gpu_runs_train_with_finite_metrics(tmp_path, overrides):
    result = train_cli(tmp_path, "model.widths=[8,16]", *overrides, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    assert {"val/recon_mse", "test/recon_mse"} <= set(finite_metrics(tmp_path, "run"))


@pytest.mark.slow
def test_deterministic_gpu_runs_are_bit_identical(tmp_path):
    """trainer.deterministic=true on the GPU: the soft pool's flat scatter, cuDNN and cuBLAS
    (CUBLAS_WORKSPACE_CONFIG, which Lightning sets) in their deterministic modes."""
    args = [
        "trainer=gpu",
        "trainer.deterministic=true",
        "model=swwae_soft",
        "model.widths=[8,16]",
        "model.dropout=0.2",
        "model.pool_size=3",
    ]
    runs = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        result = train_cli(tmp_path / name, *args, name=name, timeout=240)
        assert result.returncode == 0, result.stderr[-3000:]
        metrics = finite_metrics(tmp_path / name, name)
        metrics.pop("train_time_s")
        runs.append(metrics)
    assert runs[0] == runs[1]
