"""Where a run starts, as a table of cases: the pure decision of swwae.training.runs.decision,
from what the folder holds and what the new config asks. No training, no files."""

from __future__ import annotations

import pytest

from swwae.errors import ConfigError
from swwae.training.runs.decision import Decision, FolderState, Found, Request, decide, resume_mode
from swwae.training.runs.identity import differences, digest
from swwae.training.runs.identity import run_identity as identity_of_sections

MINE = {"model": {"lr": 0.002, "widths": [32, 64]}, "seed": 0}
OTHER = {"model": {"lr": 0.001, "widths": [32, 64]}, "seed": 0}


def ckpt(name="last.ckpt", identity=MINE, epoch=0, step=32, mid_epoch=None, problem=None) -> Found:
    return Found(name, problem, None if problem else identity, epoch, step, mid_epoch)


CORRUPT = "checkpoint last.ckpt is corrupt: its contents do not match the checksum written with it"
FOREIGN = "checkpoint model.ckpt holds pickled objects, not tensors and plain values"
UNREADABLE = "checkpoint best.ckpt is unreadable (truncated or corrupt?)"
ODD = "checkpoint last.ckpt is unreadable: the run config is str 'model=swwae', not a mapping"  # a valid checksum

# (case, folder, resume mode, max_epochs) -> (action, the checkpoint it continues or reports)
CASES = [
    ("empty", (), "auto", 20, "fresh", None),
    ("empty, resume=true", (), "true", 20, "fresh", None),
    ("empty, resume=false", (), "false", 20, "fresh", None),
    ("unfinished, same identity", (ckpt(epoch=3),), "auto", 20, "continue", "last.ckpt"),
    ("unfinished, same identity, resume=true", (ckpt(epoch=3),), "true", 20, "continue", "last.ckpt"),
    (
        "pre-empted mid-epoch in its last epoch",
        (ckpt(epoch=19, mid_epoch=(19, 5)),),
        "auto",
        20,
        "continue",
        "last.ckpt",
    ),
    ("finished", (ckpt(epoch=19),), "auto", 20, "finished", "last.ckpt"),
    ("finished, asked for more epochs", (ckpt(epoch=19),), "auto", 30, "continue", "last.ckpt"),
    ("finished, resume=false", (ckpt(epoch=19),), "false", 20, "start_over", None),
    ("other identity", (ckpt(identity=OTHER),), "auto", 20, "refuse", "last.ckpt"),
    ("other identity, resume=true", (ckpt(identity=OTHER),), "true", 20, "refuse", "last.ckpt"),
    ("other identity, resume=false", (ckpt(identity=OTHER),), "false", 20, "start_over", None),
    (
        "corrupt last, good best",
        (ckpt(problem=CORRUPT), ckpt("best.ckpt", epoch=2)),
        "auto",
        20,
        "continue",
        "best.ckpt",
    ),
    (
        "corrupt last, best of another run",
        (ckpt(problem=CORRUPT), ckpt("best.ckpt", identity=OTHER)),
        "auto",
        20,
        "refuse",
        "best.ckpt",
    ),
    (
        "nothing reads back",
        (ckpt(problem=CORRUPT), ckpt("best.ckpt", problem=UNREADABLE)),
        "auto",
        20,
        "start_over",
        None,
    ),
    ("nothing reads back, resume=true", (ckpt(problem=CORRUPT),), "true", 20, "refuse", None),
    (
        "unreadable last, good best",
        (ckpt(problem=ODD), ckpt("best.ckpt", epoch=2)),
        "auto",
        20,
        "continue",
        "best.ckpt",
    ),
    (
        "unreadable everything",
        (ckpt(problem=ODD), ckpt("best.ckpt", problem=ODD.replace("last", "best"))),
        "auto",
        20,
        "start_over",
        None,
    ),
    ("unreadable everything, resume=true", (ckpt(problem=ODD),), "true", 20, "refuse", None),
    ("foreign file only", (ckpt("model.ckpt", problem=FOREIGN),), "auto", 20, "start_over", None),
    ("foreign file only, resume=true", (ckpt("model.ckpt", problem=FOREIGN),), "true", 20, "refuse", None),
]


@pytest.mark.parametrize("case, checkpoints, mode, max_epochs, action, continues", CASES, ids=[c[0] for c in CASES])
def test_the_resume_decision(case, checkpoints, mode, max_epochs, action, continues):
    decision = decide(FolderState(checkpoints), Request(mode, MINE, max_epochs))
    assert decision.action == action
    assert (decision.checkpoint.name if decision.checkpoint else None) == continues


def test_a_locked_folder_is_refused_whatever_it_holds_and_whatever_is_asked():
    for mode in ("auto", "true", "false"):
        for checkpoints in ((), (ckpt(),), (ckpt(identity=OTHER),)):
            decision = decide(FolderState(checkpoints, locked_by="pid 7 on host n1"), Request(mode, MINE, 20))
            assert decision == Decision("refuse", reason="in use by another run (pid 7 on host n1)")


def test_a_refusal_names_what_differs_and_passed_over_files_are_warned_about():
    decision = decide(
        FolderState((ckpt(problem=CORRUPT), ckpt("best.ckpt", identity=OTHER))), Request("auto", MINE, 20)
    )
    assert decision.reason == "holds another run (model.lr: 0.001 -> 0.002)"
    assert decision.warnings == (f"cannot resume from last.ckpt: {CORRUPT}",)


def test_max_steps_finishes_a_run_too():
    assert decide(FolderState((ckpt(step=100),)), Request("auto", MINE, None, max_steps=100)).action == "finished"
    assert decide(FolderState((ckpt(step=99),)), Request("auto", MINE, None, max_steps=100)).action == "continue"


@pytest.mark.parametrize("value, mode", [(True, "true"), (False, "false"), ("auto", "auto"), ("AUTO", "auto")])
def test_resume_modes(value, mode):
    assert resume_mode(value) == mode


def test_an_unknown_resume_mode_is_one_line():
    with pytest.raises(ConfigError, match="resume='maybe' is unknown; choose one of auto, true, false"):
        resume_mode("maybe")


# the identity: what decides what a run reports, and nothing else

BASE = {
    "model": {"_target_": "swwae.training.module.SWWAEModule", "lr": 0.002, "widths": [32, 64]},
    "data": {"_target_": "swwae.training.data.MNISTSampleDataModule", "batch_size": 128, "root": "a", "num_workers": 0},
    "trainer": {"max_epochs": 20, "gradient_clip_val": None, "precision": "32-true", "devices": 1},
    "seed": 0,
    "optimized_metric": "val/recon_mse",
    "optimized_mode": "min",
    "logger": {"tensorboard": {}},
    "paths": {"checkpoint_dir": "checkpoints"},
    "compile": False,
}


def run_identity(config: dict, defaults=None, target_names=None) -> dict:
    """The identity of a whole run config: its sections, as the job passes them."""
    keys = ("model", "data", "trainer", "seed", "optimized_metric", "optimized_mode")
    sections = (config.get(key) for key in keys)
    return identity_of_sections(*sections, defaults=defaults, target_names=target_names)


def changed(**sections):
    config = {k: (dict(v) if isinstance(v, dict) else v) for k, v in BASE.items()}
    for key, value in sections.items():
        section, _, name = key.partition("__")
        if name:
            config[section] = dict(config[section], **{name: value})
        else:
            config[section] = value
    return config


@pytest.mark.parametrize(
    "change",
    [
        {"model__lr": 0.001},
        {"data__batch_size": 32},
        {"seed": 1},
        {"trainer__gradient_clip_val": 1.0},
        {"trainer__precision": "bf16-mixed"},
        {"trainer__limit_train_batches": 3},
        {"trainer__limit_train_batches": 1},  # one batch, not every batch (1.0)
        {"trainer__max_epochs": 40},  # a run of 20 epochs is not a run of 40
        {"trainer__max_steps": 100},
        {"trainer__devices": 2},  # each process takes its share of every batch
        {"trainer__limit_val_batches": 2},  # validation picks best.ckpt
        {"trainer__check_val_every_n_epoch": 2},
        {"optimized_metric": "val/acc"},
        {"optimized_mode": "max"},
        {"data___target_": "swwae.training.data.MNISTDataModule"},
    ],
)
def test_a_setting_that_changes_what_the_run_reports_changes_the_identity(change):
    assert run_identity(changed(**change)) != run_identity(BASE)
    assert digest(run_identity(changed(**change))) != digest(run_identity(BASE))
    assert differences(run_identity(BASE), run_identity(changed(**change)))


@pytest.mark.parametrize(
    "change",
    [
        {"trainer__accelerator": "gpu"},
        {"trainer__log_every_n_steps": 1},
        {"data__root": "elsewhere"},
        {"data__num_workers": 4},
        {"logger": {"csv": {}}},
        {"paths": {"checkpoint_dir": "other"}},
        {"compile": True},
        {"trainer__precision": "32"},
        {"trainer__limit_train_batches": 1.0},
        {"trainer__limit_val_batches": 1.0},
    ],
)
def test_a_setting_that_does_not_change_what_the_run_reports_keeps_the_identity(change):
    assert run_identity(changed(**change)) == run_identity(BASE)


def test_a_setting_one_side_predates_counts_as_its_default():
    defaults = {"model": {"lr": 0.002, "beta": 100.0}}
    old = changed(model={"_target_": "swwae.module.SWWAEModule", "lr": 0.002, "widths": [32, 64]})
    names = lambda section, target: target.rpartition(".")[2]  # noqa: E731 - the class, whatever its module
    assert run_identity(old, defaults, names) == run_identity(changed(model__beta=100.0), defaults, names)
    assert run_identity(old, defaults, names) != run_identity(changed(model__beta=10.0), defaults, names)
