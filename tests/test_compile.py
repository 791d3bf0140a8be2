"""torch.compile (docs/performance.md): every pooling mode's forward and backward compile
whole (``fullgraph=True``: no graph break) on CPU and match eager results; so does the
network; ``compile=true`` trains, keeps checkpoint keys, and resumes.

The per-mode checks use the ``aot_eager`` backend: it traces exactly what inductor would get
(dynamo's graph, AOTAutograd's forward and backward) without generating C++ code, seconds
instead of a minute a graph on two cores; the training run compiles with the default,
inductor, and resumes through ``aot_eager`` (a compiled run's checkpoints are an eager one's:
any backend, or none, resumes them)."""

from __future__ import annotations

import collections
import json
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

import swwae
from helpers.cli import last_error_line, train_cli, train_here
from helpers.faults import with_callback
from helpers.steps import WITHOUT_A_TRAINER
from swwae.bench.epoch_clock import HandLoop
from swwae.errors import ConfigError
from swwae.loss import flat_pair, mse, swwae_loss
from swwae.model import SWWAE
from swwae.pooling import MODES, Unpool, make_pool
from swwae.pooling.layout import memory_format_of
from swwae.pooling.modes import POOL_MODES
from swwae.training.process import compile_backend
from swwae.training.run import train

BACKEND = "aot_eager"
# torch 2.4's compiler breaks the network's graph at its output (a dataclass holding the wheres), and
# compile=true (no fullgraph) runs it in pieces, with the same results; 2.6 and later trace it whole
WHOLE = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 6)
GEOMETRIES = {  # (kernel, stride): windows apart, and overlapping
    "apart": (2, None),
    "overlapping": (3, 2),
}

# helpers


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pool_and_unpool(mode: str, kernel: int, stride: int | None):
    torch.manual_seed(0)
    pool = make_pool(mode, 3, kernel, stride, 0, beta=10.0)
    unpool = Unpool(pool)

    def run(x: torch.Tensor):
        what, where = pool(x)
        return what, unpool(what * 2 - 1, where, output_size=x.shape[-2:])

    return run


def forward_and_backward(fn, x: torch.Tensor) -> list[torch.Tensor]:
    x = x.detach().clone().requires_grad_(True)
    what, back = fn(x)
    (what.square().sum() + (back * torch.linspace(-1, 1, back.shape[-1])).sum()).backward()
    return [what.detach(), back.detach(), x.grad]


# every mode, compiled whole


@pytest.mark.slow
@pytest.mark.parametrize("geometry", GEOMETRIES)
@pytest.mark.parametrize("mode", MODES)
def test_each_pooling_mode_compiles_without_graph_breaks_and_matches_eager(mode, geometry):
    kernel, stride = GEOMETRIES[geometry]
    if mode == "wavelet" and geometry == "overlapping":
        pytest.skip("wavelet pooling has no stride of its own")
    fn = pool_and_unpool(mode, kernel, stride)
    x = torch.randn(2, 3, 13, 15, generator=torch.Generator().manual_seed(1))  # odd sizes
    expected = forward_and_backward(fn, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = forward_and_backward(torch.compile(fn, fullgraph=True, backend=BACKEND), x)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5)
    # nothing of the pooling's own code warns while it is traced (e.g. a cached function met); not
    # any warning that names a path with "swwae" in it (another test's file, closed by the collector)
    package = str(Path(swwae.__file__).parent)
    assert not [str(w.message) for w in caught if package in f"{w.filename} {w.message}"]


ON_CUDA = pytest.param(
    "cuda", "inductor", 2e-3,  # TF32 convolutions, reordered sums: a wrong gradient is off by far more
    marks=[pytest.mark.cuda, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")],
)  # fmt: skip


@pytest.mark.slow
@pytest.mark.parametrize("device, backend, tolerance", [("cpu", BACKEND, 1e-4), ON_CUDA])
def test_the_network_compiles_whole_and_trains_as_in_eager_mode(device, backend, tolerance):
    """On a GPU with the code generator (Triton kernels of the reference path: the fused kernels
    step aside under torch.compile), as on the CPU traced."""
    torch.manual_seed(0)
    net = SWWAE(widths=[4, 8], pool_mode="soft").to(device)
    x, y = torch.rand(8, 1, 28, 28, device=device), torch.randint(0, 10, (8,), device=device)

    def loss() -> torch.Tensor:
        return swwae_loss(net(x), x, y, lambda_rec=1.0, lambda_m=0.1, lambda_nll=1.0)["loss"]

    eager = loss()
    eager.backward()
    grads = [p.grad.clone() for p in net.parameters()]
    net.zero_grad()
    keys = list(net.state_dict())
    net.compile(fullgraph=WHOLE, backend=backend)  # in place: the same state-dict keys
    compiled = loss()
    compiled.backward()
    assert list(net.state_dict()) == keys
    torch.testing.assert_close(compiled, eager, rtol=tolerance, atol=tolerance / 100)
    for p, g in zip(net.parameters(), grads, strict=True):
        torch.testing.assert_close(p.grad, g, rtol=tolerance, atol=tolerance / 100)


def test_compile_takes_true_false_or_a_backend_name():
    assert compile_backend(False) is None and compile_backend(None) is None
    assert compile_backend(True) == "inductor" and compile_backend("aot_eager") == "aot_eager"
    for bad in ("fast", 1, ["inductor"]):
        with pytest.raises(ConfigError, match="write true, false, or a torch.compile backend .*inductor"):
            compile_backend(bad)


# compile=true in train.py


SMALL = ["model.widths=[4,8]", "test=false"]


@pytest.mark.slow
def test_a_compiled_quick_run_trains_and_resumes_with_plain_checkpoints(tmp_path):
    from helpers.faults import crash_at

    run = "swwae_hard_mnist_sample_seed0"
    first = train_cli(  # a run of 2 epochs that stops at the start of the second
        tmp_path, "compile=true", *SMALL, "trainer.max_epochs=2", *crash_at(epoch=1), name="first", timeout=600
    )
    assert first.returncode == 1 and "Crash: crashed in epoch 2" in first.stderr, first.stderr[-3000:]
    last = tmp_path / "checkpoints" / run / "last.ckpt"
    net = swwae.load(last)  # the keys of an eager network: no _orig_mod. prefix
    assert net.config["compile"] is True

    more = train_here(  # traced, not code-generated: what resumes is the checkpoint, whichever backend
        tmp_path,
        "compile=aot_eager",
        *SMALL,
        "trainer.max_epochs=2",
        "resume=true",
        name="more",
    )
    assert more.returncode == 0, more.stderr[-3000:]
    assert "resume=true: continuing this run from" in more.stderr + more.stdout
    assert json.loads((tmp_path / "outputs" / "more" / "metrics.json").read_text())["epochs"] == 2
    assert torch.load(last, weights_only=True)["epoch"] == 1

    bad = train_here(tmp_path, "compile=fast", name="bad")
    assert bad.returncode == 2 and last_error_line(bad).startswith("error: compile='fast': write true, false")


COMPILED_CALLS = collections.Counter()


@torch._dynamo.register_backend(name="swwae_test_counting")
def counting_backend(graph, example_inputs):
    """A torch.compile backend that runs dynamo's graph as it is and counts its calls."""

    def run(*args):
        COMPILED_CALLS["graphs"] += 1
        return graph.forward(*args)

    return run


class KeepJob(L.Callback):
    def on_fit_end(self, trainer, module):
        self.module, self.data = module, trainer.datamodule


@pytest.mark.slow
def test_the_benchmarks_hand_written_twin_of_a_compiled_run_runs_compiled_alike(make_config, monkeypatch):
    """bench_epoch times the job against a hand-written loop on the same network
    (``swwae.bench.epoch_clock.HandLoop``): with ``compile`` set, the twin's network goes through
    the same backend, or a compiled job would be timed against an eager loop."""
    kept = KeepJob()
    with_callback(monkeypatch, kept)
    limits = ["trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "trainer.max_epochs=1"]
    train(make_config("model.widths=[4]", "compile=swwae_test_counting", *limits, "test=false"))
    hand = HandLoop(kept.module, kept.data)
    hand.start_epoch()
    before = COMPILED_CALLS["graphs"]
    hand.train_step()
    assert COMPILED_CALLS["graphs"] > before


# channels_last (a memory layout, beside compile among the job's speed settings)


@pytest.mark.parametrize("mode", ["hard", "soft", "wavelet"])
@WITHOUT_A_TRAINER
def test_channels_last_is_a_layout_the_same_losses_grads_and_plain_checkpoints(mode):
    from swwae.training.module import SWWAEModule
    from swwae.training.process import use_channels_last

    torch.manual_seed(0)
    plain_module = SWWAEModule(pool_mode=mode, widths=[4, 8])
    laid_out = SWWAEModule(pool_mode=mode, widths=[4, 8])
    laid_out.load_state_dict(plain_module.state_dict())
    assert use_channels_last(laid_out, True, "cpu") and not use_channels_last(plain_module, False, "cpu")
    assert not use_channels_last(plain_module, "auto", "cuda") and not plain_module.channels_last  # unmeasured there
    on_cpu = use_channels_last(SWWAEModule(pool_mode=mode, widths=[4, 8]), "auto", "cpu")
    assert on_cpu == POOL_MODES[mode].channels_last  # where the mode's pooling runs in that layout as it is
    conv = next(m for m in laid_out.net.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    x, y = torch.rand(6, 1, 28, 28), torch.tensor([0, 1, 2, -1, -1, -1])
    losses = [module.training_step((x, y), 0) for module in (plain_module, laid_out)]
    for loss in losses:
        loss.backward()
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-5, atol=1e-6)
    for (name, a), b in zip(plain_module.named_parameters(), laid_out.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-4, atol=1e-5, msg=name)
    fresh = SWWAEModule(pool_mode=mode, widths=[4, 8])
    fresh.load_state_dict(laid_out.state_dict())  # a channels_last run's checkpoint: any layout loads it
    with torch.no_grad():  # evaluation's exact metrics take channels-last maps (a view() once refused them)
        for module in (plain_module, laid_out):
            module.validation_step((x, y), 0)
            module.test_step((x, y), 0)
    for name, metric in plain_module.metrics["val"].items():
        torch.testing.assert_close(laid_out.metrics["val"][name].compute(), metric.compute(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(laid_out.test_outcomes, plain_module.test_outcomes, rtol=1e-4, atol=1e-6)


def test_the_metrics_pair_the_same_elements_whatever_the_layouts():
    plain = torch.rand(2, 3, 4, 5)
    last = plain.contiguous(memory_format=torch.channels_last)
    for a, b in [(plain, plain), (last, last), (last, plain), (plain, last)]:
        flat_a, flat_b = flat_pair(a, b)
        assert flat_a.dim() == 1 and torch.equal(flat_a, flat_b)
    assert flat_pair(last, last)[0].data_ptr() == last.data_ptr()  # a view: no copy a batch


class MixedLayouts(TorchDispatchMode):
    """Counts the ops, by name, that take maps in both layouts, (N, C, H, W) and (N, H, W, C): each
    a slower path, and a convolution's a copy of one of them first. Maps of one channel or one
    pixel, laid out both ways at once, count as neither."""

    def __init__(self):
        super().__init__()
        self.ops = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        maps = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.dim() == 4]
        layouts = {memory_format_of(t) for t in maps if t.shape[1] > 1 and t.shape[2] * t.shape[3] > 1}
        if len(layouts) > 1:
            self.ops[func.__name__] += 1
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("mode", [m for m in MODES if POOL_MODES[m].channels_last])  # channels_last=auto's
def test_a_channels_last_step_mixes_the_layouts_only_where_torch_does(mode):
    """The MSE terms hand their gradients back in their maps' layout (``swwae.loss.mse``; torch's
    ``F.mse_loss`` hands them back plain: a default CPU step took 1.08-1.12x as long), with
    ``F.mse_loss``'s values, bit for bit; nearest upsampling answers in its input's layout too.
    Hard: torch's derivative of max pooling's backward (the hard unpooling) gathers the
    unpooling's gradient plain, and two ops meet it, the sum with the middle term's gradient and
    the pool's backward (a backward of our own gained 1-3% of a CPU step on 2026-12-06: not
    worth a Python call a stage on a GPU). No classifier: flattening a channels-last top of more
    than one pixel for it is a copy into the plain layout, whose gradient comes back plain (the
    paper's networks pool down to 1x1)."""
    mixing = 2 if mode == "hard" else 0
    torch.manual_seed(0)
    net = SWWAE.from_settings({"arch": "(4)3c-2p-(6)3c-2p", "pool_mode": mode}, (1, 12, 12), 10)
    net = net.to(memory_format=torch.channels_last)
    x = torch.rand(4, 1, 12, 12)
    with MixedLayouts() as mixed:
        swwae_loss(net(x), x, torch.full((4,), -1))["loss"].backward()
    assert sum(mixed.ops.values()) == mixing, mixed.ops
    a, b = (torch.rand(4, 3, 5, 6).contiguous(memory_format=torch.channels_last) for _ in range(2))
    ours, torchs = a.clone().requires_grad_(), a.clone().requires_grad_()
    assert torch.equal(mse(ours, b), F.mse_loss(torchs, b))
    mse(ours, b).backward()
    F.mse_loss(torchs, b).backward()
    assert torch.equal(ours.grad, torchs.grad) and ours.grad.is_contiguous(memory_format=torch.channels_last)
