"""The where study's report (``swwae.commands.where_report``, ``swwae.stats``): its statistics
against values computed by hand, on a made-up sweep folder whose differences are known, and the
preset end to end (a 2-seed ``debug=quick`` sweep, then its report). No test asserts a
scientific result."""

from __future__ import annotations

import itertools
import json
import math
import random
import shutil
from pathlib import Path

import pytest

from helpers.cli import command_here
from helpers.config import ROOT
from helpers.disks import read_only_folder, read_only_reason
from helpers.sweeps import write_job
from swwae.commands.where_report import main
from swwae.stats import mcnemar, mean_std, mean_std_text, paired_difference, t_interval, verdict, wilcoxon_p


@pytest.fixture
def sweep(tmp_path):
    """3 arms x 5 seeds. Wrong images out of 20 (always the first ones): hard 1,1,2,2,3;
    upsample 2,3,4,5,6, so 1+2+2+3+3 = 11 images only hard gets right; classifier_only 3."""
    sweep = tmp_path / "sweep"
    number = 0
    for seed in range(5):
        for model, wrong, recon in [
            ("swwae_hard", [1, 1, 2, 2, 3][seed], 0.002 + 0.001 * seed),
            ("upsample", [2, 3, 4, 5, 6][seed], 0.004 + 0.001 * seed),
            ("classifier_only", 3, 0.09),
        ]:
            write_job(sweep, number, model, seed, wrong, recon, lambda_rec=0.0 if model == "classifier_only" else 1.0)
            number += 1
    return sweep


# the statistics, by hand


def test_t_interval_of_one_to_five():
    interval = t_interval([1, 2, 3, 4, 5])  # sd 1.5811, se 0.7071, t(0.975, 4) = 2.7764
    assert interval.mean == 3 and interval.n == 5
    assert interval.low == pytest.approx(3 - 1.963243, abs=1e-5) and interval.high == pytest.approx(4.963243, abs=1e-5)
    assert math.isnan(t_interval([2.0]).low)


def test_mean_std_of_the_finite_values():
    """The one mean ± std of the sweep table and the study reports: sample std (n - 1); None,
    NaN and infinities left out; no std for one value, a NaN mean for none."""
    mean, std = mean_std([1, 2, 3, 4, 5])
    assert mean == 3 and std == pytest.approx(1.581139, abs=1e-6)
    assert mean_std([1.0, None, math.nan, math.inf, 3.0]) == (2.0, pytest.approx(math.sqrt(2)))
    assert mean_std([2.5]) == (2.5, None)
    for nothing in ([], [None], [math.nan, -math.inf]):
        mean, std = mean_std(nothing)
        assert math.isnan(mean) and std is None


def test_a_report_cell_is_mean_and_std_of_the_finite_values_or_a_dash():
    assert mean_std_text([0.5, 0.7]) == "0.60 ± 0.14"
    assert mean_std_text([0.0123], 1, scale=100) == "1.2"  # one seed: no std
    assert mean_std_text([1.5, 2.5], sign=True) == "+2.00 ± 0.71"  # a gain
    assert mean_std_text([None, math.nan]) == mean_std_text([]) == "-"


def test_wilcoxon_exact_p_values():
    assert wilcoxon_p([1, 2, 3, 4, 5]) == pytest.approx(2 / 32)  # every sign positive: 2 of 2^5 sign patterns
    assert wilcoxon_p([-1, 2, 3, 4, 5]) == pytest.approx(4 / 32)  # rank sum of negatives 1: 2 patterns a side
    assert wilcoxon_p([0, 0, 0]) == 1.0  # no evidence either way
    assert wilcoxon_p([0, 1, 2, 3, 4, 5]) == pytest.approx(2 / 32)  # a tie is dropped
    # tied |d| share their mean rank: ranks 1.5, 1.5, 3, 4.5, 4.5; positives sum to 1.5 + 4.5 = 6,
    # 1.5 from the mean 7.5: only the 4 sign patterns that sum to 7.5 lie closer (whatever scipy says)
    assert wilcoxon_p([0.2, -0.2, -0.6, 0.8, -0.8]) == 28 / 32


@pytest.mark.parametrize("size", [1, 6, 11])
def test_wilcoxon_p_is_the_share_of_sign_patterns_at_least_as_far_out_ties_and_all(size):
    rng = random.Random(size)
    differences = [rng.choice([-1, 1]) * rng.randint(1, 4) for _ in range(size)]  # many ties
    ranks = [
        sorted(map(abs, differences)).index(abs(d)) + (sorted(map(abs, differences)).count(abs(d)) + 1) / 2
        for d in differences
    ]  # mean ranks: below it, then the middle of its ties
    mean, observed = sum(ranks) / 2, sum(r for r, d in zip(ranks, differences) if d > 0)
    far = [
        abs(sum(r for r, s in zip(ranks, signs) if s) - mean) >= abs(observed - mean) - 1e-9
        for signs in itertools.product([0, 1], repeat=size)
    ]
    assert wilcoxon_p(differences) == sum(far) / 2**size


def test_mcnemar_exact_p_value():
    right_a = [True] * 10 + [False] * 2 + [True] * 30
    right_b = [False] * 10 + [True] * 2 + [True] * 30
    result = mcnemar(right_a, right_b)
    assert (result.only_a, result.only_b) == (10, 2)
    assert result.p == pytest.approx(2 * (1 + 12 + 66) / 4096)  # 2 P(X <= 2), X ~ Bin(12, 1/2)
    assert mcnemar([True], [True]).p == 1.0


def test_paired_difference_uses_shared_seeds_and_says_what_it_finds():
    difference = paired_difference({0: 7.0, 1: 7.5, 2: 6.5, 3: 9.0}, {0: 4.0, 1: 4.0, 2: 4.0})
    assert difference.seeds == (0, 1, 2) and difference.differences == (3.0, 3.5, 2.5)
    assert difference.favours == (3, 0, 0)
    assert verdict(difference) == "higher, the 95% interval excludes 0 by the t interval, though Wilcoxon p = 0.25"
    assert verdict(paired_difference({0: 1.0, 1: 2.0}, {0: 2.0, 1: 1.0})).startswith("no difference detected")


# the report on a made-up sweep


def test_report_of_a_made_up_sweep(sweep, tmp_path, capsys):
    out = tmp_path / "report" / "where"
    assert main([str(sweep), "--out", str(out)]) == 0
    text = out.with_suffix(".md").read_text()
    assert out.with_suffix(".png").stat().st_size > 10_000
    assert text == capsys.readouterr().out.split("-> ")[0]
    # error % = 5 x wrong: hard 5,5,10,10,15 (mean 9); upsample 10,15,20,25,30 (mean 20)
    assert "| swwae_hard | 5 | 9.00 [" in text and "| upsample | 5 | 20.00 [" in text
    assert "| classifier_only | 5 | 15.00 [15.00, 15.00] | 15.0, 15.0, 15.0, 15.0, 15.0 | - (not trained) |" in text
    # hard - upsample: -5, -10, -10, -15, -15 points; mean -11, sd 4.1833, half-width 2.7764 x 1.8708 = 5.194
    # every seed favours hard: Wilcoxon 2/32; McNemar 11 images only hard gets right, 0 the reverse: 2/2^11
    row = next(line for line in text.splitlines() if line.startswith("| swwae_hard - upsample |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1:] == [
        "5",
        "-11.00 [-16.19, -5.81]",
        "5 / 0 / 0",
        "0.0625",
        "11 / 0",
        f"{2 / 2**11:.3g}",
        "lower, the 95% interval excludes 0 by the t interval, though Wilcoxon p = 0.0625",
    ]
    # the reconstruction: only the two arms that train it; hard - upsample = -0.002 at every seed
    assert "| swwae_hard - upsample | 5 | -0.00200 [-0.00200, -0.00200] | -33% | 0.0625 |" in text
    assert "swwae_hard - classifier_only | 5 | -0" not in text.split("reconstruction MSE")[1]


def test_arms_can_be_chosen_and_a_missing_one_is_one_line(sweep, tmp_path, capsys):
    assert main([str(sweep), "--out", str(tmp_path / "r"), "--arms", "upsample", "swwae_hard"]) == 0
    assert "| upsample - swwae_hard | 5 | +11.00 [+5.81, +16.19] |" in (tmp_path / "r.md").read_text()
    assert main([str(sweep), "--arms", "swwae_soft", "upsample"]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: no finished run of swwae_soft; the sweep has swwae_hard, upsample, classifier_only"
    )


def test_the_arms_can_be_the_values_of_another_setting(tmp_path, capsys):
    """``--by trainer.precision``: one model's runs in two precisions, paired seed by seed; a run
    whose saved config lacks the setting is left out in one line, the rest reported."""
    sweep, number = tmp_path / "sweep", 0
    for seed in range(4):
        for precision, wrong in [("32-true", 2), ("bf16-mixed", [2, 3, 3, 4][seed])]:
            write_job(sweep, number, "swwae_hard", seed, wrong, 0.003, precision=precision)
            number += 1
    assert main([str(sweep), "--by", "trainer.precision", "--out", str(tmp_path / "r")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "| trainer.precision | seeds | test error % |" in text
    assert "| 32-true | 4 | 10.00 [10.00, 10.00] | 10.0, 10.0, 10.0, 10.0 |" in text
    # 32-true - bf16-mixed: 0, -5, -5, -10 points; mean -5, sd 4.0825, half-width 3.1824 x 2.0412 = 6.496
    assert "| 32-true - bf16-mixed | 4 | -5.00 [-11.50, +1.50] | 3 / 1 / 0 |" in text
    write_job(sweep, number, "swwae_hard", 4, 2, 0.003)  # no trainer.precision in its config
    assert main([str(sweep), "--by", "trainer.precision", "--out", str(tmp_path / "r")]) == 1
    assert (
        f"{sweep / f'{number}_swwae_hard_seed4'}: unreadable: its saved config has no setting trainer.precision"
        in (tmp_path / "r.md").read_text()
    )
    capsys.readouterr()
    assert main([str(sweep), "--out", str(tmp_path / "r")]) == 2  # by model: one arm, and seeds twice over
    assert "are both model=swwae_hard with seed 0: an arm has one run a seed" in capsys.readouterr().err
    assert main([str(sweep), "--by", "seed"]) == 2  # the pairing, not an arm
    assert capsys.readouterr().err.startswith("error: --by seed: the seeds pair the arms")


def test_outcomes_that_disagree_with_metrics_are_refused(sweep, capsys):
    job = next(sweep.glob("0_*"))
    (job / "test_outcomes.csv").write_text("index,label,prediction,recon_mse\n0,1,1,0.1\n")
    assert main([str(sweep)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "gives accuracy 1.0000, metrics.json 0.9500" in err


def test_arms_tested_on_other_images_are_refused(sweep, capsys):
    job = next(sweep.glob("1_upsample_seed0"))
    rows = (job / "test_outcomes.csv").read_text().replace("\n0,0,", "\n0,7,", 1)  # image 0's label changed
    (job / "test_outcomes.csv").write_text(rows)
    record = json.loads((job / "metrics.json").read_text())
    record["metrics"]["test/acc"] = 0.9  # still consistent with its own outcomes: 2 wrong of 20
    (job / "metrics.json").write_text(json.dumps(record))
    assert main([str(sweep), "--out", str(sweep / "r")]) == 2
    assert "seed 0: swwae_hard and upsample were tested on different images" in capsys.readouterr().err


def test_a_sweep_given_twice_is_one_line_naming_it(sweep, tmp_path, capsys, monkeypatch):
    """Not its first job named as a second run of itself."""
    from swwae.commands.semi_map import main as semi_map

    monkeypatch.chdir(tmp_path)
    for report in (main, semi_map):
        assert report(["sweep", "./sweep/"]) == 2
        assert (
            capsys.readouterr().err.splitlines()[-1] == "error: sweep folder sweep is given twice; give each sweep once"
        )
        assert report(["sweep", str(sweep)]) == 2
        assert capsys.readouterr().err.splitlines()[-1] == (
            f"error: sweep folder sweep (as {sweep}) is given twice; give each sweep once"
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]  # nothing written


def test_a_failed_job_is_listed_and_the_rest_reported(sweep, tmp_path, capsys):
    job = next(sweep.glob("2_classifier_only_seed0"))
    (job / "metrics.json").write_text(json.dumps({"status": "failed", "error": "boom", "metrics": {}}))
    assert main([str(sweep), "--out", str(tmp_path / "r")]) == 1
    text = (tmp_path / "r.md").read_text()
    assert "| classifier_only | 4 |" in text and f"failed: {job}: boom" in text


def test_the_report_goes_here_and_never_into_a_read_only_sweep(sweep, tmp_path, capsys, monkeypatch):
    """Written into the current folder (or --out), never beside the records it reads; a bad
    job is one line and the rest is reported; its saved config is data, never resolved."""
    hard = next(sweep.glob("0_swwae_hard_seed0"))
    (hard / ".hydra" / "config.yaml").write_text("model:\n  lambda_rec: ${oc.env:HOME}\n")
    upsample = next(sweep.glob("1_upsample_seed0"))
    record = json.loads((upsample / "metrics.json").read_text())
    (upsample / "metrics.json").write_text(json.dumps(record | {"seed": "abc"}))
    with read_only_folder(tmp_path / "theirs", fill=lambda f: shutil.copytree(sweep, f / "sweep")) as theirs:
        here = tmp_path / "here"
        here.mkdir()
        monkeypatch.chdir(here)
        assert main([str(theirs / "sweep")]) == 1  # two jobs left out, the rest reported
        out, err = capsys.readouterr()
        lines = [
            f"{theirs / 'sweep' / hard.name}: unreadable: model.lambda_rec is an interpolation, not a value",
            f"{theirs / 'sweep' / upsample.name}: unreadable: seed is str 'abc', not an integer",
        ]
        assert all(line in out.splitlines() for line in lines) and str(Path.home()) not in out + err
        assert out.splitlines()[-1] == "-> where.md, where.png" and "| swwae_hard | 4 |" in out
        assert sorted(p.name for p in here.iterdir()) == ["where.md", "where.png"]
        assert main([str(theirs / "sweep"), "--out", str(theirs / "where")]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: cannot write the report where in {theirs}: "
            + read_only_reason()
            + "; set --out=... to write elsewhere"
        ]


# the preset, end to end


@pytest.mark.slow
def test_the_preset_runs_two_quick_seeds_and_reports(tmp_path):
    result = command_here(
        "-m",
        "experiment=semi_where",
        "debug=quick",
        "seed=0,1",
        f"hydra.sweep.dir={tmp_path / 'sweep'}",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    jobs = sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir())
    assert len(jobs) == 6 and jobs[0] == "0_semi_where_swwae_hard_labels100_seed0"
    for job in jobs:
        outcomes = (tmp_path / "sweep" / job / "test_outcomes.csv").read_text().splitlines()
        assert len(outcomes) == 1 + 500  # the header and every test image, once
    assert main([str(tmp_path / "sweep"), "--out", str(tmp_path / "where")]) == 0
    text = (tmp_path / "where.md").read_text()
    assert "6 runs, seeds 0-1 (2)" in text and "| swwae_hard - upsample | 2 |" in text


def test_a_finished_run_reported_again_brings_its_outcomes(tmp_path):
    """A sweep repeated into a new folder reports its finished runs there: each job folder gets
    the test_outcomes.csv its run wrote, so the report reads the new folder alone."""
    from swwae.training.run import copy_test_outcomes

    first, again = tmp_path / "first", tmp_path / "again"
    first.mkdir()
    (first / "test_outcomes.csv").write_text("index,label,prediction,recon_mse\n0,3,3,0.01\n")
    checkpoint = {"swwae_config": {"paths": {"output_dir": str(first)}}}
    assert copy_test_outcomes(checkpoint, again) == again / "test_outcomes.csv"
    assert (again / "test_outcomes.csv").read_text() == (first / "test_outcomes.csv").read_text()
    assert copy_test_outcomes(checkpoint, first) is None  # the same folder: nothing to do
    for stored in ({}, {"swwae_config": "x"}, {"swwae_config": {"paths": {"output_dir": 3}}}):
        assert copy_test_outcomes(stored, tmp_path / "none") is None
    assert not (tmp_path / "none").exists()


def test_the_published_report_is_what_its_committed_records_give(tmp_path):
    """docs/semi_where.md is a claim: regenerated from the records in docs/results/semi_where
    (every job's metrics.json, test_outcomes.csv and saved config), it reads the same."""
    records = ROOT / "docs" / "results" / "semi_where"
    assert main([str(records), "--out", str(tmp_path / "semi_where")]) == 0
    assert (tmp_path / "semi_where.md").read_text() == (ROOT / "docs" / "semi_where.md").read_text()


@pytest.mark.parametrize("study", ["swwae_hard", "swwae_soft", "mnist_semi_100"])
def test_the_published_precision_reports_are_what_their_records_give(tmp_path, study):
    """docs/precision.md quotes a report per study (``--by trainer.precision``): each, regenerated
    from its records in docs/results/precision, is there as it reads."""
    records = ROOT / "docs" / "results" / "precision" / study
    out = tmp_path / study
    assert main([str(records), "--by", "trainer.precision", "--arms", "32-true", "bf16-mixed", "--out", str(out)]) == 0
    assert out.with_suffix(".md").read_text() in (ROOT / "docs" / "precision.md").read_text()
