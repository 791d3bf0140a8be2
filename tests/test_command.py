"""The ``swwae`` command (swwae/commands/): every subcommand reachable with its own help, the
overview without torch, one error line for a wrong subcommand, ``train`` as ``python train.py``,
help and hints in the words of the install (a clone's or a wheel's), and the table of
``swwae runs``."""

from __future__ import annotations

import importlib
import importlib.util
import json
import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml

import swwae
from helpers.cli import command_here, run_cli
from helpers.config import QUICK, ROOT
from swwae import install
from swwae.checkpoint_file import POSITION_KEY, with_checksum
from swwae.commands import runs
from swwae.commands.dispatch import SUBCOMMANDS, main
from swwae.training.checkpoints import atomic_torch_save
from swwae.training.runs.folder import RunFolder

HEAVY = ("torch", "lightning", "pytorch_lightning", "hydra", "omegaconf")


def imported_at_startup(*args) -> set[str]:
    """The top-level packages ``python -X importtime <args>`` imports (its stderr lists each)."""
    result = run_cli("-X", "importtime", *args, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    names = [line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")]
    return {name.split(".")[0] for name in names[1:]}  # names[0] is the header


# the command


def test_the_overview_lists_every_subcommand_with_its_summary(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: swwae <subcommand>")
    listed = dict(line.split(None, 1) for line in out.splitlines() if line.startswith("  "))
    assert listed == {name: sub.summary for name, sub in SUBCOMMANDS.items()}


def test_an_unknown_subcommand_is_one_error_line(capsys):
    assert main(["evalute", "x.ckpt"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("error: unknown subcommand 'evalute': did you mean 'evaluate'? choose one of ")
    assert all(name in line for name in SUBCOMMANDS) and line.endswith(" (swwae --help)")
    assert main(["zzz"]) == 2 and "did you mean" not in capsys.readouterr().err


def help_body(out: str) -> str:
    """A ``--help`` without its usage lines (they name the program, and wrap by its length)."""
    return out.split("\n\n", 1)[1]


@pytest.mark.parametrize("name", [name for name in SUBCOMMANDS if name != "train"])  # train's help: Hydra's, below
def test_every_subcommand_answers_help_with_its_own_usage(capsys, name):
    module = importlib.import_module(f"swwae.commands.{SUBCOMMANDS[name].module}")
    assert main([name, "--help"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: swwae {name} ") and module.__doc__.splitlines()[0] in help_body(out)


@pytest.mark.parametrize("name, default", [("evaluate", 8), ("compare", 6)])
def test_num_images_says_its_default_and_its_bound_in_the_help(capsys, name, default):
    assert main([name, "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the help
    assert "--num-images NUM_IMAGES images in" in out and f"at least 1 (default {default})" in out


def test_the_entry_point_and_python_m_swwae_are_the_dispatcher(monkeypatch, capsys):
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    module, _, attribute = scripts["swwae"].partition(":")
    assert getattr(importlib.import_module(module), attribute) is main
    monkeypatch.setattr(sys, "argv", ["swwae", "--help"])
    with pytest.raises(SystemExit) as done:
        runpy.run_module("swwae", run_name="__main__")
    assert done.value.code == 0 and capsys.readouterr().out.startswith("usage: swwae <subcommand>")


def test_every_script_of_a_clone_is_a_subcommand(monkeypatch, capsys):
    """``python scripts/<job>.py --help`` is the help of ``swwae <subcommand> --help`` (the
    benchmarks, ``bench_*.py``, and the docs' table writer are scripts of their own; ``train.py``
    is run as itself throughout)."""
    helps = []
    for name in SUBCOMMANDS:
        if name != "train":
            main([name, "--help"])
            helps.append(help_body(capsys.readouterr().out))
    scripts = sorted((ROOT / "scripts").glob("*.py"))
    shims = [p for p in scripts if not p.name.startswith("bench_") and "swwae.commands" in p.read_text()]
    assert shims
    # the clone's files that swwae.install names, each the shim of its subcommand's module
    assert {str(p.relative_to(ROOT)) for p in shims} | {"train.py"} == set(install.CLONE_FILES.values())
    for name, file in install.CLONE_FILES.items():
        assert f"from swwae.commands.{SUBCOMMANDS[name].module} import main" in (ROOT / file).read_text(), file
    for shim in shims:
        monkeypatch.setattr(sys, "argv", [str(shim), "--help"])
        with pytest.raises(SystemExit) as done:
            runpy.run_path(str(shim), run_name="__main__")
        assert done.value.code == 0, shim.name
        assert help_body(capsys.readouterr().out) in helps, shim.name


# a wheel's words: no clone files, the wheel's extras


@pytest.fixture
def from_a_wheel(monkeypatch):
    """As if installed from a wheel: no clone around the package (swwae.install)."""
    monkeypatch.setattr(install, "clone_root", lambda: None)


def test_from_a_wheel_every_help_shows_the_swwae_command(from_a_wheel, capsys):
    assert main(["--help"]) == 0
    helps = {"": capsys.readouterr().out}
    for name in SUBCOMMANDS:
        if name != "train":  # train's help: Hydra's
            assert main([name, "--help"]) == 0
            helps[name] = capsys.readouterr().out
            assert f"\n    swwae {name} " in helps[name], name  # its examples, as a wheel's user types them
    for name, text in helps.items():
        assert "python scripts/" not in text and "python train.py" not in text, name
        assert "pip install -e" not in text, name
    assert 'pip install "swwae[onnx]"' in helps["export"]


def test_tab_completion_of_swwae_completes_the_subcommand_then_trains_settings(monkeypatch, capsys):
    """Hydra's completion script, printed by ``swwae train -sc install=bash`` (its --hydra-help says
    so), registers ``swwae`` and asks ``swwae -sc query=bash`` for the words of ``COMP_LINE``."""
    assert main(["train", "-sc", "install=bash"]) == 0
    assert capsys.readouterr().out.rstrip().endswith("-F hydra_bash_completion swwae")
    assert main(["train", "--hydra-help"]) == 0
    assert 'eval "$(swwae train -sc install=bash)"' in capsys.readouterr().out
    for line, candidates in [
        ("swwae ", set(SUBCOMMANDS)),
        ("swwae tr", {"train"}),
        ("swwae train model=swwae_", {"model=swwae_hard", "model=swwae_soft"}),
        ("swwae train seed=1 trainer.max_ep", {"trainer.max_epochs="}),
        ("swwae evaluate ", set()),  # its arguments are files: the shell's own completion
    ]:
        monkeypatch.setenv("COMP_LINE", line)
        assert main(["-sc", "query=bash"]) == 0
        assert set(capsys.readouterr().out.split()) == candidates, line
    from swwae.commands import train

    for ask in (main, lambda args: main(["train", *args]), train.main):  # Hydra's: a traceback, exit status 0
        assert ask(["-sc"]) == 2 and ask(["-sc", "install=tcsh"]) == 2
        errors = capsys.readouterr().err.splitlines()
        assert len(errors) == 2 and all(e.startswith("error: -sc") and "install=<bash|zsh|fish>" in e for e in errors)


def test_a_wrong_flag_of_swwae_train_names_swwae_train(capsys):
    assert main(["train", "--bogus"]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == "swwae train: error: unrecognized arguments: --bogus"


@pytest.mark.parametrize("where", ["the clone", "another folder", "a wheel's install"])
def test_hints_name_what_works_where_the_user_is(monkeypatch, capsys, tmp_path, where):
    """A missing extra, and the other commands an error line or Ctrl-C points to: in a clone's own
    folder its files and ``pip install -e .``; in another folder (where ``.`` may be another
    project, which pip would install instead) the ``swwae`` command and the clone's path; from a
    wheel the ``swwae`` command and ``pip install "swwae[...]"``."""
    from swwae.training.run import continue_command

    clone = tmp_path / "clone"
    clone.mkdir()
    (tmp_path / "work").mkdir()
    monkeypatch.setattr(install, "clone_root", lambda: None if where == "a wheel's install" else clone)
    monkeypatch.setattr(sys, "argv", ["-c"])  # a library call (not pytest's own file, with -n 0)
    monkeypatch.setitem(sys.modules, "mlflow", None)  # as if not installed
    monkeypatch.chdir(clone if where == "the clone" else tmp_path / "work")
    assert main(["train", "debug=quick", "logger=mlflow"]) == 2
    assert main(["train", "debug=quick", "trainer.max_epochs=0"]) == 2
    extra, train, evaluate = {
        "the clone": ('pip install -e ".[mlflow]"', "python train.py", "python scripts/evaluate.py"),
        "another folder": (f'pip install -e "{clone}[mlflow]"', "swwae train", "swwae evaluate"),
        "a wheel's install": ('pip install "swwae[mlflow]"', "swwae train", "swwae evaluate"),
    }[where]
    missing, untrained = capsys.readouterr().err.splitlines()
    assert missing == f"error: logger=mlflow needs mlflow: {extra}"
    assert untrained.endswith(f"use {evaluate} <checkpoint>)")
    assert continue_command(("debug=quick", "resume=auto")) == f"{train} debug=quick resume=true"
    if where == "another folder":  # a path the shell would read inside double quotes: single quotes
        monkeypatch.setattr(install, "clone_root", lambda: tmp_path / "a $b")
        assert install.install_extra("onnx") == f"pip install -e '{tmp_path}/a $b[onnx]'"


@pytest.mark.parametrize(
    "program, main_module, typed",
    [
        ("train.py", None, "python train.py"),
        ("../my clone/train.py", None, "python '../my clone/train.py'"),
        ("/venv/lib/swwae/__main__.py", "swwae.__main__", "python -m swwae train"),
        ("/venv/lib/swwae/commands/train.py", "swwae.commands.train", "python -m swwae.commands.train"),
        ("{bin}/swwae", None, "swwae train"),  # the installed script, first on the PATH
        ("{other}/swwae", None, "{other}/swwae train"),  # another one: its path
    ],
)
def test_a_job_says_how_to_run_it_again_as_it_was_started(monkeypatch, tmp_path, program, main_module, typed):
    """Ctrl-C's "continue with:" repeats the command as the user started it, wherever the package
    lies (a clone's ``python train.py`` hint was wrong for ``swwae train`` typed in another folder)."""
    for folder in ("bin", "other"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "swwae").write_text("#!/bin/sh\n")
        (tmp_path / folder / "swwae").chmod(0o755)
    places = {"bin": tmp_path / "bin", "other": tmp_path / "other"}
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    monkeypatch.setattr(sys, "argv", [program.format(**places), "debug=quick"])
    spec = None if main_module is None else importlib.util.find_spec(main_module)
    monkeypatch.setattr(sys.modules["__main__"], "__spec__", spec)
    assert install.this_command("train") == typed.format(**places)


@pytest.mark.parametrize("module", [None, "swwae.__main__"])  # python train.py or swwae train; python -m swwae
def test_a_sweep_job_has_lightning_start_its_ddp_processes_as_one_run_of_the_command(monkeypatch, tmp_path, module):
    """Lightning starts a DDP run's other processes as ``__main__`` was started, with ``sys.argv``.
    A sweep job's is its own overrides as one run: an Optuna search sets ``hydra.mode: MULTIRUN``
    in its config, and each trial's second process ran a whole search of its own. In a process of
    a launcher's own (``hydra/launcher=submitit_local``: ``python -m submitit.core._submit``) it is
    the command that read the sweep, not that module, which refused the job's overrides."""
    import contextlib

    from omegaconf import OmegaConf

    import __main__
    from swwae.commands import train
    from swwae.training.composing import Launch

    seen = {}

    def run(cfg, this):
        seen["argv"], seen["main"] = list(sys.argv), getattr(__main__.__spec__, "name", None)
        return 0.5

    overrides = ("hparams_search=swwae_optuna", "trainer=ddp", "model.lr=0.01")
    monkeypatch.setattr(train, "run", run)
    monkeypatch.setattr(
        train, "launch", lambda: Launch(overrides=overrides, output_dir=str(tmp_path), sweep=(tmp_path, 1))
    )
    monkeypatch.setattr(train, "run_dir", lambda folder: contextlib.nullcontext())
    job = train.run_as_started(
        ["train.py"], ["hparams_search=swwae_optuna", "trainer=ddp", "-m", "--config-dir", "c"], module
    )
    worker = importlib.util.find_spec("json.tool")  # a launcher's own module, run as __main__
    monkeypatch.setattr(__main__, "__spec__", worker)
    assert job(OmegaConf.create({"run_name": "optuna_trial1_seed0"})) == 0.5
    assert seen["argv"] == [
        "train.py",
        *overrides,
        "run_name='optuna_trial1_seed0'",
        "hydra.mode=RUN",
        "--config-dir",
        "c",
    ]
    assert seen["main"] == module
    assert __main__.__spec__ is worker  # the launcher's process as it was


def test_an_install_without_the_shipped_configs_is_one_error_line(monkeypatch, capsys):
    """An editable install made before 0.3 does not map configs/ to swwae.configs."""
    from swwae.training import composing

    monkeypatch.setattr(composing, "CONFIG_MODULE", "swwae.configs_of_another_install")
    assert main(["train", "debug=quick"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: the shipped configs (swwae.configs_of_another_install) are not installed with this swwae: install "
        "it again (pip install -e . in a clone, pip install swwae otherwise)"
    ]


def test_a_script_subcommand_is_the_script(tmp_path, capsys):
    """``swwae export`` reports bad input as ``python scripts/export.py`` does: one line, exit 2."""
    assert main(["export", str(tmp_path / "missing.ckpt"), "--to", str(tmp_path / "m")]) == 2
    assert capsys.readouterr().err.splitlines() == [f"error: checkpoint {tmp_path / 'missing.ckpt'} does not exist"]
    assert sys.argv[0] != "swwae export"  # put back


@pytest.mark.slow
def test_python_m_swwae_help_imports_no_torch():
    imported = imported_at_startup("-m", "swwae", "--help")
    assert "swwae" in imported
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


@pytest.mark.slow
def test_import_swwae_is_cheap_and_the_pooling_names_still_there():
    assert not imported_at_startup("-c", "import swwae") & set(HEAVY)
    code = (
        "import sys, swwae\n"
        "from swwae import MODES, Unpool, WhatWherePool, make_pool\n"
        "print(swwae.pooling.WhatWherePool is WhatWherePool, swwae.__version__, len(sys.meta_path))"
    )
    result = run_cli("-c", code, cwd=ROOT)
    assert result.returncode == 0, result.stderr[-2000:]
    baseline = run_cli("-c", "import sys; print(len(sys.meta_path))", cwd=ROOT)
    assert result.stdout.split() == ["True", swwae.__version__, baseline.stdout.strip()]  # no import hook


def test_the_pooling_names_are_lazy_attributes():
    assert swwae.WhatWherePool is importlib.import_module("swwae.pooling").WhatWherePool
    assert {"MODES", "Unpool", "WhatWherePool", "make_pool", "load", "save_pretrained", "pooling"} <= set(dir(swwae))
    assert not {"Path", "annotations", "POOLING_NAMES"} & set(dir(swwae))  # the module's own imports: not its API
    with pytest.raises(AttributeError, match="no attribute 'WhatWhere'"):
        swwae.WhatWhere  # noqa: B018


@pytest.mark.slow
def test_swwae_train_is_python_train_py_from_any_folder(tmp_path):
    """Launched outside the checkout: the shipped configs are found in the package, ``model.arch``
    is quoted for Hydra as train.py does, and the run lands where the overrides say."""
    result = command_here(  # swwae train, over the package's configs
        *QUICK,
        f"hydra.run.dir={tmp_path / 'run'}",
        f"paths.checkpoint_dir={tmp_path / 'checkpoints'}",
        f"paths.log_dir={tmp_path / 'logs'}",
        "model.arch=(8)3c-2p-10fc",
        cwd=tmp_path,
        configs=None,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert metrics["status"] == "ok" and metrics["arch"] == "(8)3c-2p-10fc"
    hydra = yaml.safe_load((tmp_path / "run" / ".hydra" / "hydra.yaml").read_text())["hydra"]
    assert hydra["job"]["name"] == "train"  # as for python train.py

    rows, _ = runs.list_runs(tmp_path / "checkpoints")
    assert [(r.status, r.epochs, r.max_epochs, r.monitor) for r in rows] == [("finished", 1, 1, "val/recon_mse")]
    assert rows[0].best == pytest.approx(metrics["metrics"]["val/recon_mse"])


@pytest.mark.slow
def test_swwae_train_multirun_and_its_errors(tmp_path):
    sweep = command_here(
        "-m",
        *QUICK,
        "seed=3",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        f"paths.checkpoint_dir={tmp_path / 'checkpoints'}",
        f"paths.log_dir={tmp_path / 'logs'}",
        cwd=tmp_path,
        configs=None,
    )
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    assert (tmp_path / "sweep" / "summary.md").is_file()

    bad = command_here(*QUICK, "model.arch=(8)3x-2p", f"hydra.run.dir={tmp_path / 'bad'}", cwd=tmp_path, configs=None)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines()[0].startswith('error: model.arch="(8)3x-2p": `(8)3x` is not a layer')

    help_ = run_cli("-m", "swwae", "train", "--help", cwd=tmp_path)
    assert help_.returncode == 0 and help_.stdout.startswith("swwae train (python train.py in a clone): train a")


@pytest.mark.slow
@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU it runs the whole device check")
def test_device_check_without_a_gpu_says_so_in_one_line(tmp_path):
    result = run_cli("-m", "swwae", "device-check", cwd=tmp_path, env={"PATH": "/usr/bin:/bin"})  # no venv python
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.startswith("device check: no CUDA device here")


# swwae runs


def write_run(
    root: Path,
    name: str,
    *,
    epoch: int,
    max_epochs: int = 10,
    best: float | None = 0.25,
    preempted: dict | None = None,
    files=("last.ckpt", "best.ckpt"),
) -> Path:
    """A run folder as train.py leaves it: checksummed checkpoints holding what the safe
    reader requires and what the table reads (epoch, the run config, the callback state)."""
    folder = root / name
    state = {"monitor": "val/recon_mse", "best_model_score": None if best is None else torch.tensor(best)}
    checkpoint = {
        "epoch": epoch,
        "global_step": 3 * (epoch + 1),
        "state_dict": {"net.w": torch.zeros(2)},
        "hyper_parameters": {},
        "callbacks": {"ModelCheckpoint{'monitor': 'val/recon_mse'}": state},
        "swwae_config": {"run_name": name, "optimized_metric": "val/recon_mse", "trainer": {"max_epochs": max_epochs}},
    }
    if preempted:
        checkpoint[POSITION_KEY] = preempted
    for file in files:
        atomic_torch_save(with_checksum(dict(checkpoint)), folder / file)
    return folder


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # killed mid-write, without the atomic save


def change_its_contents(path: Path) -> None:
    """Other weights under the checksum written with the old ones: what a flipped bit does."""
    checkpoint = torch.load(path, weights_only=True)
    checkpoint["state_dict"]["net.w"] += 1
    torch.save(checkpoint, path)


@pytest.fixture
def checkpoints(tmp_path):
    root = tmp_path / "checkpoints"
    write_run(root, "done", epoch=9)
    write_run(root, "halfway", epoch=4, best=0.5)
    write_run(root, "stopped", epoch=2, preempted={"epoch": 2, "batches_done": 7})
    write_run(root, "quick/nested", epoch=0, max_epochs=1)
    broken = write_run(root, "broken", epoch=1)
    truncate(broken / "last.ckpt")
    change_its_contents(broken / "best.ckpt")
    truncate(write_run(root, "fallback", epoch=5) / "last.ckpt")
    write_run(root, "done.previous-20260101-120000", epoch=3)
    (root / "empty").mkdir()
    (root / ".done.lock").touch()
    (root / ".done.owner.json").write_text("{}")
    return root


def test_runs_table_reads_each_run_through_the_safe_reader(checkpoints):
    rows, skipped = runs.list_runs(checkpoints)
    by_name = {r.name: r for r in rows}
    assert sorted(by_name) == ["broken", "done", "empty", "fallback", "halfway", "quick/nested", "stopped"]
    assert skipped == 1
    assert (by_name["done"].status, by_name["done"].epochs, by_name["done"].max_epochs) == ("finished", 10, 10)
    assert (by_name["halfway"].status, by_name["halfway"].epochs, by_name["halfway"].best) == ("unfinished", 5, 0.5)
    assert by_name["stopped"].status == "pre-empted" and by_name["stopped"].epochs == 2
    assert by_name["quick/nested"].status == "finished"
    assert by_name["broken"].status == "unreadable"
    assert by_name["broken"].note.startswith("last.ckpt is unreadable: a zip archive cut short or damaged (truncated")
    assert "; best.ckpt is corrupt: its contents do not match the checksum" in by_name["broken"].note
    assert (by_name["fallback"].status, by_name["fallback"].checkpoint) == ("unfinished", "best.ckpt")
    assert by_name["fallback"].note.startswith("last.ckpt is unreadable")
    assert by_name["empty"].status == "no checkpoint"


def test_checkpoints_linked_to_a_disk_that_is_gone_do_not_read_back_they_are_not_no_files(tmp_path):
    """last.ckpt and best.ckpt as links into a disk not mounted: the listing says so (not 'no
    checkpoint'), and resume=true refuses as for any checkpoint that does not read back, instead
    of starting a fresh run over the links."""
    folder = tmp_path / "run"
    folder.mkdir()
    for name in ("last.ckpt", "best.ckpt"):
        (folder / name).symlink_to(tmp_path / "unmounted" / name)
    row = runs.read_run("run", folder)
    assert row.status == "unreadable"
    assert row.note.startswith(f"last.ckpt is a link to {tmp_path / 'unmounted' / 'last.ckpt'}, which does not exist")
    decision = RunFolder(tmp_path, "run", {}).decide("true", 1, -1)
    assert decision.action == "refuse" and "holds no checkpoint that reads back" in decision.reason


def test_runs_prints_a_table_and_json(checkpoints, capsys):
    assert main(["runs", "--dir", str(checkpoints)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["run", "status", "epochs", "best", "folder"]
    assert lines[1].split()[:5] == ["broken", "unreadable", "-", "-", str(checkpoints / "broken")]
    done = next(line for line in lines if line.startswith("done "))
    assert done.split()[:5] == ["done", "finished", "10/10", "val/recon_mse", "0.25"]
    assert lines[-1] == "(1 old run moved aside by a fresh start not shown: --previous)"

    assert main(["runs", "--dir", str(checkpoints), "--json", "--previous"]) == 0
    listed = json.loads(capsys.readouterr().out)
    aside = [r for r in listed["runs"] if r["previous"]]
    assert [r["name"] for r in aside] == ["done.previous-20260101-120000"] and listed["moved_aside_left_out"] == 0
    assert next(r for r in listed["runs"] if r["name"] == "stopped")["status"] == "pre-empted"


def test_runs_of_a_missing_folder_is_one_error_line(tmp_path, capsys):
    assert main(["runs", "--dir", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith(f"error: {tmp_path / 'nowhere'} is not a folder of runs")
    assert main(["runs", "checkpoints/quick"]) == 2  # as ls takes a folder
    assert capsys.readouterr().err.strip().endswith("(a folder of runs is given as --dir checkpoints/quick)")


def test_runs_of_a_sweep_or_job_folder_is_one_line_not_a_run_a_job(tmp_path, capsys):
    """A sweep folder holds its jobs' records, not their checkpoints: each job was listed as a run
    that saved nothing ("no checkpoint")."""
    sweep = tmp_path / "multirun" / "2026-12-01_10-00-00"
    (sweep / "0_run_seed0" / ".hydra").mkdir(parents=True)
    (sweep / "0_run_seed0" / "metrics.json").write_text("{}")
    (sweep / "multirun.yaml").write_text("hydra: {}\n")
    assert main(["runs", "--dir", str(sweep)]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {sweep} is a sweep folder, its jobs' records without their checkpoints (--dir ")
    assert line.endswith(f"; {install.command('compare')} {sweep} summarises the sweep")
    assert main(["runs", "--dir", str(sweep / "0_run_seed0")]) == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {sweep / '0_run_seed0'} is a job's output folder, its config and records without")


def test_runs_knows_the_names_the_job_writes(tmp_path):
    """The moved-aside folder names are the job's own, a second one in the same second too."""
    from swwae.training.runs.folder import RunFolder
    from swwae.training.runs.identity import aside_name

    folder = write_run(tmp_path, "run", epoch=0)
    RunFolder(tmp_path, "run", {}).move_aside()
    write_run(tmp_path, "run", epoch=0)
    RunFolder(tmp_path, "run", {}).move_aside()
    asides = sorted(tmp_path.iterdir())
    assert len(asides) == 2 and all(runs.is_moved_aside(aside) for aside in asides)
    assert not runs.is_moved_aside(folder)
    assert runs.is_moved_aside(Path("x") / aside_name("run", "20260101-120000", 3))
    assert not runs.is_moved_aside("run") and not runs.is_moved_aside("run.previous-2026")


def test_a_reader_that_stops_reading_ends_the_command_without_a_traceback(monkeypatch, capfd):
    """``swwae runs | head``: head closes the pipe, and the command's next write (or Python's flush
    at exit) was a BrokenPipeError traceback. Now the exit status of a tool the pipe stopped."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the command writes
    stdout = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", stdout)
    try:
        assert main(["--help"]) == 141
        print("what is still to come goes nowhere", flush=True)  # Python's exit flushes without an error
    finally:
        stdout.close()
    assert capfd.readouterr().err == ""
