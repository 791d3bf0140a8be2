"""Deconvnet projections (swwae/projection.py, scripts/project.py): shapes, the switches
confine a hard model's projection, where-free models still project, clear errors, and the
picture goes where the user said (the current folder by default), never beside the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from helpers.cli import run_cli
from helpers.config import ROOT, SAMPLE_DATA
from helpers.disks import read_only_folder
from swwae.commands.project import main as project_main
from swwae.commands.project import parse_command_line
from swwae.errors import ConfigError
from swwae.images import projection_grid
from swwae.model import SWWAE
from swwae.pooling import MODES
from swwae.projection import deconvolve, encode_to, project, strongest
from swwae.training.module import SWWAEModule

DATA = SAMPLE_DATA


def net(mode="hard", widths=(4, 8)):
    torch.manual_seed(0)
    return SWWAE(widths=widths, pool_mode=mode, num_classes=None).eval()


def images(n=6):
    return torch.rand(n, 1, 28, 28, generator=torch.Generator().manual_seed(1))


def dilate(mask: torch.Tensor, kernel: int = 3) -> torch.Tensor:
    return F.max_pool2d(mask.float(), kernel, stride=1, padding=kernel // 2) > 0


@pytest.mark.parametrize("mode", MODES)
def test_projections_have_the_image_shape(mode):
    model, x = net(mode), images()
    for stage in (1, 2):
        picks = strongest(model, x, stage, top=4)
        assert len(picks) == 4 and len(set(picks.channel.tolist())) == 4  # distinct channels
        assert (picks.value[:-1] >= picks.value[1:]).all()  # strongest first
        proj = project(model, x[picks.image], picks, stage)
        assert proj.shape == (4, 1, 28, 28) and torch.isfinite(proj).all()
        grid = projection_grid(x[picks.image], proj, nrow=3)
        assert grid.shape[0] == 3 and 0 <= grid.min() and grid.max() <= 1


@pytest.mark.parametrize("mode", MODES)
def test_projections_carry_no_bias_so_they_scale_with_the_kept_activation(mode):
    # strided's way up is a transposed conv with a bias: every projection had its pattern added
    model, x = net(mode), images(2)
    whats, wheres, sizes = encode_to(model, x, 2)
    v = torch.zeros_like(whats[-1])
    v[:, 0, 1, 1] = 1.0
    assert deconvolve(model, torch.zeros_like(v), wheres, sizes, 2).abs().max() == 0
    once, twice = deconvolve(model, v, wheres, sizes, 2), deconvolve(model, 2 * v, wheres, sizes, 2)
    torch.testing.assert_close(twice, 2 * once)  # unpool, ReLU and bias-free filters are positively homogeneous


def test_picks_are_the_strongest_activations():
    model, x = net("hard"), images()
    picks = strongest(model, x, 2, top=3, distinct_channels=False)
    top = encode_to(model, x, 2)[0][-1]
    assert picks.value[0] == top.max()
    assert top[picks.image, picks.channel, picks.row, picks.col].tolist() == picks.value.tolist()


@pytest.mark.parametrize("distinct", [True, False])
def test_the_picks_live_on_the_networks_device(distinct):
    """``swwae.load(path, device="cuda")`` then ``strongest`` (docs/analysis.md): the picks index
    each other, and a CPU tensor indexed by a CUDA one is an error on a GPU ("indices should be
    either on cpu or on the same device"). The meta device stands in for the GPU here: every pick
    is on the images' device, and the projections come back there."""
    model, x = net("hard").to("meta"), torch.empty(6, 1, 28, 28, device="meta")
    picks = strongest(model, x, 2, top=3, distinct_channels=distinct)
    assert {t.device.type for t in vars(picks).values()} == {"meta"}
    assert project(model, x[picks.image], picks, 2).device.type == "meta"


def test_a_hard_projection_lives_only_where_the_switches_allow():
    model, x = net("hard"), images(1)
    whats, wheres, sizes = encode_to(model, x, 1)
    # one activation of stage 1: its pixel is the switch of its window; the transposed 3x3 conv
    # can only spread it to that pixel's 3x3 neighbourhood
    c, r, s = 2, 5, 9
    v = torch.zeros_like(whats[0])
    v[0, c, r, s] = 1.0
    winner = wheres[0].indices[0, c, r, s]
    allowed = torch.zeros(1, 1, *sizes[0], dtype=torch.bool)
    allowed.view(-1)[winner] = True
    single = deconvolve(model, v, wheres, sizes, 1)
    assert single.abs().sum() > 0
    assert (single[~dilate(allowed)] == 0).all()

    # from stage 2 down: only on (the neighbourhoods of) pixels that won a stage-1 window
    picks = strongest(model, x, 2, top=4)
    proj = project(model, x[picks.image], picks, 2)
    switches = (wheres[0].mask > 0).any(1, keepdim=True)
    assert proj.abs().sum() > 0
    assert (proj[~dilate(switches).expand_as(proj)] == 0).all()

    # upsampling without a where spreads the same single activation over its whole window
    free = net("upsample")
    whats, wheres, sizes = encode_to(free, x, 1)
    v = torch.zeros_like(whats[0])
    v[0, c, r, s] = 1.0
    assert (single != 0).sum() <= 9 < (deconvolve(free, v, wheres, sizes, 1) != 0).sum()


def test_projections_run_in_eval_mode_and_restore_the_mode():
    torch.manual_seed(0)
    model, x = SWWAE(widths=(4, 8), batch_norm=True, num_classes=None).eval(), images()
    expected = strongest(model, x, 2, top=3)
    model.train()
    picks = strongest(model, x, 2, top=3)  # batch norm on its running statistics, as in eval mode
    assert model.training and picks.value.tolist() == expected.value.tolist()
    project(model, x[picks.image], picks, 2)
    assert model.training and all(m.training for m in model.modules())
    with pytest.raises(ConfigError):  # raised inside: the mode still comes back
        strongest(model, x, 3)
    assert model.training


def test_a_bad_stage_is_a_config_error():
    with pytest.raises(ConfigError, match=r"stage=3 is out of range: this model has 2 stages \(1\.\.2\)"):
        strongest(net(), images(), 3)
    with pytest.raises(ConfigError, match="out of range"):
        encode_to(net(), images(), 0)


# the script


def fake_checkpoint(path, mode="hard"):
    torch.manual_seed(0)
    module = SWWAEModule(widths=[4, 8], pool_mode=mode)
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "swwae_config": {"data": DATA, "model": {"pool_mode": mode}},
        },
        path,
    )
    return path


@pytest.mark.slow
def test_the_script_writes_a_grid_in_the_current_folder(tmp_path):
    (tmp_path / "run").mkdir()
    ckpt = fake_checkpoint(tmp_path / "run" / "best.ckpt")
    result = run_cli(ROOT / "scripts" / "project.py", ckpt, "stage=2", "top=6", "images=100", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert (tmp_path / "proj.png").stat().st_size > 1000 and result.stdout.startswith("proj.png: 6 strongest")
    assert [p.name for p in (tmp_path / "run").iterdir()] == ["best.ckpt"]


def test_a_checkpoint_in_a_read_only_folder_projects_and_an_out_there_is_one_line(tmp_path, capsys, monkeypatch):
    with read_only_folder(tmp_path / "theirs", fill=lambda folder: fake_checkpoint(folder / "best.ckpt")) as theirs:
        monkeypatch.chdir(tmp_path)
        assert project_main([str(theirs / "best.ckpt"), "stage=1", "top=2", "images=20"]) == 0
        assert (tmp_path / "proj.png").is_file() and capsys.readouterr().out.startswith("proj.png: ")
        assert project_main([str(theirs / "best.ckpt"), f"out={theirs}"]) == 2  # a folder: proj.png in it
        [line] = capsys.readouterr().err.splitlines()
        assert line.startswith(f"error: cannot write the picture proj.png in {theirs}: ")
        assert line.endswith("; set out=... to write elsewhere")
        assert [p.name for p in theirs.iterdir()] == ["best.ckpt"]


def test_where_free_models_project_and_say_so(tmp_path, capsys):
    ckpt = fake_checkpoint(tmp_path / "up.ckpt", "upsample")
    assert project_main([str(ckpt), "stage=1", "top=4", "images=50", f"out={tmp_path / 'p.png'}"]) == 0
    assert "pool_mode=upsample keeps no where" in capsys.readouterr().err
    assert (tmp_path / "p.png").is_file()


@pytest.mark.parametrize(
    "args, message",
    [
        (["stage=3"], "error: stage=3 is out of range: this model has 2 stages (1..2)"),
        (["stage=two"], "error: stage='two' is not a valid int"),
        (["layer=1"], "error: unknown option 'layer=1'"),
        (["--stage", "two"], "error: stage='two' is not a valid int"),
        (["--stage", "3"], "error: stage=3 is out of range: this model has 2 stages (1..2)"),
        (["--layer", "1"], "error: unrecognized arguments: --layer 1"),
        (["stage=1", "--stage", "2"], "error: stage is given twice"),
        (["split=train"], "error: split='train': choose val or test"),
        (["out=p.jpg"], "error: out=p.jpg: name a .png file (or a folder for proj.png)"),
        # pictures of gigabytes, whose process was killed for its memory
        (
            ["zoom=1000"],
            "error: the picture would be 224,000 x 56,000 pixels (8 picks at zoom 1000), more than Pillow",
        ),
        (
            ["top=100000", "images=10000", "distinct=false"],
            "error: the picture would be 672 x 1,680,000 pixels (80000 ",
        ),
    ],
)
def test_bad_options_are_one_error_line(tmp_path, capsys, args, message):
    ckpt = fake_checkpoint(tmp_path / "best.ckpt")
    assert project_main([str(ckpt), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)


def test_options_take_key_value_and_dashed_forms():
    checkpoint, options = parse_command_line(["m.ckpt", "stage=2", "--top", "8", "split=test", "--out=p.png", "zoom=2"])
    assert checkpoint == Path("m.ckpt")
    assert options == {"stage": 2, "top": 8, "split": "test", "out": "p.png", "zoom": 2}
    assert parse_command_line(["m.ckpt", "stage=1", "stage=2"])[1] == {"stage": 2}  # key=value: the last one counts


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "error: the following arguments are required: checkpoint"),
        (["stage=2"], "error: the first argument is the checkpoint"),
    ],
)
def test_a_missing_checkpoint_is_one_error_line(capsys, argv, message):
    assert project_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(message)


def test_a_bad_checkpoint_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "broken.ckpt"
    bad.write_bytes(b"not a checkpoint")
    assert project_main([str(bad), "stage=1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: checkpoint {bad} ")
