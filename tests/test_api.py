"""The Python API: ``swwae.load`` gives back the plain-torch network of a checkpoint, with
its run config, and agrees with scripts/evaluate.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hydra.utils import instantiate

import swwae
from swwae.errors import CheckpointError
from swwae.model import SWWAE
from swwae.training.checkpoints import load_model
from swwae.training.run import train


@pytest.mark.slow
def test_load_round_trips_a_checkpoint_to_the_metrics_of_evaluate(make_config, tmp_path):
    from swwae.commands.evaluate import evaluate

    train(make_config("model.widths=[8,16]"))
    best = tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "best.ckpt"

    net = swwae.load(best)
    assert type(net) is SWWAE and not net.training and next(net.parameters()).device.type == "cpu"
    assert net.config["run_name"] == "swwae_hard_mnist_sample_seed0" and net.config["model"]["widths"] == [8, 16]

    datamodule = instantiate(net.config["data"])  # the data it was trained on, from its own config
    datamodule.setup("test")
    squared, count = 0.0, 0
    with torch.no_grad():
        for x, _ in datamodule.test_dataloader():
            squared += float(((net(x).recon - x) ** 2).sum())
            count += x.numel()
    expected = evaluate(best, out=tmp_path / "recon.png")["test/recon_mse"]
    assert squared / count == pytest.approx(expected, rel=1e-5)

    x = datamodule.images("test", 8)
    module, _ = load_model(best)
    with torch.no_grad():
        assert torch.equal(net(x).recon, module.net(x).recon)
        whats, wheres, sizes = net.encode(x)  # features
        assert [tuple(w.shape) for w in whats] == [(8, 8, 14, 14), (8, 16, 7, 7)]
        assert torch.equal(net.decode(whats[-1], wheres, sizes)[0], net(x).recon)
        assert net.reconstruct_without_where(x).shape == x.shape
    assert next(swwae.load(best, device="meta").parameters()).device.type == "meta"  # device= is honoured


def test_load_reports_bad_checkpoints_as_evaluate_does(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        swwae.load(tmp_path / "missing.ckpt")
    (tmp_path / "foreign.ckpt").write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError, match="not written by swwae|unreadable"):
        swwae.load(tmp_path / "foreign.ckpt")
    torch.save({"weights": torch.zeros(1)}, tmp_path / "other.ckpt")
    with pytest.raises(CheckpointError, match="not written by swwae"):
        swwae.load(tmp_path / "other.ckpt")


@pytest.mark.slow
def test_import_swwae_does_not_import_lightning():
    code = (
        "import sys, swwae; assert callable(swwae.load); "
        "print(sorted(m for m in sys.modules if m.startswith('lightning')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_docs_plain_torch_training_step_runs_without_lightning():
    """The docs' "training step of your own" block (wherever it stands: conftest.py runs it in
    the suite's process, where Lightning is already loaded), in a fresh interpreter: it trains
    and imports neither Lightning nor Hydra."""
    from helpers.config import ROOT
    from helpers.docs import code_blocks

    [block] = [b for b in code_blocks("python") if "swwae_loss(" in b.source and "optimizer.step()" in b.source]
    check = (
        "\nimport math, sys\nassert math.isfinite(float(terms['loss'])) and set(terms) >= {'recon_mse', 'nll'}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'hydra', 'omegaconf')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", block.source + check], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "[]"
