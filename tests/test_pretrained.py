"""Model folders (docs/architecture.md 4.8): ``swwae.save_pretrained`` writes config.json +
model.safetensors (+ the model card README.md: tests/test_card.py), whole or not at all (a
failure, a kill, a full or read-only disk leave the old folder as it was), ``swwae.load`` reads
them back into the same network (bit-identical outputs) without Lightning, Hydra,
huggingface_hub or any pickle, and a bad folder (weights of the wrong kind among them) is one
error line; with the ``hub`` extra, huggingface_hub's mixin saves, loads and pushes the same
files (the Hub itself cannot be reached here: its API is stood in for)."""

from __future__ import annotations

import errno
import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

import swwae
import swwae.pretrained
from helpers.config import ROOT, compose_config
from helpers.disks import read_only_folder, small_disk
from helpers.hub import fake_hub
from swwae.card import CARD_FILE
from swwae.errors import CheckpointError, DiskError, NonFiniteError, Unreadable
from swwae.model import SWWAE
from swwae.pretrained import CONFIG_FILE, WEIGHTS_FILE, weights_checksum
from swwae.training.run import train

RUN = "swwae_hard_mnist_sample_seed0"

# helpers


@pytest.fixture(scope="module")
def best_ckpt(tmp_path_factory) -> Path:
    """best.ckpt of a quick two-stage run."""
    tmp = tmp_path_factory.mktemp("run")
    train(compose_config(tmp, ["model.widths=[4,8]"]))
    GlobalHydra.instance().clear()
    return tmp / "checkpoints" / RUN / "best.ckpt"


def outputs(net: SWWAE, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        out = net(x)
    return [out.recon, *out.whats, *out.decoded] + ([out.logits] if out.logits is not None else [])


def scrambled(net: SWWAE) -> SWWAE:
    """``net`` with random weights and batch-norm statistics (not its initial ones), in eval mode;
    not its non-persistent buffers (the wavelet's filters), which are constants, never saved."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for t in net.state_dict().values():
            if t.is_floating_point():
                t.copy_(torch.rand(t.shape, generator=generator) * 0.5 + 0.1)
    return net.eval()


def saved(tmp_path: Path, **settings) -> Path:
    folder = tmp_path / "m"
    swwae.save_pretrained(scrambled(SWWAE(widths=[4, 8], **settings)), folder)
    return folder


# round trips


@pytest.mark.parametrize(
    "settings",
    [
        dict(pool_mode="hard"),
        dict(pool_mode="soft", beta=10.0, pool_size=3, pool_stride=2),
        dict(pool_mode="strided", batch_norm=True, dropout=0.2),  # learned pools, running statistics
        dict(pool_mode="wavelet", wavelet="db2", num_classes=None),
        dict(
            arch="(4)5c-(6)3c-2p-(8)3c-2p-10fc", image_shape=(3, 29, 31), nonlinearity="elu", pixel_mean=[0.2, 0.3, 0.4]
        ),
    ],
    ids=["hard", "soft", "strided-bn", "wavelet-no-head", "arch-rgb-odd"],
)
def test_a_network_round_trips_through_its_folder_bit_for_bit(tmp_path, settings):
    net = scrambled(SWWAE(**{"widths": [4, 8], **settings}))
    swwae.save_pretrained(net, tmp_path / "m", config={"run_name": "r", "model": {"lr": 0.002}})
    again = swwae.load(tmp_path / "m")
    assert type(again) is SWWAE and not again.training and again.arch == net.arch
    assert again.settings == net.settings and again.config == {"run_name": "r", "model": {"lr": 0.002}}
    x = torch.rand(3, *net.image_shape)
    for a, b in zip(outputs(net, x), outputs(again, x), strict=True):
        assert torch.equal(a, b)
    assert sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        CARD_FILE,
        CONFIG_FILE,
        WEIGHTS_FILE,
    ]  # + the model card


@pytest.mark.slow
def test_a_trained_checkpoint_becomes_a_folder_with_its_settings_run_config_and_version(best_ckpt, tmp_path):
    net = swwae.load(best_ckpt)
    folder = net.save_pretrained(tmp_path / "m")  # the method; run config: the checkpoint's
    config = json.loads((folder / CONFIG_FILE).read_text())
    assert config["image_shape"] == [1, 28, 28] and config["num_classes"] == 10 and config["widths"] == [4, 8]
    assert config["pixel_mean"] == pytest.approx([0.13], abs=0.01)  # the data's mean pixel
    assert config["swwae"] == {
        "format": "swwae-folder/1",
        "version": swwae.__version__,
        "network": net.arch,
        "swwae_sha256": weights_checksum(net.state_dict()),  # the weights it was written with
    }
    assert config["run_config"] == net.config and config["run_config"]["run_name"] == RUN
    again = swwae.load(folder / CONFIG_FILE)  # a file of the folder names the folder
    x = torch.rand(5, 1, 28, 28)
    for a, b in zip(outputs(net, x), outputs(again, x), strict=True):
        assert torch.equal(a, b)
    assert again.config == net.config


@pytest.mark.slow
def test_a_folder_loads_without_lightning_hydra_huggingface_hub_or_unpickling(tmp_path):
    folder = saved(tmp_path, pool_mode="soft")
    code = f"""
import pickle, sys
sys.modules["huggingface_hub"] = None  # not installed, as far as this process can tell
def refuse(*args, **kwargs):
    raise AssertionError("a model folder was unpickled")
pickle.load = pickle.loads = refuse
import torch, swwae
net = swwae.load({str(folder)!r})
print(type(net).__name__, net(torch.rand(2, 1, 28, 28)).recon.shape[0])
heavy = {{"lightning", "pytorch_lightning", "hydra", "omegaconf", "huggingface_hub"}}
print(sorted({{m.split(".")[0] for m, module in sys.modules.items() if module is not None}} & heavy))
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split("\n")[:2] == ["SWWAE 2", "[]"]


def test_saving_again_replaces_the_files_and_leaves_other_files_alone(tmp_path):
    folder = saved(tmp_path)
    (folder / "notes.txt").write_text("mine")
    net = scrambled(SWWAE(widths=[4, 8], pool_mode="avg"))
    swwae.save_pretrained(net, folder)
    assert swwae.load(folder).pool_mode == "avg" and (folder / "notes.txt").read_text() == "mine"
    assert not [p for p in folder.iterdir() if p.name.endswith(".tmp")]


# whole or not at all


def dead_pid() -> int:
    """The id of a process that has ended (a writer killed mid-way)."""
    child = subprocess.Popen([sys.executable, "-c", ""])
    child.wait()
    return child.pid


def fails_half_way(monkeypatch, error: BaseException) -> None:
    """The weights' write stops half-way through with ``error``; the other files are written."""
    write = swwae.pretrained.write_file

    def half(path: Path, data: bytes) -> None:
        if path.name != WEIGHTS_FILE:
            return write(path, data)
        with open(path, "xb") as f:
            f.write(data[: len(data) // 2])
        raise error

    monkeypatch.setattr(swwae.pretrained, "write_file", half)


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, "No space left on device"), KeyboardInterrupt()])
def test_a_write_that_fails_half_way_leaves_the_old_folder_as_it_was(tmp_path, monkeypatch, error):
    folder = saved(tmp_path)
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    fails_half_way(monkeypatch, error)
    expected = DiskError if isinstance(error, OSError) else KeyboardInterrupt
    with pytest.raises(expected) as raised:
        swwae.save_pretrained(scrambled(SWWAE(widths=[4, 8], pool_mode="avg")), folder)
    if expected is DiskError:
        assert str(raised.value) == (
            f"cannot write the model folder {folder}: No space left on device (in {tmp_path}); {folder} is as it was"
        )
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert swwae.load(folder).pool_mode == "hard"
    assert [p.name for p in tmp_path.iterdir()] == ["m"]  # no copy beside it either


def test_a_new_folder_that_fails_half_way_is_not_there_at_all(tmp_path, monkeypatch):
    fails_half_way(monkeypatch, OSError(errno.ENOSPC, "No space left on device"))
    with pytest.raises(DiskError, match="; nothing was written$"):
        swwae.save_pretrained(scrambled(SWWAE(widths=[4, 8])), tmp_path / "m")
    assert not any(tmp_path.iterdir())


@pytest.mark.slow
def test_a_writer_killed_mid_way_leaves_the_old_folder_and_the_next_write_tidies_up(tmp_path):
    """SIGKILL (no handler, no cleanup: the OOM killer, a lost node) while the weights are half
    written: the folder is the old one, whole; the hidden copy the killed writer left beside it
    is gone after the next write, and other files stay."""
    folder = saved(tmp_path)
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    code = f"""
import os, signal
import swwae, swwae.pretrained as pretrained
from swwae.model import SWWAE
write = pretrained.write_file
def killed(path, data):
    if path.name == {WEIGHTS_FILE!r}:
        with open(path, "xb") as f:
            f.write(data[: len(data) // 2])
            f.flush()
        os.kill(os.getpid(), signal.SIGKILL)
    write(path, data)
pretrained.write_file = killed
swwae.save_pretrained(SWWAE(widths=[4, 8], pool_mode="avg"), {str(folder)!r})
"""
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == -signal.SIGKILL, result.stderr[-2000:]
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before and swwae.load(folder).pool_mode == "hard"
    [left] = [p.name for p in tmp_path.iterdir() if p.name != "m"]
    assert left.startswith(".m.swwae-new-")  # hidden, beside the folder: never read by swwae.load

    swwae.save_pretrained(scrambled(SWWAE(widths=[4, 8], pool_mode="avg")), folder)
    assert [p.name for p in tmp_path.iterdir()] == ["m"] and swwae.load(folder).pool_mode == "avg"
    assert (folder / "notes.txt").read_text() == "mine"


def test_a_kill_between_the_two_renames_loses_nothing(tmp_path):
    """The one instant the folder is missing (the old copy renamed aside, the new one not yet in
    place): the next write puts the old copy back before it writes, keeping what it held."""
    folder = saved(tmp_path)
    (folder / "notes.txt").write_text("mine")
    pid = dead_pid()
    folder.rename(tmp_path / f".m.swwae-old-{pid}-0123abcd")
    (tmp_path / f".m.swwae-new-{pid}-4567abcd").mkdir()
    swwae.save_pretrained(scrambled(SWWAE(widths=[4, 8], pool_mode="avg")), folder)
    assert [p.name for p in tmp_path.iterdir()] == ["m"] and (folder / "notes.txt").read_text() == "mine"
    assert swwae.load(folder).pool_mode == "avg"


def test_a_config_written_with_other_weights_is_one_line_not_a_network(tmp_path):
    """What the writer of earlier releases could leave when killed (new weights, the old
    config.json): its config.json names the weights it was written with, so the pair is refused."""
    folder, other = saved(tmp_path), tmp_path / "other"
    swwae.save_pretrained(SWWAE(widths=[4, 8]), other)  # the same shapes, other weights
    (folder / WEIGHTS_FILE).write_bytes((other / WEIGHTS_FILE).read_bytes())
    with pytest.raises(
        CheckpointError, match=f"^model folder {folder} is mixed: its config.json was written with other"
    ):
        swwae.load(folder)
    config = json.loads((folder / CONFIG_FILE).read_text())
    del config["swwae"]["swwae_sha256"]  # as a folder of an earlier release, or of another tool
    (folder / CONFIG_FILE).write_text(json.dumps(config))
    assert swwae.load(folder).settings == swwae.load(other).settings


def test_a_read_only_destination_is_one_line_naming_the_folder(tmp_path):
    net = scrambled(SWWAE(widths=[4, 8], pool_mode="avg"))
    with read_only_folder(
        tmp_path / "ro", fill=lambda ro: swwae.save_pretrained(scrambled(SWWAE(widths=[4, 8])), ro / "m")
    ) as ro:
        for folder in (ro / "m", ro / "new", ro / "a" / "b"):
            with pytest.raises(DiskError) as raised:
                swwae.save_pretrained(net, folder)
            assert str(raised.value).startswith(f"cannot write the model folder {folder}: ") and f"(in {ro})" in str(
                raised.value
            )
        assert swwae.load(ro / "m").pool_mode == "hard"  # as it was


def test_a_full_disk_is_one_line_and_leaves_nothing(tmp_path):
    with small_disk(tmp_path / "small", size="16k") as small:
        with pytest.raises(DiskError, match=f"^cannot write the model folder {small / 'm'}: No space left on device"):
            swwae.save_pretrained(scrambled(SWWAE(widths=[16, 32])), small / "m")  # 26 kB of weights
        assert not any(small.iterdir())


def test_a_run_folder_or_the_folder_of_runs_is_never_swapped_for_a_model_folder(tmp_path):
    """A model folder is replaced whole (a new one renamed in): over a run's folder, a run saving
    there meanwhile would lose that save. Refused before anything is written, at any depth: the
    quick checks' runs are in checkpoints/quick/<run>/."""
    run = tmp_path / "checkpoints" / "quick" / "run"
    run.mkdir(parents=True)
    (run / "last.ckpt").write_bytes(b"weights")
    for target in (run, run.parent, run.parent.parent):
        with pytest.raises(
            CheckpointError, match=f"^the model folder {target} holds checkpoints \\({run}/last.ckpt\\)"
        ):
            swwae.save_pretrained(SWWAE(widths=[4]), target)
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["checkpoints", "last.ckpt", "quick", "run"]


def test_the_current_folder_or_weights_that_are_not_finite_are_refused_before_writing(tmp_path, monkeypatch):
    net = scrambled(SWWAE(widths=[4, 8]))
    monkeypatch.chdir(tmp_path)
    for here in (".", str(tmp_path), ".."):
        with pytest.raises(
            CheckpointError, match="is the current folder or holds it: a model folder is replaced whole"
        ):
            swwae.save_pretrained(net, here)
    with torch.no_grad():
        net.encoders[0][0].weight[0, 0, 0, 0] = float("nan")
    with pytest.raises(
        NonFiniteError, match=r"^the weights of the network .* are not finite: 1 of \d+ tensors .* nothing"
    ):
        swwae.save_pretrained(net, tmp_path / "m")
    assert not any(tmp_path.iterdir())


# weights of the wrong kind


def written_elsewhere(folder: Path, state: dict) -> None:
    """``folder`` with ``state`` as its weights, as another tool (a converter to float16, say)
    writes them: no checksums, neither in the weights' header nor in config.json."""
    from safetensors.torch import save_file

    save_file(state, folder / WEIGHTS_FILE, metadata={"format": "pt"})
    config = json.loads((folder / CONFIG_FILE).read_text())
    del config["swwae"]["swwae_sha256"]
    (folder / CONFIG_FILE).write_text(json.dumps(config))


def writes_complex() -> bool:
    from safetensors.torch import save

    try:
        return bool(save({"z": torch.zeros(1, dtype=torch.complex64)}))
    except KeyError:  # safetensors 0.6.2 and older know no complex dtype (0.8.0 does)
        return False


COMPLEX = pytest.param(
    torch.complex64,
    marks=pytest.mark.skipif(not writes_complex(), reason="the installed safetensors writes no complex tensors"),
)


@pytest.mark.parametrize("dtype", [torch.bool, torch.int32, torch.uint8, COMPLEX])
def test_weights_of_another_kind_than_the_networks_are_unreadable(tmp_path, dtype):
    folder = saved(tmp_path)
    written_elsewhere(folder, {name: t.to(dtype) for name, t in swwae.load(folder).state_dict().items()})
    with pytest.raises(Unreadable) as raised:
        swwae.load(folder)
    name = str(dtype).removeprefix("torch.")
    assert str(raised.value).startswith(
        f"model folder {folder} is unreadable: "
    ) and f"is {name}, not floating point" in str(raised.value)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_weights_in_another_float_width_load_as_the_values_they_hold(tmp_path, dtype):
    """float16 and bfloat16 widen to float32 exactly (a halved file, common on the Hub, is the
    network it holds); float64 is what a network moved to float64 saves."""
    folder = saved(tmp_path, batch_norm=True)  # and an integer buffer, kept as it is
    state = {n: t.to(dtype) if t.is_floating_point() else t for n, t in swwae.load(folder).state_dict().items()}
    written_elsewhere(folder, state)
    net = swwae.load(folder)
    for name, t in net.state_dict().items():
        assert t.dtype == (torch.float32 if t.is_floating_point() else torch.int64)
        assert torch.equal(t, state[name].to(t.dtype)), name


# bad folders: one line each


def test_bad_folders_are_one_line_each(tmp_path):
    with pytest.raises(CheckpointError, match="does not exist"):
        swwae.load(tmp_path / "missing" / CONFIG_FILE)
    with pytest.raises(CheckpointError, match=f"^{tmp_path / 'm'} does not exist: it is neither a model folder nor a"):
        swwae.load(f"{tmp_path / 'm'}/")  # a folder's name: not called a checkpoint
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="holds no config.json: it is not a model folder"):
        swwae.load(tmp_path / "empty")

    run = tmp_path / "checkpoints" / "run"  # a run's folder, given for its checkpoint: which one it meant
    run.mkdir(parents=True)
    (run / "last.ckpt").write_bytes(b"")
    with pytest.raises(
        CheckpointError, match=f"it is not a model folder \\(the run's last checkpoint: {run}/last.ckpt\\)$"
    ):
        swwae.load(run)

    folder = saved(tmp_path)
    config = json.loads((folder / CONFIG_FILE).read_text())
    (folder / CONFIG_FILE).write_text("{ not json")
    with pytest.raises(CheckpointError, match="config.json is unreadable"):
        swwae.load(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({**config, "hidden_size": 768}))
    with pytest.raises(CheckpointError, match="does not take .hidden_size.: it was not written by swwae"):
        swwae.load(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({**config, "swwae": {**config["swwae"], "format": "swwae-folder/9"}}))
    with pytest.raises(CheckpointError, match="format 'swwae-folder/9'"):
        swwae.load(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({**config, "widths": [4, 16]}))
    with pytest.raises(CheckpointError, match="does not fit its own settings .* nothing was built"):
        swwae.load(folder)
    (folder / CONFIG_FILE).write_text(json.dumps({**config, "widths": [10**6, 10**6]}))  # 36 TB, if it were built
    with pytest.raises(CheckpointError, match="does not fit its own settings .* nothing was built"):
        swwae.load(folder)
    (folder / CONFIG_FILE).write_text(json.dumps(config))  # whole again

    with pytest.raises(CheckpointError, match="is a file"):
        swwae.save_pretrained(swwae.load(folder), folder / CONFIG_FILE)
    with pytest.raises(TypeError, match="pass its .net"):
        swwae.save_pretrained(type("Module", (), {"net": swwae.load(folder)})(), tmp_path / "x")


def test_a_flipped_bit_in_the_weights_reads_as_corrupt_and_a_cut_file_as_unreadable(tmp_path):
    folder = saved(tmp_path)
    data = bytearray((folder / WEIGHTS_FILE).read_bytes())
    data[-3] ^= 0x10  # inside the last tensor: safetensors itself notices nothing
    (folder / WEIGHTS_FILE).write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="is corrupt: its tensors do not match the checksum"):
        swwae.load(folder)
    (folder / WEIGHTS_FILE).write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(Unreadable, match="unreadable .truncated or corrupt"):
        swwae.load(folder)


def test_a_folder_with_pickled_weights_only_is_refused_not_unpickled(tmp_path):
    folder = saved(tmp_path)
    (folder / WEIGHTS_FILE).unlink()
    torch.save(SWWAE(widths=[4, 8]).state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(
        CheckpointError, match="no model.safetensors; pytorch_model.bin is a pickle, which is never loaded"
    ):
        swwae.load(folder)


# the Hugging Face Hub (extra: hub)


@pytest.fixture
def hub():
    import swwae.hub

    return swwae.hub


@pytest.mark.extra("hub")
def test_the_hub_mixin_saves_and_loads_the_same_folder(hub, tmp_path):
    net = hub.SWWAE.of(swwae.load(saved(tmp_path, pool_mode="soft")))
    net.save_pretrained(tmp_path / "hub")  # the mixin's: + the model card
    assert sorted(p.name for p in (tmp_path / "hub").iterdir()) == ["README.md", CONFIG_FILE, WEIGHTS_FILE]
    assert "library_name: swwae" in (tmp_path / "hub" / "README.md").read_text()
    x = torch.rand(2, 1, 28, 28)
    for again in (hub.SWWAE.from_pretrained(tmp_path / "hub"), swwae.load(tmp_path / "hub")):
        assert not again.training and again.settings == net.settings
        for a, b in zip(outputs(net, x), outputs(again, x), strict=True):
            assert torch.equal(a, b)


@pytest.mark.extra("hub")
def test_push_to_hub_uploads_a_folder_that_swwae_load_reads(hub, tmp_path, monkeypatch):
    uploaded = tmp_path / "uploaded"
    fake_hub(monkeypatch, uploaded)
    net = hub.SWWAE.of(swwae.load(saved(tmp_path)))
    assert net.push_to_hub("user/swwae-test").endswith("user/swwae-test/commit/0")
    x = torch.rand(2, 1, 28, 28)
    assert torch.equal(swwae.load(uploaded)(x).recon, net(x).recon)


@pytest.mark.extra("hub")
def test_from_pretrained_of_a_repo_downloads_config_and_safetensors_only(hub, tmp_path, monkeypatch):
    import huggingface_hub.hub_mixin

    folder = saved(tmp_path)
    asked = {}

    def snapshot(repo_id, allow_patterns, **kwargs):
        asked.update(repo_id=repo_id, allow_patterns=allow_patterns)
        return str(folder)

    monkeypatch.setattr(
        huggingface_hub.hub_mixin, "hf_hub_download", lambda repo_id, filename, **kw: str(folder / filename)
    )
    monkeypatch.setattr(hub, "snapshot_download", snapshot)
    net = hub.SWWAE.from_pretrained("user/swwae-test")
    assert asked == {"repo_id": "user/swwae-test", "allow_patterns": [CONFIG_FILE, WEIGHTS_FILE]}
    assert net.settings == swwae.load(folder).settings

    (folder / WEIGHTS_FILE).unlink()
    torch.save(net.state_dict(), folder / "pytorch_model.bin")  # the mixin's own loader would unpickle this
    with pytest.raises(CheckpointError, match="pytorch_model.bin is a pickle, which is never loaded"):
        hub.SWWAE.from_pretrained(folder)


@pytest.mark.extra("hub")
def test_from_pretrained_reads_a_folder_through_swwaes_reader_alone(hub, tmp_path, monkeypatch):
    """A damaged config.json is swwae.load's one line naming the file (the mixin's json.load
    made it a bare JSONDecodeError, a list an AttributeError), and a path that names no folder
    is one line too, never a repository id sent to the Hub (or refused as one)."""
    import huggingface_hub.hub_mixin

    def offline(*args, **kwargs):
        raise AssertionError("the Hub was asked")

    monkeypatch.setattr(huggingface_hub.hub_mixin, "hf_hub_download", offline)
    monkeypatch.setattr(hub, "snapshot_download", offline)
    folder = saved(tmp_path)
    (folder / CONFIG_FILE).write_text("{ not json")
    with pytest.raises(Unreadable, match=f"^model folder file {folder / CONFIG_FILE} is unreadable: not JSON"):
        hub.SWWAE.from_pretrained(folder)
    (folder / CONFIG_FILE).write_text("[1, 2]")
    with pytest.raises(Unreadable, match="config.json holds no settings"):
        hub.SWWAE.from_pretrained(str(folder))
    for missing in ("./no-such-swwae-model", f"{tmp_path}/missing", "no-such-swwae-model/", "a/b/c"):
        with pytest.raises(CheckpointError, match="^model folder .* does not exist$"):
            hub.SWWAE.from_pretrained(missing)
