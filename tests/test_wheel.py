"""From a wheel, in an empty folder, every subcommand works and writes where the user stands:
train on the bundled sample, a ``-m`` sweep with its summary.md, runs, project, compare; and on
a folder of the user's own images, train, evaluate, export (model folder and ONNX) and probe (the
same command again reporting the finished run is docs/own_data.md's block). Help and hints name
what a wheel's user has: ``swwae <subcommand>``, ``pip install "swwae[extra]"``. The wheel is
built from this clone and installed into a fresh virtual environment (its dependencies this
one's); nothing of the clone is on its path."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import swwae
from helpers.image_folders import write_image_folder
from helpers.wheel import build_wheel, run, venv_with
from swwae.install import importable

RUN = "swwae_hard_mnist_sample_seed0"
FOLDER_RUN = "swwae_hard_image_folder_seed0"
# the smallest run of a folder of images
FOLDER_SETTINGS = ["debug=quick", "data=image_folder", "data.root=pets", "data.image_size=16"]
FOLDER_SETTINGS += ["data.val_size=2", "data.test_size=2", "model.widths=[4]"]


@pytest.mark.slow(longest=True)  # started first: a long test at the end keeps one worker alone
def test_every_subcommand_from_a_wheel_in_an_empty_folder(tmp_path):
    wheel = build_wheel(tmp_path)
    assert wheel.name == f"swwae-{swwae.__version__}-py3-none-any.whl"
    bin_ = venv_with(wheel, tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    env = {"PYTHONPATH": "", "PATH": f"{bin_}{os.pathsep}{os.environ['PATH']}"}

    def swwae_(*args, status=0):
        return run(bin_ / "swwae", *args, cwd=work, env=env, status=status)

    where = run(bin_ / "python", "-c", "import swwae, swwae.configs; print(swwae.configs.__file__)", cwd=work, env=env)
    assert where.stdout.startswith(str(tmp_path / "venv"))  # the wheel's package and configs, not the clone's
    assert swwae_("--version").stdout.strip() == f"swwae {swwae.__version__}"
    helped = swwae_("compare", "--help").stdout  # its examples: in a clone, python scripts/compare_runs.py
    assert "\n    swwae compare multirun/" in helped and "scripts/" not in helped
    missing = [name for name in ("wandb", "mlflow") if not importable(name)]  # logger, package, extra
    if missing:  # a logger whose extra is not installed: one line, the wheel's way to add it
        refused = swwae_("train", f"logger={missing[0]}", status=2).stderr.strip().splitlines()
        assert refused == [f'error: logger={missing[0]} needs {missing[0]}: pip install "swwae[{missing[0]}]"']

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

    swwae_("project", ckpt.relative_to(work), "stage=1", "out=proj.png")
    assert (work / "proj.png").is_file()
    swwae_("compare", sweep.relative_to(work))  # into the folder it runs in, never into the sweep's
    assert "2 jobs, 2 configs, 0 failed" in (work / "summary.md").read_text() and (work / "summary.png").is_file()

    # a folder of one's own images (two classes of PNGs): the commands that read the run take it again
    write_image_folder(work / "pets", per_class=6)
    trained = swwae_("train", *FOLDER_SETTINGS)
    assert f"done: {FOLDER_RUN}" in trained.stdout + trained.stderr
    folder_ckpt = Path("checkpoints", "quick", FOLDER_RUN, "best.ckpt")
    evaluated = json.loads(swwae_("evaluate", folder_ckpt, "--data-root", "pets", "--out", "pets.png").stdout)
    assert "test/recon_mse" in json.dumps(evaluated) and (work / "pets.png").is_file()
    onnx = ["--onnx", "m.onnx"] if importable("onnxruntime") else []
    swwae_("export", folder_ckpt, "--to", "m/", *onnx)
    assert (work / "m" / "config.json").is_file() and (work / "m" / "model.safetensors").is_file()
    assert json.loads((work / "m" / "config.json").read_text())["swwae"]["version"] == swwae.__version__
    assert not onnx or (work / "m.onnx").is_file()
    swwae_("probe", folder_ckpt, "--data-root", "pets", "--labels", "all", "--k", "3", "--json", "probes.json")
    assert json.loads((work / "probes.json").read_text())["rows"][-1]["name"] == FOLDER_RUN

    expected = {"checkpoints", "logs", "outputs", "multirun", "m", "probes.json", "proj.png", "pets", "pets.png"}
    expected |= {"summary.md", "summary.png"}
    assert {p.name for p in work.iterdir()} - {"m.onnx", "m.onnx.data"} == expected
