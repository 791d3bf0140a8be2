"""A file is data: nothing read from a checkpoint, a model folder, metrics.json or a sweep folder
is instantiated or imported by name. The payloads below pass every check on the bytes (weights
only, a valid checksum: anyone can compute one); each entry point must refuse them in one line
and create nothing, whatever TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD says."""

from __future__ import annotations

import importlib.util
import json
import pickle

import pytest
import torch

from helpers.cli import run_cli
from helpers.config import ROOT
from swwae.checkpoint_file import file_sha256, with_checksum
from swwae.errors import CheckpointError
from swwae.training.registry import DATASETS, build_data, data_of_run, data_spec

OLD_CHECKPOINT = ROOT / "tests" / "data" / "checkpoint_v0_1.ckpt"


class CreatesAFile:
    """Unpickled, it creates the file it names: what a torch.load(weights_only=False) runs."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def payloads(tmp_path) -> dict[str, tuple[dict, object]]:
    """name -> (the data config a file carries, the path that exists if its code ran)."""
    opened, unpickled = tmp_path / "opened-by-the-file", tmp_path / "unpickled-by-the-file"
    evil = tmp_path / "evil.pkl"
    evil.write_bytes(pickle.dumps(CreatesAFile(unpickled)))
    return {
        "open": ({"_target_": "builtins.open", "file": str(opened), "mode": "w"}, opened),
        "torch.load": ({"_target_": "torch.load", "f": str(evil), "weights_only": False}, unpickled),
    }


def crafted_checkpoint(tmp_path, data: dict):
    """The shipped old checkpoint with ``data`` as its run's data config, its checksum valid."""
    checkpoint = torch.load(OLD_CHECKPOINT, map_location="cpu", weights_only=True)
    checkpoint["swwae_config"] = dict(checkpoint["swwae_config"], data=data)
    checkpoint.pop("swwae_checksum", None)
    path = tmp_path / "crafted" / "best.ckpt"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(with_checksum(checkpoint), path)
    return path


def crafted_sweep(tmp_path, checkpoint) -> object:
    job = tmp_path / "sweep" / "0_crafted"
    (job / ".hydra").mkdir(parents=True, exist_ok=True)
    (job / ".hydra" / "overrides.yaml").write_text("- seed=0\n")
    (job / "metrics.json").write_text(
        json.dumps(
            {
                "run_name": "crafted",
                "status": "ok",
                "checkpoint": str(checkpoint),
                "checkpoint_sha256": file_sha256(checkpoint),  # as train.py records it
                "metrics": {"test/recon_mse": 0.1},
            }
        )
    )
    return job.parent


def crafted_folder(tmp_path, data: dict):
    """A model folder (export.py --to) whose config.json carries ``data`` as its run's data config."""
    folder = tmp_path / "model"
    result = run_cli(ROOT / "scripts" / "export.py", OLD_CHECKPOINT, "--to", folder, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    config = json.loads((folder / "config.json").read_text())
    config["run_config"] = dict(config["run_config"] or {}, data=data)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


# the registry, in process


@pytest.mark.parametrize(
    "target",
    [
        "builtins.open",
        "torch.load",
        "os.system",
        "swwae.training.data.Splits",
        "evil.MNISTSampleDataModule",
        "MNISTSampleDataModule",
        None,
        3,
    ],
)
def test_a_data_target_that_is_not_a_shipped_data_set_is_refused_naming_it(target):
    with pytest.raises(CheckpointError, match="is not one that swwae ships") as caught:
        data_spec(target, "checkpoint x.ckpt")
    assert str(target)[:40] in str(caught.value)
    hint = "a lab's own data set is found once its plugin is loaded (SWWAE_PLUGINS=<module>, or its package's"
    assert str(caught.value).endswith(f"{hint} swwae.plugins entry point)")


def test_every_shipped_data_set_is_found_by_its_current_and_its_old_path():
    for spec in DATASETS.values():
        assert data_spec(spec.target) is spec
        if spec.aliases:  # checkpoints written before 0.2
            assert data_spec(f"swwae.data.{spec.cls}") is spec
        assert spec.load().__name__ == spec.cls


@pytest.mark.parametrize("value", [{"_target_": "builtins.open", "file": "x"}, {"a": 1}, [{"_target_": "os.system"}]])
def test_a_value_that_is_not_plain_is_refused(value):
    data = {"_target_": "swwae.training.data.MNISTSampleDataModule", "batch_size": value}
    with pytest.raises(CheckpointError, match="data.batch_size .* is not a plain value"):
        build_data(data, "checkpoint x.ckpt")


def test_an_unknown_data_setting_is_refused_and_a_shipped_one_is_built():
    target = "swwae.data.MNISTSampleDataModule"  # as a checkpoint written before 0.2 names it
    with pytest.raises(CheckpointError, match="data.evil, which mnist_sample does not take"):
        build_data({"_target_": target, "evil": 1}, "checkpoint x.ckpt")
    datamodule = data_of_run({"_target_": target, "batch_size": 7, "seed": 3}, "checkpoint x.ckpt")
    assert (type(datamodule).__name__, datamodule.batch_size, datamodule.seed) == ("MNISTSampleDataModule", 7, 3)


# every entry point, as a user runs it (in one process: each script's main(argv), its output
# captured; the payloads' effects are files, so a run of their code shows whatever the process)


def script_main(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def entry_points(tmp_path, checkpoint, folder) -> dict[str, tuple]:
    return {
        "evaluate": ("evaluate", [checkpoint, "--out", tmp_path / "e.png"]),
        "project": ("project", [checkpoint, "images=20", "top=2", f"out={tmp_path / 'p.png'}"]),
        "probe": ("probe", [checkpoint, "--labels", "20", "--no-controls"]),
        "compare --recon": (
            "compare_runs",
            [crafted_sweep(tmp_path, checkpoint), "--recon", "--out", tmp_path, "--checkpoints", checkpoint.parent],
        ),
        "probe (model folder)": ("probe", [folder, "--labels", "20", "--no-controls"]),
    }


@pytest.mark.slow
@pytest.mark.parametrize("payload", ["open", "torch.load"])
def test_no_entry_point_runs_code_from_a_file_that_passes_every_check(tmp_path, payload, capsys, monkeypatch):
    data, made = payloads(tmp_path)[payload]
    checkpoint, folder = crafted_checkpoint(tmp_path, data), crafted_folder(tmp_path, data)
    for force_no_weights_only in (False, True):
        if force_no_weights_only:  # torch reads it at every load
            monkeypatch.setenv("TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD", "1")
        for name, (script, args) in entry_points(tmp_path, checkpoint, folder).items():
            status = script_main(script)(list(map(str, args)))
            out, err = capsys.readouterr()
            output = (out + err).strip().splitlines()
            assert status == 2 and "Traceback" not in err, (name, force_no_weights_only, out[-500:], err[-2000:])
            if name != "compare --recon":  # which prints the sweep's table and its progress first
                assert len(output) == 1, (name, output)
            assert output[-1].startswith("error: ") and f"asks for the data class '{data['_target_']}'" in output[-1], (
                name,
                output,
            )
            assert not made.exists(), f"{name} ran the file's {payload}"


@pytest.mark.parametrize("fetch_hint", [None, "swwae evaluate run.ckpt --download"])
def test_missing_files_of_a_stored_run_say_how_the_command_fetches_them(tmp_path, fetch_hint):
    """A file's data is rebuilt where the user says; when its files are not there, the one line
    names the command's own way to fetch them (evaluate's --download, not a training override)."""
    from swwae.errors import DataError

    stored = {"_target_": "swwae.training.data.MNISTDataModule", "root": "/elsewhere", "download": True}
    hint = {} if fetch_hint is None else {"fetch_hint": fetch_hint}
    datamodule = data_of_run(stored, "run.ckpt", data_root=str(tmp_path), **hint)
    with pytest.raises(DataError) as err:
        datamodule.setup("test")
    line = str(err.value)
    assert f"--data-root <folder> says where they are, {fetch_hint or '--download'} fetches them" in line
    assert "data.download" not in line and "data.root" not in line
    assert str(tmp_path) in line and "\n" not in line and not (tmp_path / "elsewhere").exists()
