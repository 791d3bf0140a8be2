"""The Python API: ``swwae.load`` gives back the plain-torch network of a checkpoint, with
its run config, and agrees with scripts/evaluate.py."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from hydra.utils import instantiate

import swwae
from swwae.training.checkpoints import load_model
from swwae.errors import CheckpointError
from swwae.model import SWWAE
from swwae.training.run import train


@pytest.mark.slow
def test_load_round_trips_a_checkpoint_to_the_metrics_of_evaluate(make_config, tmp_path):
    from scripts.evaluate import evaluate

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
    code = "import sys, swwae; assert callable(swwae.load); print(sorted(m for m in sys.modules if m.startswith('lightning')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


@pytest.mark.slow
def test_the_readmes_use_a_trained_model_example_runs(make_config, tmp_path):
    """The README's example, as printed, on a fresh two-stage checkpoint."""
    import re

    from helpers.config import ROOT

    train(make_config("model.widths=[8,16]"))
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Use a trained model"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    code = code.replace("checkpoints/", f"{tmp_path}/checkpoints/")
    names: dict = {}
    exec(compile(code, "README.md", "exec"), names)
    assert names["out"].recon.shape == names["x"].shape == (8, 1, 28, 28)
    assert names["pixels"].shape == (4, 1, 28, 28) and names["pixels"].abs().sum() > 0


@pytest.mark.slow
def test_the_readmes_plain_torch_training_step_runs_without_lightning():
    """The README's 'a training step of your own' block, as printed, in a fresh interpreter:
    it trains and imports neither Lightning nor Hydra."""
    import re

    from helpers.config import ROOT

    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Use the pooling in your own network"):]
    code = next(block for block in re.findall(r"```python\n(.*?)```", section, re.S) if "swwae_loss(" in block)
    check = ("\nimport math, sys\nassert math.isfinite(float(terms['loss'])) and set(terms) >= {'recon_mse', 'nll'}\n"
             "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lightning', 'hydra', 'omegaconf')))\n")
    result = subprocess.run([sys.executable, "-c", code + check], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "[]"
