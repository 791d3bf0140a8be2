"""ONNX export (extra: onnx): every pooling mode's inference graph runs in onnxruntime with
PyTorch's outputs to 1e-5, at any batch size; and ``scripts/export.py`` writes the ONNX file
and the model folder from a checkpoint, each read back, with one error line for bad input
(weights that are not finite, a place it cannot write among them) before anything is written."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra.core.global_hydra import GlobalHydra

import swwae
from helpers.cli import last_error_line, run_cli
from helpers.config import ROOT, compose_config
from helpers.disks import read_only_folder
from swwae.checkpoint_file import CHECKPOINT_CHECKSUM_KEY, content_checksum
from swwae.export import check_onnx, example_images, export_onnx, onnx_signature, output_names
from swwae.model import SWWAE
from swwae.training.run import train

pytestmark = pytest.mark.extra("onnx")

TOLERANCE = 1e-5
CASES = {  # two stages each: the second pools an odd-sized map in most
    "hard-apart-odd-size": dict(pool_mode="hard", image_shape=(1, 29, 29)),
    "hard-overlapping-padded": dict(pool_mode="hard", pool_size=3, pool_stride=2, pool_padding=1),
    "soft": dict(pool_mode="soft"),
    "soft-overlapping-odd-size": dict(pool_mode="soft", beta=10.0, pool_size=3, pool_stride=2, image_shape=(1, 29, 29)),
    "upsample-odd-size": dict(pool_mode="upsample", image_shape=(3, 31, 29)),
    "avg-overlapping": dict(pool_mode="avg", pool_size=3, pool_stride=2),
    "strided-batch-norm": dict(pool_mode="strided", batch_norm=True),
    "wavelet-db2-no-head": dict(pool_mode="wavelet", wavelet="db2", pool_size=4, widths=[4], num_classes=None),
}

# helpers


def trained_like(settings: dict) -> SWWAE:
    """A small network with random weights and batch-norm statistics, in eval mode."""
    torch.manual_seed(0)
    net = SWWAE(**{"widths": [4, 8], **settings})
    with torch.no_grad():
        for t in net.buffers():
            if t.is_floating_point():
                t.uniform_(0.5, 1.5)
    return net.eval()


@pytest.fixture(scope="module")
def best_ckpt(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("run")
    train(compose_config(tmp, ["model.widths=[4,8]"]))
    GlobalHydra.instance().clear()
    return tmp / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "best.ckpt"


# every mode in onnxruntime


@pytest.mark.slow
@pytest.mark.parametrize("name", CASES)
def test_the_onnx_graph_gives_pytorchs_outputs_at_any_batch_size(name, tmp_path):
    import onnxruntime

    net = trained_like(CASES[name])
    path = export_onnx(net, tmp_path / "m.onnx")
    shape = ", ".join(map(str, net.image_shape))
    assert onnx_signature(path).startswith(
        "opset "
    ) and f"image (batch, {shape}) -> recon (batch, {shape})" in onnx_signature(path)
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [o.name for o in session.get_outputs()] == output_names(net)
    assert ("logits" in output_names(net)) == (net.classifier is not None)
    generator = torch.Generator().manual_seed(2)
    ties = torch.zeros(2, *net.image_shape)  # every window ties: the same winner must be picked
    for images in (
        torch.rand(1, *net.image_shape, generator=generator),
        torch.rand(5, *net.image_shape, generator=generator),
        ties,
    ):
        differences = check_onnx(path, net, images)
        assert set(differences) == set(output_names(net))
        assert max(differences.values()) <= TOLERANCE, differences


def test_a_network_is_traced_and_checked_on_its_own_device():
    """``export_onnx`` and ``check_onnx`` of a network on a GPU (a notebook's, after training):
    the example images are made where the network is (the meta device stands in for the GPU),
    with the values they have on the CPU."""
    net = SWWAE(widths=[4], num_classes=10)
    assert example_images(SWWAE(widths=[4], num_classes=10).to("meta"), 2).device.type == "meta"
    assert torch.equal(example_images(net, 2), example_images(net, 2)) and example_images(net, 2).device.type == "cpu"


# scripts/export.py


@pytest.mark.slow
def test_export_script_writes_a_folder_and_an_onnx_file_that_both_load_back(best_ckpt, tmp_path, capsys):
    import onnxruntime

    from swwae.commands.export import main

    assert main([str(best_ckpt), "--onnx", str(tmp_path / "m.onnx"), "--to", str(tmp_path / "m")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"read {best_ckpt}: (4)3c-2p-(8)3c-2p-10fc, pool_mode=hard, 1x28x28 images, 10 classes")
    assert lines[1].startswith(f"wrote {tmp_path / 'm'}/ (config.json, model.safetensors") and "bit for bit" in lines[1]
    assert lines[2].startswith(f"wrote {tmp_path / 'm.onnx'}") and "onnxruntime matches PyTorch to" in lines[2]
    net, folder_net = swwae.load(best_ckpt), swwae.load(tmp_path / "m")
    x = torch.rand(4, 1, 28, 28)
    assert torch.equal(net(x).recon, folder_net(x).recon)
    session = onnxruntime.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    recon, logits, top = session.run(None, {"image": x.numpy()})
    torch.testing.assert_close(torch.from_numpy(logits), net(x).logits, atol=TOLERANCE, rtol=0)
    assert recon.shape == (4, 1, 28, 28) and top.shape == (4, 8, 7, 7)

    # from the folder, again: the same graph
    assert main([str(tmp_path / "m"), "--onnx", str(tmp_path / "again.onnx")]) == 0
    assert "onnxruntime matches PyTorch" in capsys.readouterr().out


def test_export_script_bad_input_is_one_error_line(best_ckpt, tmp_path, capsys):
    from swwae.commands.export import main

    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    cases = [
        ([str(tmp_path / "missing.ckpt"), "--to", str(tmp_path / "m")], "checkpoint"),
        ([str(best_ckpt)], "nothing to do: name --to FOLDER, --onnx FILE, or both"),
        ([str(best_ckpt), "--onnx", str(tmp_path)], "is a folder: name the .onnx file to write"),
        ([str(best_ckpt), "--onnx", str(best_ckpt)], "is no .onnx name: the ONNX file replaces what is there"),
        ([str(best_ckpt), "--onnx", str(notes)], "is no .onnx name"),
        ([str(best_ckpt), "--onnx", str(notes / "m.onnx")], f"{notes} is a file, not a folder"),
        ([str(best_ckpt), "--to", str(best_ckpt)], "is a file: a model folder needs a folder of its own"),
        ([str(best_ckpt), "--bogus"], "unrecognized arguments: --bogus"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error: ") and message in err[0], err
    assert swwae.load(best_ckpt) is not None and notes.read_text() == "mine"  # nothing already saved is touched


def test_export_of_weights_that_are_not_finite_is_one_line_and_writes_nothing(best_ckpt, tmp_path, capsys):
    from swwae.commands.export import main

    checkpoint = torch.load(best_ckpt, weights_only=True)
    checkpoint["state_dict"]["net.encoders.0.0.weight"][0, 0, 0, 0] = float("nan")
    checkpoint[CHECKPOINT_CHECKSUM_KEY] = content_checksum(checkpoint)  # a whole file: training let a NaN through
    torch.save(checkpoint, tmp_path / "nan.ckpt")
    assert main([str(tmp_path / "nan.ckpt"), "--to", str(tmp_path / "m"), "--onnx", str(tmp_path / "m.onnx")]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: the weights of {tmp_path / 'nan.ckpt'} are not finite: 1 of 10 tensors hold NaN or infinite "
        "values (e.g. encoders.0.0.weight): nothing was written"
    ]
    assert [p.name for p in tmp_path.iterdir()] == ["nan.ckpt"]


def test_export_to_a_read_only_place_is_one_line_naming_it(best_ckpt, tmp_path, capsys):
    from swwae.commands.export import main

    with read_only_folder(tmp_path / "ro") as ro:
        for option, target, what in [("--to", ro / "m", "model folder"), ("--onnx", ro / "m.onnx", "ONNX file")]:
            assert main([str(best_ckpt), option, str(target)]) == 2
            [line] = capsys.readouterr().err.splitlines()
            assert line.startswith(f"error: cannot write the {what} {target}: ") and line.endswith(f"(in {ro})")
        assert not any(ro.iterdir())


@pytest.mark.slow
def test_export_script_runs_as_a_user_runs_it(best_ckpt, tmp_path):
    result = run_cli(ROOT / "scripts" / "export.py", best_ckpt, "--to", tmp_path / "m", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bit for bit" in result.stdout
    result = run_cli(ROOT / "scripts" / "export.py", tmp_path / "nowhere", "--to", tmp_path / "m", cwd=tmp_path)
    assert result.returncode == 2
    assert last_error_line(result).endswith("does not exist: it is neither a model folder nor a checkpoint")


@pytest.mark.slow
def test_the_docs_export_command_runs_as_printed(best_ckpt, tmp_path, monkeypatch):
    """The export command of the README and docs pages, as printed, in a folder laid out as after a
    default run (conftest.py runs the pages' Python blocks; this is their shell command)."""
    import shutil

    from helpers.docs import shell_commands
    from swwae.commands.export import main

    checkpoint = tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "best.ckpt"
    checkpoint.parent.mkdir(parents=True)
    shutil.copy(best_ckpt, checkpoint)
    monkeypatch.chdir(tmp_path)
    commands = set(shell_commands("python scripts/export.py checkpoints/"))
    assert commands, "no export command in the README or docs"
    for command in commands:
        assert main(command.split()[2:]) == 0, command
    assert (tmp_path / "m.onnx").is_file() and sorted(p.name for p in (tmp_path / "m").iterdir()) == [
        "README.md",
        "config.json",
        "model.safetensors",
    ]
    assert swwae.load("m/").config["run_name"] == "swwae_hard_mnist_sample_seed0"
