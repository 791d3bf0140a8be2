"""Every bad-input command of the README prints exactly one line, stdout and stderr together
(a caret line under a bad layer string counts with its error), exits with status 2, prints what
the README shows, and leaves nothing behind in the folder it ran in."""

from __future__ import annotations

import shlex

import pytest

from helpers.cli import command_here, run_cli, train_here
from helpers.docs import ROOT, code_blocks

README_HOME = "/home/me/swwae"  # where the README's example ran


def readme_examples() -> list[tuple[str, list[str]]]:
    """(command, the lines it prints) of the `$ python train.py ...` blocks of the README and of
    docs/reliability.md."""
    examples = []
    for block in code_blocks("", pages=[ROOT / "README.md", ROOT / "docs" / "reliability.md"]):
        shown = None  # the lines of the block's last command
        for line in block.source.splitlines():
            if line.startswith("$ python train.py"):
                examples.append((line[2:], shown := []))
            elif shown is not None:
                shown.append(line)
    return examples


EXAMPLES = readme_examples()


def test_the_readme_shows_bad_input_examples():
    assert len(EXAMPLES) >= 4 and all(lines and lines[0].startswith("error: ") for _, lines in EXAMPLES)


@pytest.mark.slow
@pytest.mark.parametrize("command, shown", EXAMPLES, ids=[command for command, _ in EXAMPLES])
def test_each_bad_input_command_of_the_readme_is_one_line(tmp_path, command, shown):
    args = shlex.split(command)[1:]  # without "python"
    if args[0] == "train.py":
        result = command_here(*args[1:], cwd=tmp_path)
    else:
        result = run_cli(ROOT / args[0], *args[1:], cwd=tmp_path)
    lines = (result.stdout + result.stderr).strip("\n").splitlines()
    assert result.returncode == 2, result.stderr[-2000:]
    carets = [line for line in lines[1:] if set(line.strip()) == {"^"}]
    assert len(lines) == 1 + len(carets) <= 2, lines
    assert lines == [line.replace(README_HOME, str(tmp_path)) for line in shown]
    assert list(tmp_path.iterdir()) == []  # no outputs/, checkpoints/ or logs/ left behind


@pytest.mark.slow
def test_a_run_leaves_its_log_lines_in_train_log_or_no_train_log(tmp_path):
    quiet = train_here(tmp_path, "model.widths=[4]", name="quiet")  # logs nothing of its own
    assert quiet.returncode == 0, quiet.stderr[-2000:]
    assert not (tmp_path / "outputs" / "quiet" / "train.log").exists()
    again = train_here(tmp_path, "model.widths=[4]", "resume=false", name="again")  # says it starts over
    assert again.returncode == 0, again.stderr[-2000:]
    assert "starting a fresh run (resume=false)" in (tmp_path / "outputs" / "again" / "train.log").read_text()


# values the job, Lightning or a data set would reject later, and the override grammar's
# common mistakes: one line naming the key, before anything is written
BAD_VALUES = [
    ("trainer.max_epochs=2.5", "error: trainer.max_epochs=2.5 is not allowed: a whole number of epochs >= 1"),
    ("trainer.max_epochs=1e400", "error: trainer.max_epochs=inf is not allowed: a whole number of epochs >= 1"),
    ("trainer.max_epochs=abc", "error: trainer.max_epochs='abc' is not allowed: a whole number of epochs >= 1"),
    ("trainer.max_epochs=-1", "error: trainer.max_epochs=-1 is not allowed: a whole number of epochs >= 1"),
    (
        "debug=quick trainer.val_check_interval=0",
        "error: trainer.val_check_interval=0 is not allowed: an integer >= 1 (batches)",
    ),
    (  # the data's batches: counted once the data are loaded, before the run's folders
        "debug=quick trainer.val_check_interval=1000",
        "error: trainer.val_check_interval=1000 is more than the 3 training batches of an epoch",
    ),
    ("trainer.accumulate_grad_batches=0", "error: trainer.accumulate_grad_batches=0 is not allowed: must be >= 1"),
    ("trainer.max_steps=0", "error: trainer.max_steps=0 trains nothing"),
    # runs that would train but never validate (nothing picks best.ckpt, no metric to report)
    ("+trainer.limit_val_batches=0", "error: trainer.limit_val_batches=0 never validates"),
    ("trainer.check_val_every_n_epoch=1000000", "error: trainer.check_val_every_n_epoch=1000000 never validates"),
    (
        "debug=quick trainer.max_steps=1 trainer.max_epochs=2 trainer.check_val_every_n_epoch=2",
        "error: trainer.max_steps=1 ends the run before it first validates (after 6",
    ),
    ("+trainer.fast_dev_run=true", "error: trainer.fast_dev_run=True is Lightning's smoke test"),
    ("run_name=ѕwwae", "error: run_name=ѕwwae: 'ѕ' (U+0455 CYRILLIC SMALL LETTER DZE) is not a plain ASCII character"),
    ("trainer.max_epoch=3", "error: trainer.max_epoch is not a setting; did you mean trainer.max_epochs?"),
    ("+trainer.max_epoch=3", "error: trainer.max_epoch is not a setting; did you mean trainer.max_epochs?"),
    ("+trainer.max_epochs=3", "error: +trainer.max_epochs=3: trainer.max_epochs is already in the config: drop the +"),
    (
        "trainer.min_epochs=2",
        "error: trainer.min_epochs is not in the trainer config: add it with +trainer.min_epochs=2",
    ),
    ("model.lamda_m=1", "error: model.lamda_m is not a setting; did you mean model.lambda_m?"),
    ("model.batch_norm=3", "error: model.batch_norm=3 is not allowed: must be a valid boolean"),
    ("model.widths=[1,2", "error: cannot read 'model.widths=[1,2' as an override"),
    ("model=swwae_hrad", "error: model=swwae_hrad: there is no model config swwae_hrad; did you mean swwae_hard?"),
    ("trainer=cuda", "error: trainer=cuda: there is no trainer config cuda; the choices are: ddp, default, gpu"),
    ("logger=null", "error: logger=null: logger takes the name of a config; to run without one: ~logger"),
    ("+callbacks.mine.every=2", "error: callbacks.mine names no class (_target_): give it one, or switch it off"),
    (
        "callbacks.reconstruction_images.num_images=0",
        "error: callbacks.reconstruction_images.num_images=0 is not allowed: must be >= 1",
    ),
    (
        "callbacks.embeddings.split=tset",
        "error: callbacks.embeddings.split='tset' is not allowed: must be 'train', 'val' or 'test'",
    ),
    (  # on, and writing nothing
        "callbacks.embeddings.enabled=true logger=csv",
        "error: callbacks.embeddings.enabled=true writes to TensorBoard's projector, and this run has no "
        "TensorBoard logger (its loggers: csv)",
    ),
]


UNKNOWN_KEYS = [
    (["data=mnist", "data.test_size=1000"], "data.test_size is not a setting of data=mnist (only of mnist_sample, "),
    (["data=stl10", "data.extra=true"], "data.extra is not a setting of data=stl10 (only of svhn)"),
    (["data.test_size=9"], "data.test_size is not in the data config: add it with +data.test_size=9"),  # no data=
    (["trainer.min_epochs=2"], "trainer.min_epochs is not in the trainer config: add it with +trainer.min_epochs=2"),
    (["data=mnist", "data.num_label=3"], "data.num_label is not a setting; did you mean data.num_labels?"),
]


@pytest.mark.parametrize("argv, line", UNKNOWN_KEYS, ids=[argv[-1] for argv, _ in UNKNOWN_KEYS])
def test_a_key_the_config_lacks_is_named_with_the_way_that_works(argv, line):
    """A data setting of other data sets than the one named is said to be theirs: the shipped data
    configs hold every setting of their own, and ``+data.test_size`` would only be a second error."""
    from swwae.commands.overrides import unknown_key_line

    assert unknown_key_line(argv[-1].partition("=")[0], argv).startswith(line)


@pytest.mark.slow
@pytest.mark.parametrize("override, line", BAD_VALUES, ids=[override for override, _ in BAD_VALUES])
def test_a_bad_value_is_one_line_before_anything_is_written(tmp_path, override, line):
    args = override.split()
    result = command_here(*args, f"hydra.run.dir={tmp_path / 'out'}", cwd=tmp_path)
    lines = (result.stdout + result.stderr).strip("\n").splitlines()
    assert result.returncode == 2, lines
    assert len(lines) == 1 and lines[0].startswith(line), lines
    assert list(tmp_path.iterdir()) == []  # no lock, checkpoint folder, logs or output folder


@pytest.mark.slow
def test_a_bad_value_in_a_sweep_stops_it_before_its_first_job(tmp_path):
    result = command_here("-m", "trainer.max_epoch=1,3", f"hydra.sweep.dir={tmp_path / 's'}", cwd=tmp_path)
    lines = (result.stdout + result.stderr).strip("\n").splitlines()
    assert result.returncode == 2 and lines == [
        "error: trainer.max_epoch is not a setting; did you mean trainer.max_epochs?"
    ]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("preset", "line"),
    [
        ("defaults:\n  - override /model: swwae_hrad\n", "model/swwae_hrad (named by a config's override /model)"),
        ("defaults:\n  - /trainer@trainer: cuda\n", "trainer/cuda (named in the defaults of experiment/mine)"),
    ],
    ids=["override", "defaults"],
)
def test_a_missing_option_that_a_preset_names_is_one_line(tmp_path, preset, line):
    """Not Hydra's dozen lines of choices and search path: the option, where it is named, the
    nearest choice (or the choices)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import MissingConfigException

    from helpers.config import compose_config
    from swwae.commands.overrides import line_for

    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "mine.yaml").write_text(f"# @package _global_\n{preset}")
    argv = [f"hydra.searchpath=[file://{tmp_path / 'mine'}]", "experiment=mine"]
    with pytest.raises(MissingConfigException) as caught:
        compose_config(tmp_path, argv)
    GlobalHydra.instance().clear()
    near = "did you mean swwae_hard?" if "model" in line else "the choices are: ddp, default, gpu"
    assert line_for(caught.value, argv) == f"{line} is no {line.partition('/')[0]} config; {near}"
