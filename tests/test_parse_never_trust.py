"""Parse, never trust: a file with a valid checksum and odd contents is "unreadable" in one line,
and what reads it goes on (resume falls back, listings mark it and list the others); a file
never says where data lie or whether to download; a metrics.json is believed only about its own
run's weights; whatever a file names is read with bounds. The crafted files below carry valid
checksums, so the checksum is not what catches them."""

from __future__ import annotations

import builtins
import importlib.util
import io
import json
import os
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
import torch

import swwae
from helpers.config import ROOT
from swwae.checkpoint_file import file_sha256, read_checkpoint, with_checksum
from swwae.commands.runs import list_runs
from swwae.errors import CheckpointError, Unreadable
from swwae.training.registry import data_of_run
from swwae.training.runs.folder import IDENTITY_KEYS, RunFolder, identity_of
from swwae.training.sweep import collect

OLD_CHECKPOINT = ROOT / "tests" / "data" / "checkpoint_v0_1.ckpt"
DEEP = 20_000
DEEP_MARKER = "a list nested DEEP deep goes here"


def nested(depth: int) -> list:
    top = inner = []
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return top


def set_config(value):
    return lambda c: c.__setitem__("swwae_config", value)


def set_settings(**values):
    return lambda c: c["hyper_parameters"].update(values)


ODD = {  # what the file holds -> how to make it
    "stored config a string": set_config("model=swwae"),
    "state_dict an int": lambda c: c.__setitem__("state_dict", 7),
    f"a list nested {DEEP:,} deep": lambda c: c.__setitem__("extra", nested(DEEP)),
    "hyper_parameters a list": lambda c: c.__setitem__("hyper_parameters", [1, 2]),
    "pixel_mean a string": set_settings(pixel_mean=["x"]),
    "image_shape a string": set_settings(image_shape="abc"),
    "data section a list": lambda c: c["swwae_config"].__setitem__("data", [1]),
    "max_epochs a string": lambda c: c["swwae_config"]["trainer"].__setitem__("max_epochs", "many"),
    "mid-epoch position a string": lambda c: c.__setitem__("swwae_preempted", "half"),
    "mid-epoch training sums not numbers": lambda c: c.__setitem__(
        "swwae_preempted",
        {"epoch": 1, "batches_done": 2, "train_means": {"names": ["loss"], "sums": ["x"], "count": 8}},
    ),
    "epoch a float": lambda c: c.__setitem__("epoch", 1.5),
    "optimizer states a string": lambda c: c.__setitem__("optimizer_states", "adam"),
    "a scheduler an int": lambda c: c.__setitem__("lr_schedulers", [3]),
}


def splice_deep_list(path) -> None:
    """Write a list nested ``DEEP`` deep where ``torch.save`` wrote ``DEEP_MARKER`` in ``path``, as
    pickle opcodes (``DEEP + 1`` EMPTY_LISTs, then ``DEEP`` APPENDs): picklers recurse, and no
    recursion limit lets them write it on every Python (3.12.1's C pickler stops at 748 levels,
    whatever ``sys.setrecursionlimit`` says; 3.10's pure-Python one overflows the C stack)."""
    marker = DEEP_MARKER.encode()
    pickled = b"X" + len(marker).to_bytes(4, "little") + marker  # BINUNICODE: torch.save's protocol 2
    with zipfile.ZipFile(path) as archive:
        entries = {info.filename: archive.read(info) for info in archive.infolist()}
    (name,) = [n for n in entries if n.endswith("/data.pkl")]
    assert entries[name].count(pickled) == 1
    entries[name] = entries[name].replace(pickled, b"]" * (DEEP + 1) + b"a" * DEEP)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for n, data in entries.items():
            archive.writestr(n, data)


def crafted(path, change):
    """The shipped old checkpoint, changed by ``change``, saved at ``path`` with a valid checksum
    (of the deep list too: it is spliced into the file after the checksum and ``torch.save``)."""
    checkpoint = torch.load(OLD_CHECKPOINT, map_location="cpu", weights_only=True)
    checkpoint.pop("swwae_checksum", None)
    change(checkpoint)
    path.parent.mkdir(parents=True, exist_ok=True)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(10 * DEEP)  # the checksum recurses; the reader must not
    try:
        with_checksum(checkpoint)
    finally:
        sys.setrecursionlimit(limit)
    deep = isinstance(checkpoint.get("extra"), list)  # ODD's deeply nested list
    if deep:
        checkpoint["extra"] = DEEP_MARKER
    torch.save(checkpoint, path)
    if deep:
        splice_deep_list(path)
    return path


def script_main(name: str):
    spec = importlib.util.spec_from_file_location(f"script_{name}", ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def one_error_line(capsys) -> str:
    out, err = capsys.readouterr()
    lines = (out + err).strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, lines
    return lines[0]


# checkpoints: unreadable, in one line; resume falls back


@pytest.mark.parametrize("odd", list(ODD))
def test_a_checkpoint_with_odd_contents_is_unreadable_in_one_line(tmp_path, odd):
    path = crafted(tmp_path / "last.ckpt", ODD[odd])
    with pytest.raises(Unreadable) as caught:
        read_checkpoint(path)
    message = str(caught.value)
    assert message.startswith(f"checkpoint {path} is unreadable: ") and "\n" not in message, message
    assert ("nested deeper than 32 levels" in message) == ("deep" in odd)


def run_folder(tmp_path, last, best) -> RunFolder:
    """checkpoints/r/ holding ``last`` and ``best`` (None: the good old checkpoint), the request
    of the run that wrote the good one."""
    folder = tmp_path / "checkpoints" / "r"
    for name, change in (("last.ckpt", last), ("best.ckpt", best)):
        if change is None:
            folder.mkdir(parents=True, exist_ok=True)
            shutil.copy(OLD_CHECKPOINT, folder / name)
        else:
            crafted(folder / name, change)
    config = torch.load(OLD_CHECKPOINT, weights_only=True)["swwae_config"]
    return RunFolder(tmp_path / "checkpoints", "r", identity_of(*(config.get(k) for k in IDENTITY_KEYS)))


@pytest.mark.parametrize("odd", list(ODD))
def test_resume_passes_over_an_unreadable_last_checkpoint_to_the_good_best_one(tmp_path, odd):
    decision = run_folder(tmp_path, ODD[odd], None).decide("auto", 20, None)
    assert (decision.action, decision.checkpoint.name) == ("continue", "best.ckpt")
    assert decision.warnings[0].startswith("cannot resume from last.ckpt: checkpoint ")
    assert "is unreadable: " in decision.warnings[0]


OFF_SCHEMA = {  # plain, well-formed values that the run's schema (swwae.training.spec) refuses
    "model.lr negative": lambda c: c["swwae_config"]["model"].__setitem__("lr", -1.0),
    "a misspelled trainer key": lambda c: c["swwae_config"]["trainer"].__setitem__("max_epoch", 3),
    "val_check_interval 0": lambda c: c["swwae_config"]["trainer"].__setitem__("val_check_interval", 0),
}


@pytest.mark.parametrize("odd", list(OFF_SCHEMA))
def test_resume_passes_over_a_checkpoint_whose_stored_config_the_schema_refuses(tmp_path, odd):
    decision = run_folder(tmp_path, OFF_SCHEMA[odd], None).decide("auto", 20, None)
    assert (decision.action, decision.checkpoint.name) == ("continue", "best.ckpt")
    warning = decision.warnings[0]
    assert warning.startswith("cannot resume from last.ckpt: ") and "does not parse" in warning, warning
    assert "\n" not in warning


def test_a_folder_of_unreadable_checkpoints_starts_over_or_is_refused_with_resume_true(tmp_path):
    folder = run_folder(tmp_path, ODD["stored config a string"], ODD["state_dict an int"])
    assert folder.decide("auto", 20, None).action == "start_over"
    refusal = folder.decide("true", 20, None)
    assert refusal.action == "refuse" and "holds no checkpoint that reads back" in refusal.reason
    assert folder.kept() == "no checkpoint was saved"


@pytest.mark.parametrize("odd", ["pixel_mean a string", "image_shape a string", "hyper_parameters a list"])
def test_evaluate_on_odd_settings_is_one_line(tmp_path, odd, capsys):
    path = crafted(tmp_path / "best.ckpt", ODD[odd])
    assert script_main("evaluate")([str(path), "--out", str(tmp_path / "e.png")]) == 2
    assert "is unreadable: " in one_error_line(capsys)


def test_evaluate_on_a_folder_says_it_is_one_and_names_the_checkpoint_inside(tmp_path, capsys):
    shutil.copy(OLD_CHECKPOINT, tmp_path / "best.ckpt")
    assert script_main("evaluate")([str(tmp_path)]) == 2
    line = one_error_line(capsys)
    assert "is a folder, not a checkpoint file" in line and str(tmp_path / "best.ckpt") in line


def test_a_checkpoint_that_is_a_device_is_never_read(tmp_path):
    (tmp_path / "last.ckpt").symlink_to("/dev/zero")
    with pytest.raises(CheckpointError, match="not a regular file"):
        read_checkpoint(tmp_path / "last.ckpt")


# model folders


@pytest.fixture
def model_folder(tmp_path):
    return swwae.save_pretrained(swwae.load(OLD_CHECKPOINT), tmp_path / "model")


@pytest.mark.parametrize(
    "change",
    [
        {"pixel_mean": ["x"]},
        {"pixel_mean": [10**400]},  # an integer no float holds (math.isfinite raised OverflowError)
        {"image_shape": "abc"},
        {"image_shape": [1, 10**9, 28]},
        {"widths": {"a": 1}},
        {"run_config": "model=swwae"},
        {"run_config": {"data": [1]}},
    ],
    ids=str,
)
def test_a_model_folder_with_odd_settings_is_one_line_for_load_and_export(model_folder, change, capsys):
    config = json.loads((model_folder / "config.json").read_text()) | change
    (model_folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(Unreadable, match="is unreadable: "):
        swwae.load(model_folder)
    assert script_main("export")([str(model_folder), "--to", str(model_folder.parent / "out")]) == 2
    assert "is unreadable: " in one_error_line(capsys)
    assert not (model_folder.parent / "out").exists()


@pytest.mark.parametrize("target", ["/dev/zero", "fifo", "huge", "deep"])
def test_a_model_folder_config_is_read_with_bounds(model_folder, target):
    config = model_folder / "config.json"
    config.unlink()
    if target == "/dev/zero":
        config.symlink_to("/dev/zero")
    elif target == "fifo":
        os.mkfifo(config)  # a read would block forever
    elif target == "huge":
        config.write_text(json.dumps({"widths": [4, 8], "pad": "x" * (2 << 20)}))
    else:
        config.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(Unreadable) as caught:
        swwae.load(model_folder)
    assert "\n" not in str(caught.value)
    assert any(why in str(caught.value) for why in ("not a regular file", "larger than", "nested deeper"))


# listings: the bad one marked, the others listed


def test_swwae_runs_lists_every_run_and_marks_the_unreadable_one(tmp_path):
    root = tmp_path / "checkpoints"
    (root / "good").mkdir(parents=True)
    shutil.copy(OLD_CHECKPOINT, root / "good" / "last.ckpt")
    crafted(root / "bad" / "last.ckpt", ODD["stored config a string"])
    crafted(root / "deep" / "last.ckpt", ODD[f"a list nested {DEEP:,} deep"])
    rows, _ = list_runs(root)
    status = {row.name: (row.status, row.note) for row in rows}
    assert status["good"][0] == "finished"
    for bad in ("bad", "deep"):
        assert status[bad][0] == "unreadable" and status[bad][1].startswith("last.ckpt is unreadable: ")


def sweep_job(root, name: str, metrics=None, overrides="- seed=0\n"):
    job = root / name
    (job / ".hydra").mkdir(parents=True)
    (job / ".hydra" / "overrides.yaml").write_text(overrides)
    record = {"run_name": name, "status": "ok", "metrics": {"test/recon_mse": 0.1}} if metrics is None else metrics
    (job / "metrics.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return job


def test_compare_lists_every_job_and_marks_the_unreadable_ones(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    sweep_job(sweep, "0_good")
    sweep_job(sweep, "1_list", metrics=[1, 2])
    sweep_job(sweep, "2_strings", metrics={"status": "ok", "metrics": {"test/recon_mse": "low"}})
    sweep_job(sweep, "3_junk_overrides", overrides="{a: [1, \n  - : junk: :\n")
    sweep_job(sweep, "4_overrides_a_mapping", overrides="seed: 0\n")
    sweep_job(sweep, "5_not_json", metrics="{not json")
    jobs = {job.folder.name: job for job in collect(sweep).jobs}
    assert jobs["0_good"].ok and len(jobs) == 6
    for name in set(jobs) - {"0_good"}:
        assert jobs[name].record["status"] == "unreadable" and "\n" not in jobs[name].record["error"]
    assert script_main("compare_runs")([str(sweep), "--out", str(tmp_path)]) == 1  # the summary is written anyway
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "`3_junk_overrides`: .hydra/overrides.yaml: not YAML" in out
    assert "`2_strings`: metrics.json: metric test/recon_mse is str 'low', not a number" in out


# a file never says where data lie or whether to download


@pytest.fixture
def no_downloads(monkeypatch):
    """Every torchvision MNIST download attempt recorded, none made."""
    from torchvision.datasets import MNIST

    attempts = []

    def refuse(dataset):
        attempts.append(dataset.root)
        raise RuntimeError("no downloads in tests")

    monkeypatch.setattr(MNIST, "download", refuse)
    return attempts


def online_data(where) -> dict:
    return {"_target_": "swwae.training.data.MNISTDataModule", "root": str(where), "download": True, "batch_size": 8}


def test_rebuilt_data_take_root_and_download_from_the_user_never_from_the_file():
    config = {"data": online_data("/somewhere") | {"seed": 3, "num_labels": 100}}
    datamodule = data_of_run(config["data"], "checkpoint x.ckpt")
    assert (datamodule.root, datamodule.download, datamodule.seed) == ("./data", False, 3)
    datamodule = data_of_run(config["data"], "checkpoint x.ckpt", data_root="mine", download=True)
    assert (datamodule.root, datamodule.download) == ("mine", True)


@pytest.mark.parametrize("entry", ["evaluate", "compare --recon"])
def test_a_file_that_asks_to_download_elsewhere_downloads_nothing(tmp_path, entry, monkeypatch, no_downloads, capsys):
    elsewhere = tmp_path / "somewhere"
    checkpoint = crafted(
        tmp_path / "run" / "best.ckpt", lambda c: c["swwae_config"].update(data=online_data(elsewhere))
    )
    monkeypatch.chdir(tmp_path)  # ./data: empty
    if entry == "evaluate":
        status = script_main("evaluate")([str(checkpoint), "--out", str(tmp_path / "e.png")])
    else:
        record = {"status": "ok", "checkpoint": str(checkpoint), "checkpoint_sha256": file_sha256(checkpoint)}
        sweep = sweep_job(tmp_path / "sweep", "0_run", record | {"metrics": {"test/recon_mse": 0.1}}).parent
        status = script_main("compare_runs")([str(sweep), "--recon", "--checkpoints", str(checkpoint.parent)])
    out, err = capsys.readouterr()
    assert status == 2 and "Traceback" not in err, (out, err)
    assert f"files not found in {tmp_path / 'data'}" in (out + err).strip().splitlines()[-1]
    assert not elsewhere.exists() and no_downloads == []


# metrics.json is believed only about its own run's weights


@pytest.fixture
def finished(tmp_path):
    """(the run folder of a finished run, its checkpoint's contents, a metrics.json writer)."""
    config = torch.load(OLD_CHECKPOINT, weights_only=True)["swwae_config"]
    config = config | {"paths": dict(config["paths"], output_dir=str(tmp_path / "out"))}
    folder = RunFolder(
        tmp_path / "checkpoints", "r", identity_of(*(config.get(k) for k in IDENTITY_KEYS)), tmp_path / "out"
    )
    folder.path.mkdir(parents=True)
    shutil.copy(OLD_CHECKPOINT, folder.path / "best.ckpt")
    (tmp_path / "out").mkdir()

    def metrics_naming(path, sha=None):
        record = {"status": "ok", "checkpoint": str(path), "metrics": {"val/recon_mse": 1e-9, "test/recon_mse": 1e-9}}
        record["checkpoint_sha256"] = sha or (file_sha256(path) if os.path.isfile(path) else "0" * 64)
        (tmp_path / "out" / "metrics.json").write_text(json.dumps(record))

    return folder, {"swwae_config": config}, metrics_naming


WANTED = ["val/recon_mse", "test/recon_mse"]


def test_a_metrics_json_about_the_runs_own_checkpoint_is_believed(finished):
    folder, checkpoint, metrics_naming = finished
    metrics_naming(folder.path / "best.ckpt")
    summary, source = folder.own_metrics(checkpoint, WANTED)
    assert summary["metrics"]["test/recon_mse"] == 1e-9 and source.endswith("metrics.json")


@pytest.mark.parametrize("named", ["/etc/hostname", "another run", "/dev/zero", "a fifo", "wrong sha"])
def test_a_metrics_json_about_other_bytes_is_not_believed(finished, tmp_path, named):
    folder, checkpoint, metrics_naming = finished
    if named == "another run":
        other = tmp_path / "checkpoints" / "other" / "best.ckpt"
        other.parent.mkdir()
        shutil.copy(OLD_CHECKPOINT, other)
        metrics_naming(other)
    elif named == "a fifo":
        os.mkfifo(folder.path / "fifo.ckpt")  # inside the run's folder, but hashing it would hang
        metrics_naming(folder.path / "fifo.ckpt", sha="a" * 64)
    elif named == "/dev/zero":
        (folder.path / "zero.ckpt").symlink_to("/dev/zero")
        metrics_naming(folder.path / "zero.ckpt", sha="a" * 64)
    elif named == "wrong sha":
        metrics_naming(folder.path / "best.ckpt", sha="b" * 64)
    else:
        metrics_naming(named)
    assert folder.own_metrics(checkpoint, WANTED) == (None, "")


@pytest.mark.parametrize("record", ["[1, 2]", '{"status": "ok", "metrics": {"val/recon_mse": "low"}}', "{"])
def test_an_unreadable_metrics_json_is_not_believed(finished, record):
    folder, checkpoint, _ = finished
    (folder.output_dir / "metrics.json").write_text(record)
    assert folder.own_metrics(checkpoint, WANTED) == (None, "")


@pytest.mark.parametrize("named", ["its own", "another run", "/dev/zero", "wrong sha"])
def test_a_sweep_job_takes_the_checkpoint_its_metrics_json_names_only_from_its_own_run(tmp_path, named):
    own = tmp_path / "checkpoints" / "r" / "best.ckpt"
    other = tmp_path / "checkpoints" / "other" / "best.ckpt"
    for path in (own, other):
        path.parent.mkdir(parents=True)
        shutil.copy(OLD_CHECKPOINT, path)
    path = {"its own": own, "another run": other, "/dev/zero": Path("/dev/zero"), "wrong sha": own}[named]
    sha = "b" * 64 if named == "wrong sha" else file_sha256(own)
    record = {"run_name": "r", "status": "ok", "checkpoint": str(path), "checkpoint_sha256": sha}
    job = sweep_job(tmp_path / "sweep", "0_r", record | {"metrics": {"test/recon_mse": 0.1}})
    (job / ".hydra" / "config.yaml").write_text(f"paths:\n  checkpoint_dir: {tmp_path / 'checkpoints'}\n")
    (job,) = collect(job.parent).jobs
    if named == "its own":
        assert job.checkpoint([tmp_path / "checkpoints"]) == own
    else:
        with pytest.raises(Unreadable):
            job.checkpoint([tmp_path / "checkpoints", Path("/dev")])


@pytest.mark.parametrize("entry", ["compare --recon", "feature-study"])
@pytest.mark.parametrize("measured", [None, "a" * 64], ids=["no sha", "a sha"])
def test_a_checkpoint_a_record_names_outside_the_users_folders_is_never_opened(
    tmp_path, entry, measured, monkeypatch, capsys, caplog
):
    """A crafted record (``checkpoint_dir: /``, run ``etc``, checkpoint ``/etc/passwd``) is
    refused in one line before the file is opened, to be hashed or loaded."""
    record = {"run_name": "etc", "status": "ok", "checkpoint": "/etc/passwd", "checkpoint_sha256": measured}
    job = sweep_job(tmp_path / "sweep", "0_crafted", record | {"metrics": {"test/recon_mse": 0.1}})
    (job / ".hydra" / "config.yaml").write_text("paths:\n  checkpoint_dir: /\n")
    opened = []
    for module, name in ((os, "open"), (builtins, "open"), (io, "open")):
        real = getattr(module, name)
        monkeypatch.setattr(
            module, name, lambda path, *a, real=real, **k: opened.append(str(path)) or real(path, *a, **k)
        )
    monkeypatch.chdir(tmp_path)
    if entry == "feature-study":
        from swwae.commands.feature_study import main
    else:
        from swwae.commands.compare import main
    status = main([str(job.parent), *(["--recon"] if entry == "compare --recon" else [])])
    out, err = capsys.readouterr()
    refused = f"{job}: unreadable: checkpoint /etc/passwd lies outside {job.parent} and checkpoints"
    assert status == 2 and "Traceback" not in err and "/etc/passwd" not in opened
    assert refused in err + caplog.text
    if entry == "compare --recon":  # and where else to look
        assert err.rstrip().endswith(
            f"in {job.parent} or checkpoints: --checkpoints DIR adds the folder its runs saved them in "
            "(their paths.checkpoint_dir)"
        )


def test_a_dangling_or_device_checkpoint_in_a_run_folder_is_passed_over(tmp_path):
    folder = run_folder(tmp_path, ODD["state_dict an int"], None)
    (folder.path / "gone.ckpt").symlink_to(tmp_path / "nowhere")
    (folder.path / "zero.ckpt").symlink_to("/dev/zero")
    decision = folder.decide("auto", 20, None)
    assert (decision.action, decision.checkpoint.name) == ("continue", "best.ckpt")


def test_the_owner_file_of_a_locked_run_is_read_with_bounds(tmp_path):
    from swwae.training.runs.folder import describe_owner, owner_path

    folder = tmp_path / "r"
    owner_path(folder).symlink_to("/dev/zero")
    assert describe_owner(folder) == "another process"


@pytest.mark.slow
def test_a_finished_run_asked_again_does_not_believe_a_metrics_json_about_other_bytes(tmp_path):
    from helpers.cli import train_cli, train_here

    first = train_here(tmp_path, "model.widths=[4]")
    assert first.returncode == 0, first.stderr[-2000:]
    metrics = tmp_path / "outputs" / "run" / "metrics.json"
    own = json.loads(metrics.read_text())["checkpoint"]
    for named in ("/etc/hostname", "/dev/zero"):
        record = json.loads(metrics.read_text())
        sha = file_sha256(named) if named == "/etc/hostname" else "a" * 64
        record |= {"checkpoint": named, "checkpoint_sha256": sha}
        record["metrics"] = {k: 1e-9 for k in record["metrics"]}
        metrics.write_text(json.dumps(record))
        if named == "/dev/zero":  # a process of its own and a time limit: no hang holding the lock
            again = train_cli(tmp_path, "model.widths=[4]", timeout=120)
        else:
            again = train_here(tmp_path, "model.widths=[4]")
        assert again.returncode == 0 and "had already finished" in again.stdout, again.stderr[-2000:]
        assert "evaluated again from best.ckpt" in again.stdout and "0.0000" not in again.stdout
        rewritten = json.loads(metrics.read_text())
        assert rewritten["checkpoint"] == own and rewritten["checkpoint_sha256"] == file_sha256(own)
