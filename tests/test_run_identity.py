"""A run name is a name, and a run's folder is its own (docs/reliability.md): two different runs
never share a folder, debug=quick never touches a real run, the jobs of a sweep that share a
run name do not take over each other's folder, metrics.json names the bytes it measured, and
the lock is taken by the process that trains, whatever rank variables its environment holds."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

from helpers.cli import command_here, last_error_line, train_here
from helpers.config import ONE_BATCH, QUICK
from swwae.errors import ConfigError, Unreadable
from swwae.training.runs.folder import RunFolder, lock_path, own_run
from swwae.training.runs.identity import check_run_name

RUN = "swwae_hard_mnist_sample_seed0"
SMALL = ["model.widths=[4]"]


def sha(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def hashes(folder) -> dict[str, str]:
    return {p.name: sha(p) for p in sorted(folder.iterdir())}


@pytest.mark.parametrize(
    "name",
    [
        "../x",
        "../../../x",
        "/abs/x",
        "a/b",
        "",
        ".hidden",
        "..",
        ".",
        "a b",
        "a\\b",
        "ｒｕｎ",
        "run\n",
        "quick",
        "x" * 201,
        "x.previous-20260101-120000",  # the form of a run moved aside: swwae runs lists it apart
        "x.previous-20260101-120000-2",
    ],
)
def test_a_run_name_that_is_not_one_path_component_is_one_line(name):
    with pytest.raises(ConfigError, match="^run_name") as err:
        check_run_name(name)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("name", ["swwae_hard_mnist_sample_seed0", "hard-vs-soft_beta10.0", "a", "0", "_x", "-x"])
def test_a_run_name_of_letters_digits_and_dot_dash_underscore_is_taken(name):
    assert check_run_name(name) == name


@pytest.mark.slow
@pytest.mark.parametrize("name", ["../outside", "/tmp/absolute", ""])
def test_a_bad_run_name_writes_nothing_anywhere(tmp_path, name):
    launch = tmp_path / "launch"
    launch.mkdir()
    result = command_here(*SMALL, f"run_name={name}", cwd=launch)
    assert result.returncode == 2
    assert (result.stdout + result.stderr).strip().splitlines() == [last_error_line(result)]
    assert last_error_line(result).startswith("error: run_name")
    assert list(tmp_path.rglob("*")) == [launch]  # no outputs/, checkpoints/, lock: nothing, here or outside


@pytest.mark.slow
def test_debug_quick_after_a_real_run_never_touches_it(tmp_path):
    real = train_here(tmp_path, *SMALL, "trainer.max_epochs=1", quick=[], name="real")
    assert real.returncode == 0, real.stderr[-2000:]
    folder = tmp_path / "checkpoints" / RUN
    before = hashes(folder)

    quick = command_here("debug=quick", *SMALL, cwd=tmp_path)  # the setup check, as the README has it
    assert quick.returncode == 0, quick.stderr[-2000:]
    assert hashes(folder) == before and not list((tmp_path / "checkpoints").glob("*.previous-*"))
    assert (tmp_path / "checkpoints" / "quick" / RUN / "best.ckpt").is_file()  # a root of its own
    assert (tmp_path / "logs" / "quick" / RUN).is_dir()
    assert sorted(p.name for p in (tmp_path / "outputs").iterdir()) == ["quick", "real"]  # its run folder too
    (metrics,) = (tmp_path / "outputs" / "quick" / RUN).glob("*/metrics.json")
    assert json.loads(metrics.read_text())["checkpoint"].endswith(f"checkpoints/quick/{RUN}/best.ckpt")

    again = train_here(tmp_path, *SMALL, quick=["debug=quick"], name="quick_again")  # a check checks, every time
    assert again.returncode == 0, again.stderr[-2000:]
    assert "had already finished" not in again.stdout and "epoch 1/1" in again.stdout
    (aside,) = (tmp_path / "checkpoints" / "quick").glob(f"{RUN}.previous-*")  # the last check, aside
    third = train_here(tmp_path, *SMALL, quick=["debug=quick"], name="quick_third")
    assert third.returncode == 0, third.stderr[-2000:]
    (newest,) = (tmp_path / "checkpoints" / "quick").glob(f"{RUN}.previous-*")  # checks do not pile up
    assert newest != aside and not aside.exists()
    assert hashes(folder) == before


def test_a_fresh_start_keeps_the_newest_runs_moved_aside_as_asked_and_nothing_else(tmp_path):
    def folder(name, lock=False):
        (tmp_path / name).mkdir()
        (tmp_path / name / "last.ckpt").write_bytes(b"")
        if lock:
            lock_path(tmp_path / name).touch()

    old = ["run.previous-20251231-235959", "run.previous-20260101-120000", "run.previous-20260101-120000-2"]
    for name in [*old, "run.previous-20260101-120000-10", "run", "run2.previous-20200101-000000", "run.previous-x"]:
        folder(name)
    folder("run.previous-20200101-000000", lock=True)  # a run trained under that name, when names could be so
    moved = RunFolder(tmp_path, "run", {}, keep_previous=2).move_aside().name
    left = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))
    # the one moved now, and the newest before it (-10 after -2)
    assert left == sorted(
        [moved, "run.previous-20260101-120000-10", "run.previous-20200101-000000"]
        + ["run2.previous-20200101-000000", "run.previous-x"]
    )

    folder("run")
    RunFolder(tmp_path, "run", {}).move_aside()  # keep_previous=None, the default: none is deleted
    assert len(list(tmp_path.glob("run.previous-2*"))) == 4


def test_an_old_run_that_cannot_be_deleted_stays_and_the_fresh_start_goes_on(tmp_path, monkeypatch, caplog):
    import shutil

    for name in ("run.previous-20260101-120000", "run"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "last.ckpt").write_bytes(b"")

    def refuse(path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(shutil, "rmtree", refuse)
    with caplog.at_level("WARNING"):
        moved = RunFolder(tmp_path, "run", {}, keep_previous=1).move_aside()
    assert moved.is_dir() and (tmp_path / "run.previous-20260101-120000").is_dir()
    assert any("could not delete" in r.getMessage() and "Permission denied" in r.getMessage() for r in caplog.records)


GRID_CLASHES = [
    (["run_name=same", "seed=0,1"], "sweep jobs 0 and 1 would both run in checkpoints/same (seed=1 is not part of"),
    (
        ["run_name=ep", "trainer.max_epochs=1,3"],
        "sweep jobs 0 and 1 would both run in checkpoints/ep (trainer.max_epochs",
    ),
    (["seed=0,0"], f"sweep jobs 0 and 1 would both run in checkpoints/{RUN}: job 1 repeats job 0; drop the repeated"),
    # a run name that names no folder (a group's whole node, with slashes): Hydra names each job's
    # folder by it before the job runs, and the sweep stopped in a traceback
    (["seed=0,1", "run_name=r_${logger}_${seed}"], "run_name=\"r_{'tensorboard': {'_target_': "),
]


def test_a_grid_clash_over_a_config_group_says_how_to_name_the_option_chosen():
    """``-m logger=csv,tensorboard``: the refusal said ``run_name=<name>_${logger}``, the group's
    whole node, and the sweep so named failed in a traceback (a run name of the logger's settings)."""
    from pathlib import Path

    from swwae.training.runs.sweep_claim import clash_line

    folder = Path("checkpoints/quick/r").absolute()
    line = clash_line(0, 1, folder, ["logger=tensorboard"], groups={"logger", "model"})
    assert line.endswith(
        "(logger=tensorboard is not part of the run name), and the second would continue or "
        "report the first's run as its own: put it in the run name, e.g. "
        "run_name=<name>_${hydra:runtime.choices.logger}"
    )
    line = clash_line(0, 1, folder, ["trainer.max_epochs=3"], groups={"logger", "model"})
    assert line.endswith("e.g. run_name=<name>_${trainer.max_epochs}")


@pytest.mark.slow
@pytest.mark.parametrize("swept, line", GRID_CLASHES, ids=["seed", "max_epochs", "repeated job", "not a name"])
def test_a_grid_sweep_whose_jobs_share_a_run_folder_is_refused_before_its_first_job(tmp_path, swept, line):
    sweep = tmp_path / "sweep"
    result = command_here("-m", *QUICK, *SMALL, *swept, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    lines = (result.stdout + result.stderr).strip("\n").splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"error: {line}"), lines
    assert list(tmp_path.iterdir()) == []  # no sweep folder, no checkpoints


@pytest.mark.slow
def test_a_command_never_reports_continues_or_extends_a_run_of_another_length(tmp_path):
    """The same run name, asked for fewer or more epochs than its run had: another run, refused
    in one line with the ways out, the finished run's weights untouched (its metrics.json still
    names them); the run's own command reports it."""
    assert train_here(tmp_path, *SMALL, "trainer.max_epochs=2", name="long").returncode == 0
    folder = tmp_path / "checkpoints" / RUN
    before = hashes(folder)
    for epochs, change in ((1, "2 -> 1"), (3, "2 -> 3")):
        other = train_here(tmp_path, *SMALL, f"trainer.max_epochs={epochs}", name=f"e{epochs}")
        assert other.returncode == 2 and "Traceback" not in other.stderr
        assert last_error_line(other) == (
            f"error: checkpoints/{RUN} holds another run (trainer.max_epochs: {change}): give this run its own "
            "folder with run_name=..., or resume=false to start over (the old run is moved aside, not deleted)"
        )
    assert hashes(folder) == before
    again = train_here(tmp_path, *SMALL, "trainer.max_epochs=2", name="again")
    assert again.returncode == 0 and f"done: {RUN} had already finished: 2 of 2 epochs trained" in again.stdout
    assert hashes(folder) == before


@pytest.mark.slow
def test_a_later_sweep_never_replaces_the_weights_an_earlier_sweep_reports(tmp_path):
    """Two sweeps, each in its own folder, one run name: the second asks for more epochs, so its
    job is another run, refused in its metrics.json; the first sweep's checkpoint is the one its
    metrics.json names, byte for byte."""
    common = ["-m", *QUICK, *SMALL, "run_name=shared", "seed=0"]
    first = command_here(*common, "trainer.max_epochs=1", f"hydra.sweep.dir={tmp_path / 'A'}", cwd=tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    folder = tmp_path / "checkpoints" / "shared"
    before = hashes(folder)
    second = command_here(*common, "trainer.max_epochs=3", f"hydra.sweep.dir={tmp_path / 'B'}", cwd=tmp_path)
    assert second.returncode == 1  # a sweep with a failed job
    failed = json.loads((tmp_path / "B" / "0_shared" / "metrics.json").read_text())
    assert failed["status"] == "failed" and "holds another run (trainer.max_epochs: 1 -> 3)" in failed["error"]
    assert hashes(folder) == before
    reported = json.loads((tmp_path / "A" / "0_shared" / "metrics.json").read_text())
    assert reported["checkpoint_sha256"] == sha(folder / "best.ckpt")


@pytest.mark.slow
def test_a_rank_variable_without_ddp_does_not_skip_the_lock(tmp_path):
    folder = tmp_path / "checkpoints" / RUN
    with own_run(folder, RUN):  # another run holds it
        result = train_here(tmp_path, *SMALL, env={"SLURM_PROCID": "1", "RANK": "1", "LOCAL_RANK": "1"})
    assert result.returncode == 2
    assert f"checkpoints/{RUN} is in use by another run of {RUN} (pid {os.getpid()}" in last_error_line(result)
    assert not folder.exists()  # it trained nothing into it


@pytest.mark.slow
def test_a_lock_that_cannot_be_taken_for_another_reason_is_one_line(tmp_path):
    lock = lock_path(tmp_path / "checkpoints" / RUN)
    lock.parent.mkdir(parents=True)
    lock.symlink_to(lock.name)  # a symlink loop where the lock file goes
    result = train_here(tmp_path, *SMALL)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert last_error_line(result) == (
        f"error: cannot lock checkpoints/.{RUN}.lock for the run {RUN}: Too many levels of symbolic links"
    )


def test_a_sweep_reader_leaves_out_a_checkpoint_that_no_longer_holds_the_measured_weights(tmp_path):
    from swwae.checkpoint_file import file_sha256
    from swwae.training.sweep.jobs import read_job

    best = tmp_path / "checkpoints" / "run" / "best.ckpt"
    best.parent.mkdir(parents=True)
    best.write_bytes(b"the weights that were measured")
    job = tmp_path / "sweep" / "0_run"
    job.mkdir(parents=True)
    (job / "metrics.json").write_text(
        json.dumps(
            {
                "status": "ok",
                "metrics": {"test/acc": 0.9},
                "checkpoint": str(best),
                "checkpoint_sha256": file_sha256(best),
            }
        )
    )
    assert read_job(job).checkpoint([best.parent.parent]) == best
    best.write_bytes(b"another run's weights")  # e.g. a later run of the same name with resume=false
    with pytest.raises(Unreadable, match="no longer holds the weights metrics.json measured"):
        read_job(job).checkpoint([best.parent.parent])


def test_a_network_written_out_gets_a_run_name_of_its_own(tmp_path):
    from helpers.config import compose_config

    plain = compose_config(tmp_path, [])
    assert plain.run_name == RUN
    written = compose_config(tmp_path, ['model.arch="(64)5c-2p-(64)3c-2p-(64)3c-2p-10fc"'])
    assert written.run_name == "swwae_hard_mnist_sample_64x5c-2p-64x3c-2p-64x3c-2p-10fc_seed0"
    assert check_run_name(written.run_name) == written.run_name


def test_a_semi_supervised_run_gets_a_run_name_of_its_own(tmp_path):
    """Its checkpoints and TensorBoard run are not the fully supervised run's of the same model, data
    and seed (which refused it as another run); a name given stays as given."""
    from helpers.config import compose_config

    assert compose_config(tmp_path, ["data.num_labels=null"]).run_name == RUN
    semi = compose_config(tmp_path, ["data.num_labels=100", 'model.arch="(8)3c-2p-10fc"'])
    assert semi.run_name == "swwae_hard_mnist_sample_labels100_8x3c-2p-10fc_seed0"
    assert check_run_name(semi.run_name) == semi.run_name
    assert compose_config(tmp_path, ["data.num_labels=100", "run_name=mine"]).run_name == "mine"


def test_a_run_under_its_old_semi_supervised_name_is_named_not_trained_again(make_config, tmp_path):
    """Up to swwae 0.3.0 ``data.num_labels=100`` ran as the fully supervised run's name: the same
    command now finds that run in one line, writing nothing; another run there, or resume=false,
    goes on under the new name."""
    from swwae.errors import CheckpointError
    from swwae.training.run import train

    semi = ["data.num_labels=100", "model.widths=[4]", *ONE_BATCH]
    train(make_config(*semi, f"run_name={RUN}"))  # a run the old default name named
    checkpoints, before = tmp_path / "checkpoints", sorted((tmp_path / "checkpoints").iterdir())
    with pytest.raises(CheckpointError) as err:
        train(make_config(*semi))
    new = checkpoints / "swwae_hard_mnist_sample_labels100_seed0"
    assert str(err.value) == (
        f"this run (finished) is in {checkpoints / RUN}, the folder of its name before the default run name "
        f"said its labels (swwae 0.3.0 and earlier): continue or report it with run_name={RUN}, or move it "
        f"to its name now (mv {checkpoints / RUN} {new}), or resume=false to train it again here"
    )
    assert sorted(checkpoints.iterdir()) == before  # no folder, no lock of the new name
    with pytest.raises(CheckpointError, match="holds another run"):
        train(make_config(*semi, "model.widths=[8]", f"run_name={RUN}"))  # the old folder: never taken over
    train(make_config(*semi, "model.widths=[8]"))  # another run than the old folder's: its own, new name
    assert (checkpoints / "swwae_hard_mnist_sample_labels100_seed0" / "last.ckpt").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("swept", [["trainer.max_epochs=1,2"], ["seed=0,0"]], ids=["max_epochs", "repeated job"])
def test_two_jobs_of_a_sweep_that_map_to_one_run_folder_never_share_it(tmp_path, swept):
    """Two jobs of one run name (max_epochs: two runs; a repeated job: one): the second job would
    meet the first's run in its folder. Where the sweep cannot be checked up front (a
    sweeper that picks its jobs as it goes, here the grid without its check), the second job
    fails alone and the first keeps its weights."""
    sweep = tmp_path / "sweep"
    swept = [*swept, "~hydra.callbacks.run_folders"]
    result = command_here("-m", *QUICK, *SMALL, "run_name=ep", *swept, f"hydra.sweep.dir={sweep}", cwd=tmp_path)
    assert result.returncode == 1, result.stderr[-2000:]  # the sweep says it was not clean
    first, second = (json.loads((sweep / f"{job}_ep" / "metrics.json").read_text()) for job in (0, 1))
    best = tmp_path / "checkpoints" / "ep" / "best.ckpt"
    assert first["status"] == "ok" and first["checkpoint"] == str(best) and first["checkpoint_sha256"] == sha(best)
    assert second["status"] == "failed"
    assert second["error"].startswith("checkpoints/ep is the run folder of sweep job 0 too: the jobs of one sweep")
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == [".ep.lock", "ep"]  # nothing moved aside


@pytest.mark.slow
def test_a_run_folder_that_is_a_symbolic_link_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / RUN).symlink_to(elsewhere)
    result = train_here(tmp_path, *SMALL)
    assert result.returncode == 2
    assert last_error_line(result) == (
        f"error: checkpoints/{RUN} is a symbolic link (to {elsewhere}): a run's folder must be a folder of "
        "paths.checkpoint_dir itself; to keep checkpoints on another disk, point paths.checkpoint_dir there"
    )
    assert list(elsewhere.iterdir()) == []  # nothing written through it
