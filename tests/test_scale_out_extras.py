"""The documented extras of docs/scale_out.md run, not only compose: the Optuna search (its
first command, two quick trials; a search with a failed trial goes on) and a sweep through
``hydra/launcher=submitit_local`` (two quick jobs), each ending with the sweep's summary.md.
Skipped, visibly, without the extra."""

from __future__ import annotations

import shlex

import pytest
import yaml

from helpers.cli import command_here, run_cli
from helpers.config import QUICK, ROOT
from helpers.docs import shell_commands

PAGE = ROOT / "docs" / "scale_out.md"


def summary_rows(sweep) -> list[str]:
    return [line for line in (sweep / "summary.md").read_text().splitlines() if line.startswith("| ")]


@pytest.mark.slow
@pytest.mark.extra("optuna")
def test_the_optuna_search_of_the_docs_runs_two_trials(tmp_path):
    command = next(c for c in shell_commands("python train.py hparams_search=", pages=[PAGE]) if "n_trials" not in c)
    args = [*shlex.split(command)[2:], *QUICK, "hydra.sweeper.n_trials=2", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    result = command_here(*args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    assert {"model.lr", "model.beta"} <= set(best["best_params"])
    assert len(list((tmp_path / "sweep").glob("[01]_optuna_swwae_soft_*"))) == 2
    assert "2 jobs, 2 configs, 0 failed" in (tmp_path / "sweep" / "summary.md").read_text()


@pytest.mark.slow
@pytest.mark.extra("optuna")
def test_a_failed_trial_is_a_failed_trial_and_the_search_goes_on(tmp_path):
    """Trial 0 is refused (max_epochs follows the trial's number: 0 trains nothing), trial 1
    trains: Optuna records the first as failed, runs the second, reports it as the best; the
    summary lists the failure and the search exits 1, without a traceback."""
    args = ["hparams_search=swwae_optuna", "model=swwae_soft", *QUICK, "hydra.sweeper.n_trials=2"]
    args += ["trainer.max_epochs=${hydra:job.num}", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    result = command_here(*args, cwd=tmp_path)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors[0].startswith("error: sweep job 0 (optuna_swwae_soft_mnist_sample_trial0_seed0) failed: trainer.max")
    assert errors[-1].startswith("error: 1 of 2 sweep jobs failed (0_optuna_swwae_soft_mnist_sample_trial0_seed0)")
    assert "Failed experiment" in result.stdout + result.stderr  # Optuna's sweeper: the trial is FAIL
    best = yaml.safe_load((tmp_path / "sweep" / "optimization_results.yaml").read_text())
    trained = yaml.safe_load(
        (tmp_path / "sweep" / "1_optuna_swwae_soft_mnist_sample_trial1_seed0" / ".hydra" / "overrides.yaml").read_text()
    )
    assert {f"{k}={v}" for k, v in best["best_params"].items()} <= set(trained)  # the trial that trained is the best
    assert "2 jobs, 2 configs, 1 failed" in (tmp_path / "sweep" / "summary.md").read_text()


@pytest.mark.slow
@pytest.mark.extra("slurm")
def test_a_sweep_through_the_local_submitit_launcher_runs_two_jobs(tmp_path):
    sweep = tmp_path / "sweep"
    args = ["-m", "hydra/launcher=submitit_local", "hydra.launcher.timeout_min=5", "seed=0,1", *QUICK]
    result = run_cli(ROOT / "train.py", *args, f"hydra.sweep.dir={sweep}", cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert sorted(p.name for p in sweep.glob("[01]_*")) == [
        "0_swwae_hard_mnist_sample_seed0",
        "1_swwae_hard_mnist_sample_seed1",
    ]
    assert "2 jobs, 1 config, 0 failed" in (sweep / "summary.md").read_text()
    assert len(summary_rows(sweep)) == 2  # the header and one config over two seeds
