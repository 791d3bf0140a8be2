"""From a wheel, in an empty folder, every subcommand works and writes where the user stands:
train, a ``-m`` sweep with its summary.md, runs, evaluate, export (model folder and ONNX),
probe, project, compare. The wheel is built from this clone and installed into a fresh virtual
environment (its dependencies this one's); nothing of the clone is on its path."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

import swwae
from helpers.wheel import build_wheel, run, venv_with

RUN = "swwae_hard_mnist_sample_seed0"


@pytest.mark.slow(longest=True)  # started first: a long test at the end keeps one worker alone
def test_every_subcommand_from_a_wheel_in_an_empty_folder(tmp_path):
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"swwae-{swwae.__version__}-py3-none-any.whl"
    bin_ = venv_with(wheel, tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYTHONPATH": "", "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}

    def swwae_(*args):
        return run(bin_ / "swwae", *args, cwd=work, env=env)

    where = run(bin_ / "python", "-c", "import swwae, swwae.configs; print(swwae.configs.__file__)", cwd=work, env=env)
    assert where.stdout.startswith(str(tmp_path / "venv"))  # the wheel's package and configs, not the clone's
    assert swwae_("--version").stdout.strip() == f"swwae {swwae.__version__}"

    trained = swwae_("train", "debug=quick")
    assert f"done: {RUN}" in trained.stdout + trained.stderr
    ckpt = work / "checkpoints" / "quick" / RUN / "best.ckpt"
    assert ckpt.is_file() and (work / "logs" / "quick" / RUN).is_dir()
    assert len(list((work / "outputs").rglob("metrics.json"))) == 1

    swwae_("train", "-m", "debug=quick", "model=swwae_hard,upsample")
    (sweep,) = (work / "multirun" / "quick").iterdir()  # debug=quick's sweeps: a root of their own
    assert "2 jobs, 2 configs, 0 failed" in (sweep / "summary.md").read_text()

    listed = swwae_("runs").stdout
    assert f"quick/{RUN}" in listed and "quick/upsample_mnist_sample_seed0" in listed

    evaluated = json.loads(swwae_("evaluate", ckpt.relative_to(work), "--out", "recon.png").stdout)
    assert "test/recon_mse" in json.dumps(evaluated) and (work / "recon.png").is_file()

    onnx = ["--onnx", "m.onnx"] if importlib.util.find_spec("onnxruntime") else []
    swwae_("export", ckpt.relative_to(work), "--to", "m/", *onnx)
    assert (work / "m" / "config.json").is_file() and (work / "m" / "model.safetensors").is_file()
    assert json.loads((work / "m" / "config.json").read_text())["swwae"]["version"] == swwae.__version__
    assert not onnx or (work / "m.onnx").is_file()

    swwae_("probe", ckpt.relative_to(work), "--labels", "100", "--json", "probes.json")
    assert (work / "probes.json").is_file()
    swwae_("project", ckpt.relative_to(work), "stage=1", "out=proj.png")
    assert (work / "proj.png").is_file()
    swwae_("compare", sweep.relative_to(work))
    assert (sweep / "summary.png").is_file()

    expected = {"checkpoints", "logs", "outputs", "multirun", "m", "recon.png", "probes.json", "proj.png"}
    assert {p.name for p in work.iterdir()} - {"m.onnx", "m.onnx.data"} == expected
