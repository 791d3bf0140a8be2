"""Bad input that Hydra, a sweeper or a launcher used to answer with a traceback or a line with
no reason: a preset of the user's own that is not YAML, a search or a launcher that cannot run,
an override Hydra cannot merge, a seed that is no integer, a value 100 kB long. Each is one
``error:`` line, exit status 2, and nothing written where the command ran. Keys of the user's
own at the top level are theirs; ``python train.py`` reads the configs beside it.

``swwae train`` runs in-process here (``train``): everything these check happens before any
training."""

from __future__ import annotations

import shutil

import pytest
import yaml

from helpers.cli import command_here, run_cli
from helpers.config import ROOT
from swwae.training.spec import check_config


@pytest.fixture
def train(tmp_path):
    """``train(*args)``: ``swwae train <args>`` launched in ``tmp_path``, in this process, as (exit
    status, the lines it printed, stdout and stderr together)."""

    def run(*args) -> tuple[int, list[str]]:
        result = command_here(*args, cwd=tmp_path, configs=None)
        return result.returncode, (result.stdout + result.stderr).splitlines()

    return run


def left_in(folder, *besides) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name not in besides)


def test_a_preset_of_your_own_that_is_not_yaml_is_one_line_naming_the_file_line_and_column(tmp_path, train):
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "broken.yaml").write_text("# @package _global_\nmodel:\n  lr: [0.1\nseed: 3\n")
    assert train("--config-dir", "mine", "experiment=broken") == (
        2,
        [
            "error: mine/experiment/broken.yaml, line 4, column 5: not valid YAML: expected ',' or ']', but got ':' "
            "(while parsing a flow sequence, from line 3, column 7)"
        ],
    )
    assert left_in(tmp_path) == ["mine"]


def test_a_config_folder_of_your_own_that_is_not_there_is_one_line(tmp_path, train):
    missing = tmp_path / "mine"
    assert train("--config-dir", "mine", "experiment=x") == (
        2,
        [f"error: --config-dir: there is no folder {missing}: name the folder that holds your own configs"],
    )
    assert left_in(tmp_path) == []


@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("=3", "error: =3: an override names a key before its '=' (key=value)"),  # Hydra: a traceback
        ("~model", "error: ~model: a run needs its model section (the config reads model.arch): choose another with"),
    ],
)
def test_an_override_hydra_answered_with_a_traceback_is_one_line(tmp_path, train, override, line):
    status, lines = train("debug=quick", override)
    assert status == 2 and len(lines) == 1 and lines[0].startswith(line), lines
    assert left_in(tmp_path) == []


@pytest.mark.parametrize("override", ["model=swwae_hard,upsample", "seed=range(0,3)"])
def test_a_sweep_without_m_is_one_line_saying_to_add_it(tmp_path, train, override):
    assert train("debug=quick", override) == (
        2,
        [f"error: {override}: these are a sweep's values: add -m to run a job for each (a list is key=[a,b], a string "
         "with a comma key='a,b')"],
    )  # fmt: skip
    assert left_in(tmp_path) == []


@pytest.mark.extra("optuna")
@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("hydra.sweeper.direction=sideways", "hydra.sweeper.direction=sideways: an Optuna search's direction is"),
        ("optimized_mode=sideways", "optimized_mode must be min or max, got 'sideways'"),  # every trial would fail
        ("hydra.sweeper.n_trials=abc", "hydra.sweeper.n_trials=abc: Value 'abc' of type 'str' could not be converted"),
        (  # a + on a key the config holds as an interpolation: Hydra said only "Error merging override"
            "+trainer.default_root_dir=here",
            "+trainer.default_root_dir=here: trainer.default_root_dir is already in the config: drop the +",
        ),
    ],
)
def test_an_optuna_search_that_cannot_run_is_one_line_with_its_reason(tmp_path, train, override, line):
    status, printed = train("-m", "hydra/sweeper=optuna", override, "debug=quick")
    assert status == 2 and len(printed) == 1 and printed[0].startswith(f"error: {line}"), printed
    assert left_in(tmp_path) == []


@pytest.mark.extra("slurm")
def test_a_submitit_job_given_no_time_is_one_line(tmp_path, train):
    status, printed = train("-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=0", "debug=quick")
    assert status == 2 and printed == [
        "error: hydra.launcher.timeout_min=0: each job of the sweep is given this many minutes before submitit "
        "stops it; give it at least 1 (timeout_min=60)"
    ]
    assert left_in(tmp_path) == []


def test_the_local_submitit_launcher_given_several_tasks_a_job_is_one_line():
    """Each of submitit_local's tasks ran the whole job (Lightning makes one DDP run of SLURM's
    tasks, not of these): the job's run trained twice at once, or one task was refused its lock."""
    from omegaconf import OmegaConf

    from swwae.training.runs.sweep_checks import launcher_line

    local = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher", "timeout_min": 60}
    assert launcher_line(OmegaConf.create(local | {"tasks_per_node": 2})) == (
        "hydra.launcher.tasks_per_node=2 runs each job 2 times at once under submitit_local (Lightning finds no "
        "cluster there to make them one DDP run, and the job's run is trained twice or refused): leave it at 1; "
        "trainer=ddp trainer.devices=N starts a job's N processes"
    )
    assert launcher_line(OmegaConf.create(local | {"tasks_per_node": 1})) is None


@pytest.mark.extra("slurm")
def test_the_slurm_launcher_off_a_cluster_is_one_line_and_leaves_no_sweep_folder(tmp_path, train, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path / "no_slurm_here"))
    status, printed = train("-m", "hydra/launcher=submitit_slurm", "debug=quick")
    assert status == 2 and len(printed) == 1, printed
    assert printed[0].startswith("error: hydra/launcher=submitit_slurm submits each job with Slurm's sbatch, which")
    assert left_in(tmp_path) == []  # no multirun/<time>/ holding only multirun.yaml


@pytest.mark.parametrize("seed", ["null", "-1", "1.5"])
def test_a_seed_is_an_integer(tmp_path, train, seed):
    """Every random draw of a run is a function of its seed (docs/architecture.md): no seed, no run."""
    status, printed = train(f"seed={seed}")
    assert status == 2 and printed == [f"error: seed must be an integer in 0..4294967295, got {seed}"]
    assert left_in(tmp_path) == []


@pytest.mark.parametrize(
    ("metric", "mode", "better"), [("val/acc", "min", "higher"), ("val/recon_mse", "max", "lower")]
)
def test_a_monitor_the_wrong_way_round_is_one_line(tmp_path, train, metric, mode, better):
    """best.ckpt would be the worst epoch, and a search would head for the worst settings."""
    status, printed = train(f"optimized_metric={metric}", f"optimized_mode={mode}")
    right = "max" if better == "higher" else "min"
    assert status == 2 and printed == [
        f"error: optimized_mode={mode} would keep the worst {metric} as best: it is better {better}; set "
        f"optimized_mode={right}, or leave it out (it follows optimized_metric)"
    ]
    assert left_in(tmp_path) == []


LONG_ARCH = "-".join(["(16)3c"] * 17_000)  # 119 kB, and no stage closed


@pytest.mark.parametrize(
    "override",
    [
        f"model.arch={LONG_ARCH}",
        f"model.arch={LONG_ARCH}-2p-5x-2p",  # the bad token at its end
        f"model.arch={LONG_ARCH}-2p-10fc model.lambda_nll=0",  # a classifier that never trains
        f"model.pool_mode={'x' * 120_000}",
        f"resume={'x' * 120_000}",
        f"model.lr={LONG_ARCH}",  # no override Hydra can read
    ],
    ids=["unclosed", "bad token", "untrained classifier", "pool_mode", "resume", "unreadable"],
)
def test_an_error_never_echoes_a_long_value_whole(tmp_path, train, override):
    status, printed = train("run_name=x", *override.split())
    assert status == 2 and printed and printed[0].startswith("error: "), printed[:1]
    assert len(printed) == 1 or set(printed[1].strip()) == {"^"}  # a bad layer string: a caret under its token
    assert all(len(line) <= 400 for line in printed), [len(line) for line in printed]
    assert left_in(tmp_path) == []


def test_a_caret_still_points_at_the_bad_token_of_a_long_layer_string(train):
    _, (line, caret) = train("run_name=x", f"model.arch={LONG_ARCH}-2p-5x-2p")
    start = len(caret) - len(caret.lstrip())
    assert line[start : len(caret)] == "5x"


def test_a_top_level_key_of_your_own_is_yours(make_config, train, tmp_path):
    """``tags: [dev]`` in a preset of yours is kept with the run's config; a key that reads as a
    typo of a setting is still refused, naming it."""
    spec = check_config(make_config("+tags=[dev]", "+project=lab1"))
    assert (spec.model_extra, spec.seed) == ({"tags": ["dev"], "project": "lab1"}, 0)
    assert train("+seeds=3") == (2, ["error: seeds is not a setting; did you mean seed?"])
    assert train("tags=[dev]") == (2, ["error: tags is not in the config: add a key of your own with +tags=[dev]"])
    assert left_in(tmp_path) == []


@pytest.mark.slow
def test_train_py_reads_the_configs_beside_it(tmp_path):
    """A second clone's ``python train.py``, with swwae installed from the first: its own
    configs/, not the installed package's."""
    clone = tmp_path / "clone"
    clone.mkdir()
    shutil.copy(ROOT / "train.py", clone)
    shutil.copytree(ROOT / "configs", clone / "configs")
    preset = clone / "configs" / "model" / "swwae_hard.yaml"
    preset.write_text(preset.read_text() + "lr: 0.0123\n")
    result = run_cli(clone / "train.py", "--cfg", "job", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert yaml.safe_load(result.stdout)["model"]["lr"] == 0.0123
    assert left_in(tmp_path) == ["clone"]


def test_a_config_folder_without_train_yaml_is_not_read_as_the_configs(tmp_path):
    from swwae.training.composing import CONFIG_PATH, config_path

    assert config_path(tmp_path) == CONFIG_PATH
    (tmp_path / "train.yaml").write_text("seed: 0\n")
    assert config_path(tmp_path) == str(tmp_path)
