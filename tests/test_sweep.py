"""Sweeps (docs/architecture.md 4.5, 4.6): ``python train.py -m`` ends with summary.md + summary.png in
the sweep folder, failed jobs are listed and make the sweep exit non-zero, presets give
every job its own run name, and ``scripts/compare_runs.py`` rebuilds the summary."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig

import swwae.training.runs.identity  # noqa: F401 - registers ${swwae.arch_tag:}, which run names use
from helpers.cli import command_here
from helpers.config import CONFIG_DIR, QUICK
from helpers.disks import read_only_folder, read_only_reason
from helpers.sweeps import fake_job
from swwae.training.composing import CONFIG_MODULE, register_resolvers
from swwae.training.sweep import collect, markdown, numeric_axis, write_summary

TINY = [*QUICK, "trainer.limit_train_batches=2", "trainer.limit_val_batches=1", "model.widths=[8]"]


def sweep(tmp, *overrides):
    return command_here(
        "-m",
        *overrides,
        *TINY,
        f"hydra.sweep.dir={tmp / 'sweep'}",
        f"paths.log_dir={tmp / 'logs'}",
        f"paths.checkpoint_dir={tmp / 'checkpoints'}",
        cwd=tmp,
    )


def table_rows(text: str) -> dict[str, list[str]]:
    rows = [line.strip("|").split("|") for line in text.splitlines() if line.startswith("| `")]
    return {cells[0].strip().strip("`"): [c.strip() for c in cells[1:]] for cells in rows}


@pytest.fixture(scope="module")
def hard_soft_sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sweep")
    result = sweep(tmp, "model=swwae_hard,swwae_soft")
    assert result.returncode == 0, result.stderr[-3000:]
    return tmp / "sweep"


@pytest.mark.slow
def test_a_sweep_ends_with_a_summary_table_and_plot(hard_soft_sweep):
    text = (hard_soft_sweep / "summary.md").read_text()
    rows = table_rows(text)
    assert set(rows) == {"model=swwae_hard", "model=swwae_soft"}
    header = next(line for line in text.splitlines() if line.startswith("| config"))
    for column in ("seeds", "failed", "test recon MSE", "test acc", "test error %", "train time (s)"):
        assert column in header
    for cells in rows.values():
        assert cells[:2] == ["1", "0"]  # one seed, none failed
        assert 0 < float(cells[2]) < 1 and 0 <= float(cells[3]) <= 1
    assert "2 jobs, 2 configs, 0 failed" in text
    assert "Checkpoints picked by val/recon_mse (min)." in text
    assert "Network: `(8)3c-2p-10fc`." in text  # the resolved model.arch of every job
    assert (hard_soft_sweep / "summary.png").stat().st_size > 5000
    for job in sorted(p for p in hard_soft_sweep.iterdir() if p.is_dir()):
        metrics = json.loads((job / "metrics.json").read_text())
        assert math.isfinite(metrics["metrics"]["test/recon_mse"])


@pytest.mark.slow
def test_compare_runs_rebuilds_the_summary_and_a_reconstruction_figure(hard_soft_sweep, tmp_path, capsys):
    from swwae.commands.compare import main

    checkpoints = hard_soft_sweep.parent / "checkpoints"
    assert (
        main(
            [
                str(hard_soft_sweep),
                "--recon",
                "--num-images",
                "4",
                "--out",
                f"{tmp_path}/new/",  # a folder to make: the slash says so
                "--checkpoints",
                str(checkpoints),
            ]
        )
        == 0
    )
    out = tmp_path / "new"
    assert (out / "summary.md").read_text() == (hard_soft_sweep / "summary.md").read_text()
    assert "model=swwae_soft" in capsys.readouterr().out
    assert (out / "summary.png").is_file()
    assert (out / "reconstructions.png").stat().st_size > 5000


@pytest.mark.parametrize(
    "out, path",
    [(None, "summary"), ("res/", "res/summary"), ("res", "res"), ("there", "there/summary"), ("res/x", "res/x")],
)
def test_an_output_named_with_a_slash_or_an_existing_folder_is_a_folder(tmp_path, monkeypatch, out, path):
    from swwae.commands.outputs import settled

    monkeypatch.chdir(tmp_path)
    (tmp_path / "there").mkdir()
    assert settled(out, "summary") == Path(path)


@pytest.mark.parametrize(
    "out, files",
    [("lr0.001", ["lr0.001.md", "lr0.001.png"]), ("v1.2", ["v1.2.md", "v1.2.png"]), ("s.md", ["s.md", "s.png"])],
)
def test_a_report_prefix_keeps_its_dots(tmp_path, capsys, monkeypatch, out, files):
    """--out lr0.001 names lr0.001.md, not lr0.md (where --out lr0.01's report went too); a name
    given with a report's suffix is its prefix."""
    from swwae.commands.compare import main

    fake_job(tmp_path / "sweep", 0, ["model=swwae_hard", "seed=0"], {"test/acc": 0.9})
    monkeypatch.chdir(tmp_path)
    assert main(["sweep", "--out", out]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == f"-> {files[0]}, {files[1]}"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["sweep", *files])


def test_compare_runs_on_a_missing_folder_is_one_error_line(tmp_path, capsys):
    from swwae.commands.compare import main

    assert main([str(tmp_path / "nothing")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"error: sweep folder {tmp_path / 'nothing'} does not exist"
    ]


@pytest.mark.slow
def test_a_failed_job_is_listed_and_the_sweep_exits_nonzero(tmp_path):
    result = sweep(tmp_path, "model=swwae_soft", "model.beta=1,-1", "run_name=soft_beta${model.beta}")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert errors[0].startswith("error: sweep job 1") and "model.beta=-1 is not allowed: must be > 0" in errors[0]
    assert errors[-1].startswith("error: 1 of 2 sweep jobs failed")

    text = (tmp_path / "sweep" / "summary.md").read_text()
    rows = table_rows(text)
    assert rows["model.beta=1"][:2] == ["1", "0"] and rows["model.beta=-1"][:2] == ["0", "1"]
    assert "Failed jobs:" in text and "model.beta=-1 is not allowed: must be > 0" in text
    failed = json.loads(next((tmp_path / "sweep").glob("1_*/metrics.json")).read_text())
    assert failed["status"] == "failed" and failed["model"] == "swwae_soft" and failed["seed"] == 0
    assert (tmp_path / "sweep" / "summary.png").is_file()


# summaries from job folders alone (no training)


def test_groups_take_mean_and_sample_std_over_seeds(tmp_path):
    for num, (model, seed) in enumerate(itertools.product(["swwae_hard", "upsample"], [0, 1, 2])):
        mse = {"swwae_hard": [0.01, 0.02, 0.03], "upsample": [0.05, 0.05, 0.05]}[model][seed]
        fake_job(
            tmp_path,
            num,
            ["data.batch_size=64", f"model={model}", f"seed={seed}"],
            {"test/recon_mse": mse, "test/acc": 0.9, "test/middle_mse_1": 0.2, "train_time_s": 10.0},
        )
    summary = write_summary(tmp_path)
    assert [g.label for g in summary.groups] == ["model=swwae_hard", "model=upsample"]
    assert summary.common == {"data.batch_size": "64"}
    mean, std = summary.groups[0].stat("test/recon_mse")
    assert mean == pytest.approx(0.02) and std == pytest.approx(0.01)  # sample std, n - 1
    assert summary.groups[1].stat("test/error_pct")[0] == pytest.approx(10.0)
    rows = table_rows((tmp_path / "summary.md").read_text())
    assert rows["model=swwae_hard"] == [
        "3",
        "0",
        "0.0200 ± 0.0100",
        "0.9000 ± 0.0000",
        "10.00 ± 0.00",
        "0.2000 ± 0.0000",
        "10.0 ± 0.0",
    ]
    assert (tmp_path / "summary.png").is_file()


def test_the_summary_says_which_metric_picked_each_configs_checkpoints_and_which_network(tmp_path):
    monitors = {
        "swwae_hard": {"metric": "val/acc", "mode": "max"},
        "classifier_only": {"metric": "val/acc", "mode": "max"},
        "upsample": {"metric": "val/recon_mse", "mode": "min"},
    }
    for num, model in enumerate(monitors):
        fake_job(
            tmp_path,
            num,
            [f"model={model}", "seed=0"],
            {"test/acc": 0.9},
            monitor=monitors[model],
            arch="(8)3c-2p" if model == "upsample" else "(8)3c-2p-10fc",
        )
    text = markdown(collect(tmp_path))
    assert (
        "Checkpoints picked by val/acc (max) for `model=swwae_hard`, `model=classifier_only`; "
        "val/recon_mse (min) for `model=upsample`."
    ) in text
    rows = table_rows(text)  # networks that differ get a column
    assert rows["model=upsample"][:3] == ["`(8)3c-2p`", "1", "0"]
    assert rows["model=swwae_hard"][0] == "`(8)3c-2p-10fc`" and "Network:" not in text


def test_the_summary_flags_arms_of_other_lengths_and_runs_reported_again(tmp_path):
    """A sweep asking for 1 epoch beside an arm that was a finished 20-epoch run (reported, not
    trained): the table says both, so no one compares the rows as equals."""
    fake_job(tmp_path, 0, ["model=swwae_hard", "seed=0"], {"test/acc": 0.97}, epochs=20, reported_again="from x")
    fake_job(tmp_path, 1, ["model=upsample", "seed=0"], {"test/acc": 0.80}, epochs=1)
    text = markdown(collect(tmp_path))
    assert (
        "Warning: the configs trained for different numbers of epochs: 1 for `model=upsample`; "
        "20 for `model=swwae_hard`"
    ) in text
    assert "Reported again (a run an earlier command had finished; nothing was trained by this sweep): `0_job`" in text
    fake_job(tmp_path, 2, ["model=avg", "seed=0"], {"test/acc": 0.80}, epochs=20)
    (tmp_path / "0_job" / "metrics.json").unlink()
    (tmp_path / "1_job" / "metrics.json").unlink()
    assert "Warning" not in markdown(collect(tmp_path)) and "Reported again" not in markdown(collect(tmp_path))


def test_the_summary_says_whose_decoder_was_never_trained(tmp_path):
    """classifier_only's test MSE is that of a decoder left as initialised: said under the table,
    as where-report and feature-study say it."""
    for num, (model, lambda_rec) in enumerate([("swwae_hard", 1.0), ("classifier_only", 0.0)]):
        folder = fake_job(tmp_path, num, [f"model={model}", "seed=0"], {"test/recon_mse": 0.01, "test/acc": 0.9})
        (folder / ".hydra" / "config.yaml").write_text(f"seed: 0\nmodel:\n  lambda_rec: {lambda_rec}\n")
    text = markdown(collect(tmp_path))
    assert (
        "Not trained: the decoder of `model=classifier_only` (`model.lambda_rec=0`): its MSE columns measure a "
        "decoder left as it was initialised."
    ) in text
    (tmp_path / "1_job" / ".hydra" / "config.yaml").write_text("seed: 0\nmodel:\n  lambda_rec: 0.5\n")
    assert "Not trained" not in markdown(collect(tmp_path))


def test_unfinished_jobs_count_as_failed_and_numeric_keys_become_an_axis(tmp_path):
    jobs = list(itertools.product(["swwae_hard", "upsample"], ["2", "4", "7"]))
    for num, (model, pool) in enumerate(jobs):
        finished = (model, pool) != ("upsample", "7")
        fake_job(
            tmp_path,
            num,
            [f"model={model}", f"model.pool_size={pool}", "seed=0"],
            {"test/recon_mse": 0.01 * int(pool)} if finished else None,
        )
    summary = collect(tmp_path)
    assert numeric_axis(summary) == "model.pool_size"
    assert [j.folder.name for j in summary.failed] == ["5_job"]
    text = markdown(summary)
    assert "did not finish" in text and "1 failed" in text
    write_summary(tmp_path)
    assert (tmp_path / "summary.png").is_file()


def test_sweeps_run_into_one_folder_read_as_one_table(tmp_path):
    """Two sweeps, each numbering its jobs from 0, into one folder (as the semi-supervised
    study is run): rows by model in first-seen order, then labels ascending as numbers."""
    first = [("swwae_hard", labels) for labels in ("100", "600", "1000")] + [("classifier_only", "100")]
    second = [("swwae_soft", "1000"), ("swwae_soft", "100"), ("classifier_only", "1000")]
    for sweep, jobs in (("a", first), ("b", second)):
        for num, (model, labels) in enumerate(jobs):
            folder = fake_job(
                tmp_path / sweep, num, [f"model={model}", f"data.num_labels={labels}", "seed=0"], {"test/acc": 0.9}
            )
            folder.rename(tmp_path / f"{num}_{model}_labels{labels}")
    rows = [(g.keys["model"], g.keys["data.num_labels"]) for g in collect(tmp_path).groups]
    assert rows == [
        ("swwae_hard", "100"),
        ("swwae_hard", "600"),
        ("swwae_hard", "1000"),
        ("swwae_soft", "100"),
        ("swwae_soft", "1000"),
        ("classifier_only", "100"),
        ("classifier_only", "1000"),
    ]


def test_published_figures_are_drawn_beside_ours_over_the_label_axis(tmp_path, capsys, monkeypatch):
    for num, (model, labels) in enumerate(itertools.product(["swwae_hard", "classifier_only"], ["100", "1000"])):
        fake_job(tmp_path, num, [f"model={model}", f"data.num_labels={labels}", "seed=0"], {"test/acc": 0.9})
    drawn = []
    import matplotlib.axes

    plot = matplotlib.axes.Axes.plot
    monkeypatch.setattr(
        matplotlib.axes.Axes, "plot", lambda ax, *a, **k: drawn.append(k.get("label")) or plot(ax, *a, **k)
    )
    from swwae.commands.compare import main

    monkeypatch.chdir(tmp_path)
    assert main([str(tmp_path), "--reference", "paper=100:11.7,1000:4.0"]) == 0
    assert drawn.count("paper") == 1  # on the error panel only
    assert (tmp_path / "summary.png").is_file()
    capsys.readouterr()
    assert main([str(tmp_path), "--reference", "paper=100-11.7"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()  # one line, not usage then error
    assert line.startswith("error: argument --reference: 'paper=100-11.7': expected LABEL=x:y")


def test_compare_writes_here_never_into_a_read_only_sweep(tmp_path, capsys, monkeypatch):
    """The summary goes to the current folder (or --out); the counts read as English, and a
    swept value that Hydra escaped in the job's overrides reads as typed."""
    from swwae.commands.compare import main

    fill = lambda f: fake_job(f / "sweep", 0, ["model.beta=$\\{model.lr\\}", "seed=0"], {"test/acc": 0.9})  # noqa: E731
    with read_only_folder(tmp_path / "theirs", fill=fill) as theirs:
        here = tmp_path / "here"
        here.mkdir()
        monkeypatch.chdir(here)
        assert main([str(theirs / "sweep")]) == 0
        text = (here / "summary.md").read_text()
        assert "1 job, 1 config, 0 failed." in text and "Common overrides: `model.beta=${model.lr}`" in text
        assert capsys.readouterr().out.splitlines()[-1] == "-> summary.md, summary.png"
        assert sorted(p.name for p in here.iterdir()) == ["summary.md", "summary.png"]
        assert main([str(theirs / "sweep"), "--out", str(theirs / "sweep")]) == 2
        assert capsys.readouterr().err.splitlines() == [
            f"error: cannot write the report summary in {theirs / 'sweep'}: "
            + read_only_reason()
            + "; set --out=... to write elsewhere"
        ]


def test_a_reference_with_no_numeric_axis_to_draw_on_is_one_line(tmp_path, capsys, monkeypatch):
    from swwae.commands.compare import main

    for num, model in enumerate(["swwae_hard", "upsample"]):
        fake_job(tmp_path / "sweep", num, [f"model={model}", "seed=0"], {"test/acc": 0.9})
    monkeypatch.chdir(tmp_path)
    assert main([str(tmp_path / "sweep"), "--reference", "paper=100:11.7"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: --reference draws published error % over a numeric swept override (data.num_labels, "
        f"model.pool_size...); {tmp_path / 'sweep'} sweeps none"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweep"]


def test_compare_on_a_folder_that_holds_no_sweep_is_one_line_and_writes_nothing(tmp_path, capsys, monkeypatch):
    """A folder of images, or a sweep's parent (multirun/): no job in it, one line, no empty summary."""
    from swwae.commands.compare import main
    from swwae.commands.where_report import main as where_report

    (tmp_path / "images" / "cats").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    named = []
    assert main(["images"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "error: no sweep job in images: a sweep's folder holds one folder per job, as swwae train -m writes it "
        "(multirun/<date>_<time>/)"  # here, outside the clone's folder, the installed command
    ]
    for sweep in ("2026-12-01_10-00-00", "2026-12-02_09-00-00"):  # a sweep's parent: the sweeps in it named
        fake_job(tmp_path / "multirun" / sweep, 0, ["seed=0"], {"test/acc": 0.9})
        (tmp_path / "multirun" / sweep / "multirun.yaml").write_text("hydra: {}\n")  # Hydra's mark of a sweep
        assert main(["multirun"]) == 2
        named.append(capsys.readouterr().err.splitlines()[-1].split("(multirun/<date>_<time>/); ")[1])
    assert named == [
        "it holds one sweep, multirun/2026-12-01_10-00-00",
        "it holds 2 sweeps, the newest multirun/2026-12-02_09-00-00",
    ]
    assert where_report(["multirun"]) == 2  # the reports alike
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: no finished job in multirun; it holds 2 sweeps, the newest multirun/2026-12-02_09-00-00"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["images", "multirun"]


def test_a_job_folder_given_for_its_sweep_names_the_sweep(tmp_path, capsys, monkeypatch):
    """The error line said only that a sweep's folder holds one folder per job."""
    from swwae.commands.compare import main
    from swwae.commands.where_report import main as where_report

    job = fake_job(tmp_path / "sweep", 0, ["seed=0"], {"test/acc": 0.9})
    monkeypatch.chdir(tmp_path)
    assert main(["sweep/0_job"]) == 2
    assert (
        capsys.readouterr().err.splitlines()[-1].endswith("(multirun/<date>_<time>/); it is one job of the sweep sweep")
    )
    monkeypatch.chdir(job)  # the job's own folder, as ./
    assert where_report(["."]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"error: no finished job in .; it is one job of the sweep {job.parent}"
    ]
    assert sorted(p.name for p in job.iterdir()) == [".hydra", "metrics.json"]  # nothing written


# presets

register_resolvers()  # composed here as the job composes them


def sweep_params(preset: str) -> dict[str, list[str]]:
    import yaml

    params = yaml.safe_load((CONFIG_DIR / "experiment" / f"{preset}.yaml").read_text())["hydra"]["sweeper"]["params"]
    return {key: str(values).split(",") for key, values in params.items()}


@pytest.mark.parametrize(
    "preset",
    ["hard_vs_soft", "semi_supervised", "paper/mnist_pool_size", "paper/mnist_semi", "feature_study", "semi_map"],
)
@pytest.mark.slow
def test_sweep_presets_give_every_job_its_own_run_name(preset):
    params = sweep_params(preset)
    assert len(params.pop("seed")) == 3  # every preset runs over seeds
    names = set()
    try:
        for values in itertools.product(*params.values()):
            overrides = [f"experiment={preset}", *(f"{k}={v}" for k, v in zip(params, values))]
            GlobalHydra.instance().clear()
            with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
                cfg = compose("train", overrides=overrides, return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            names.add(cfg.run_name)
            assert "seed0" in cfg.run_name
    finally:
        GlobalHydra.instance().clear()
    assert len(names) == math.prod(len(v) for v in params.values())


@pytest.mark.slow
def test_study_presets_never_share_a_checkpoint_folder_with_another_preset():
    def names(preset):
        params = sweep_params(preset)
        params.pop("seed")  # every run name ends in _seed<seed> (the test above): seed 0 stands for all
        found = set()
        for values in itertools.product(*params.values()):
            overrides = [f"experiment={preset}", *(f"{k}={v}" for k, v in zip(params, values)), "seed=0"]
            cfg = compose("train", overrides=overrides, return_hydra_config=True)
            HydraConfig.instance().set_config(cfg)
            found.add(cfg.run_name)
        return found

    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(CONFIG_MODULE, version_base="1.3"):  # one Hydra for every compose
            study, semi = names("feature_study"), names("semi_map")
            others = names("hard_vs_soft") | names("semi_supervised")
    finally:
        GlobalHydra.instance().clear()
    assert not study & others and not semi & others and not study & semi


@pytest.mark.slow
def test_hard_vs_soft_sweeps_beta_for_soft_only():
    arms = sweep_params("hard_vs_soft")["+experiment/hard_vs_soft@_global_"]
    modes = []
    try:
        for arm in arms:
            GlobalHydra.instance().clear()
            with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
                cfg = compose(
                    "train", overrides=["experiment=hard_vs_soft", f"+experiment/hard_vs_soft@_global_={arm}"]
                )
            modes.append((cfg.model.pool_mode, cfg.model.beta))
    finally:
        GlobalHydra.instance().clear()
    assert sorted(m for m, _ in modes) == sorted(
        ["hard", "soft", "soft", "soft", "upsample", "avg", "strided", "wavelet"]
    )
    assert sorted(b for m, b in modes if m == "soft") == [1.0, 10.0, 100.0]


# each sweep its own folder, each job its own run (the callbacks run in-process on a composed multirun)


@pytest.fixture
def multirun(monkeypatch, tmp_path):
    """``multirun(overrides)``: the sweep's config as ``python train.py -m <overrides>`` composes it
    (launched in ``tmp_path``), before its callbacks run; Hydra's global state cleared after."""
    from hydra.types import RunMode

    from swwae.training.runs import sweep_claim

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sweep_claim, "started", [])
    GlobalHydra.instance().clear()
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        yield lambda overrides: GlobalHydra.instance().hydra.compose_config(
            "train", ["hydra.mode=MULTIRUN", *overrides], run_mode=RunMode.MULTIRUN
        )
    GlobalHydra.instance().clear()


def job_names(config) -> dict[str, tuple[str, str]]:
    """Each job of a grid sweep (after its callbacks): its overrides -> (run name, override_dirname)."""
    from omegaconf import OmegaConf

    from swwae.training.runs.sweep_claim import job_overrides

    task = OmegaConf.to_container(config.hydra.overrides.task)
    names = {}
    for overrides in job_overrides({}, task):
        job = GlobalHydra.instance().config_loader().load_sweep_config(config, overrides)
        HydraConfig.instance().set_config(job)
        names[" ".join(overrides)] = (job.run_name, job.hydra.job.override_dirname)
    return names


def test_a_sweep_job_is_named_by_the_run_settings_swept(multirun, tmp_path):
    from swwae.training.runs.sweep_claim import DistinctRunFolders, started

    config = multirun(["model.lr=1e-3,1e-4", "seed=0,1", "model.widths=[4]", "trainer.max_epochs=2", "debug=quick"])
    DistinctRunFolders().on_multirun_start(config=config)  # no two jobs share a run folder: not refused
    fixed = "model.widths=[4] trainer.max_epochs=2 debug=quick"
    assert job_names(config) == {
        f"model.lr=0.001 seed=0 {fixed}": ("swwae_hard_mnist_sample_lr0.001_seed0", "model.lr=0.001,seed=0"),
        f"model.lr=0.001 seed=1 {fixed}": ("swwae_hard_mnist_sample_lr0.001_seed1", "model.lr=0.001,seed=1"),
        f"model.lr=0.0001 seed=0 {fixed}": ("swwae_hard_mnist_sample_lr0.0001_seed0", "model.lr=0.0001,seed=0"),
        f"model.lr=0.0001 seed=1 {fixed}": ("swwae_hard_mnist_sample_lr0.0001_seed1", "model.lr=0.0001,seed=1"),
    }
    # named once the sweep may go; debug=quick's under a root of its own
    assert started == [tmp_path / "multirun" / "quick" / config.hydra.sweep.dir.split("/")[-1]]


def test_a_sweep_names_labels_it_sweeps_as_a_swept_key_and_labels_it_fixes_as_a_single_run(multirun):
    """Swept: named in the swept part, as any key (and as before); fixed for every job: the
    single run's ``_labels100``, so that the jobs never meet the fully supervised runs."""
    from swwae.training.runs.sweep_claim import DistinctRunFolders

    names = set()
    for overrides in (["data.num_labels=100,600", "debug=quick"], ["seed=0,1", "data.num_labels=100", "debug=quick"]):
        config = multirun(overrides)
        DistinctRunFolders().on_multirun_start(config=config)  # it tells the jobs what the sweep does not sweep
        names |= {name for name, _ in job_names(config).values()}
    assert names == {
        "swwae_hard_mnist_sample_num_labels100_seed0",
        "swwae_hard_mnist_sample_num_labels600_seed0",
        "swwae_hard_mnist_sample_labels100_seed0",
        "swwae_hard_mnist_sample_labels100_seed1",
    }


def test_a_single_run_keeps_its_name_whatever_its_overrides(tmp_path):
    from helpers.config import compose_config

    assert compose_config(tmp_path, ["model.lr=1e-3", "model.widths=[4]"]).run_name == "swwae_hard_mnist_sample_seed0"


@pytest.mark.parametrize(
    ("overrides", "unnamed", "tag"),
    [
        (["model.lr=0.001", "seed=0"], [], "_lr0.001"),
        (["model.lr=0.001", "model.beta=10"], ["model.beta"], "_lr0.001"),  # the same in every job: not named
        (["model=swwae_soft", "data=mnist", "model.arch='(8)3c-2p'", "seed=1"], [], ""),  # in the name already
        (["paths.log_dir=/x", "logger=csv", "data.root=/d", "trainer.log_every_n_steps=1"], [], ""),  # not the identity
        (["trainer.max_epochs=5", "trainer.devices=2"], [], "_devices2_max_epochs5"),  # what the run reports
        (["data.num_labels=100", "trainer.precision=bf16-mixed"], [], "_num_labels100_precisionbf16-mixed"),
        (["model.widths=[8, 16]", "+model.dropout=0.1", "~model.beta"], [], "_dropout0.1_widths8-16"),
        (["optimized_metric=val/acc"], [], "_optimized_metricval-acc"),
        (["trainer.max_steps=-1"], [], "_max_steps-1"),  # not max_steps1, the name of max_steps=1
    ],
)
def test_the_swept_part_of_a_run_name(overrides, unnamed, tag):
    from swwae.training.runs.identity import check_run_name, sweep_tag

    assert sweep_tag("MULTIRUN", overrides, unnamed) == tag
    assert sweep_tag("RUN", overrides, unnamed) == sweep_tag(None, overrides, unnamed) == ""
    check_run_name(f"swwae_hard_mnist_sample{tag}_seed0")


def test_a_long_swept_part_is_cut_and_keeps_jobs_apart():
    from swwae.training.runs.identity import check_run_name, sweep_tag

    tags = {sweep_tag("MULTIRUN", [f"model.lr={'1' * 150}{last}"]) for last in "23"}
    assert len(tags) == 2 and all(len(tag) == 100 for tag in tags)
    check_run_name(f"swwae_hard_mnist_sample{tags.pop()}_seed0")


def test_the_keys_a_sweep_does_not_sweep():
    from swwae.training.runs.sweep_claim import unswept_keys

    params = {"seed": "0,1,2", "model.lr": "interval(1e-4, 1e-2)"}
    task = ["seed=0", "model.beta=1,10", "debug=quick", "+trainer.gradient_clip_val=0.5"]
    assert unswept_keys(params, task) == ["debug", "seed", "trainer.gradient_clip_val"]  # the command line fixed seed


def test_an_explicit_run_name_two_jobs_share_is_still_refused_in_one_line(multirun, tmp_path, capsys):
    from swwae.training.runs.sweep_claim import DistinctRunFolders

    with pytest.raises(SystemExit) as exit_:
        DistinctRunFolders().on_multirun_start(config=multirun(["model.lr=1e-3,1e-4", "run_name=mine"]))
    assert exit_.value.code == 2
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("error: sweep jobs 0 and 1 would both run in checkpoints/mine (model.lr=0.0001 is not")
    assert list(tmp_path.iterdir()) == []  # nothing written, not even the sweep folder


@pytest.mark.extra("optuna")
@pytest.mark.parametrize(
    ("override", "line"),
    [
        ("hydra.sweeper.n_trials=0", "hydra.sweeper.n_trials=0: an Optuna search runs at least one trial"),
        ("hydra.sweeper.direction=sideways", "hydra.sweeper.direction=sideways: an Optuna search's direction is"),
        ("optimized_mode=sideways", "optimized_mode must be min or max, got 'sideways' (the Optuna search's"),
    ],
)
def test_a_search_that_cannot_run_is_refused_before_anything_is_written(multirun, tmp_path, capsys, override, line):
    from swwae.training.runs.sweep_claim import DistinctRunFolders

    with pytest.raises(SystemExit) as exit_:
        DistinctRunFolders().on_multirun_start(config=multirun(["hparams_search=swwae_optuna", override]))
    assert exit_.value.code == 2
    [printed] = capsys.readouterr().err.splitlines()
    assert printed.startswith(f"error: {line}")
    assert list(tmp_path.iterdir()) == []


def test_sweeps_started_in_the_same_second_get_folders_of_their_own(multirun, tmp_path, monkeypatch):
    from omegaconf import OmegaConf

    from swwae.training.runs.sweep_claim import new_folder

    assert new_folder(str(tmp_path / "a" / "t")) == str(tmp_path / "a" / "t")
    assert new_folder(str(tmp_path / "a" / "t")) == str(tmp_path / "a" / "t_2")  # created by the first: fails over
    assert sorted(p.name for p in (tmp_path / "a").iterdir()) == ["t", "t_2"]

    OmegaConf.register_new_resolver("now", lambda pattern: "2026-01-01_12-00-00", replace=True)  # one second
    try:
        folders = [multirun(["seed=0,1"]).hydra.sweep.dir for _ in range(3)]
    finally:
        from hydra.core.utils import setup_globals

        setup_globals()  # Hydra's own now again
    assert folders == [f"multirun/2026-01-01_12-00-00{suffix}" for suffix in ("", "_2", "_3")]
    given = multirun(["seed=0,1", f"hydra.sweep.dir={tmp_path / 'given'}"]).hydra.sweep.dir
    assert given == str(tmp_path / "given") and not (tmp_path / "given").exists()  # as given; the sweep makes it


def test_a_search_whose_every_trial_failed_still_writes_its_summary(tmp_path, monkeypatch, capsys):
    from swwae.commands.train import after_the_sweeper_stopped
    from swwae.training.runs import sweep_claim

    monkeypatch.setattr(sweep_claim, "started", [tmp_path])
    failed = {"status": "failed", "error": "non-finite loss in epoch 1"}
    for num in (0, 1):
        fake_job(tmp_path, num, [f"model.lr={num + 1}e6", "seed=0"], {}, **failed)
    with pytest.raises(SystemExit) as exit_:
        after_the_sweeper_stopped()  # Optuna's sweeper stopped: no trial finished, no best trial
    assert exit_.value.code == 1
    assert "2 jobs, 2 configs, 2 failed" in (tmp_path / "summary.md").read_text()
    assert capsys.readouterr().err.startswith("error: 2 of 2 sweep jobs failed (0_job, 1_job)")

    (tmp_path / "summary.md").unlink()
    fake_job(tmp_path, 2, ["model.lr=1e-3", "seed=0"], {"test/recon_mse": 0.02})
    after_the_sweeper_stopped()  # a job finished: the sweeper's own error is the news, raised by the caller
    assert not (tmp_path / "summary.md").exists()


@pytest.mark.slow
def test_a_sweep_over_a_setting_runs_each_job_under_its_own_name(tmp_path):
    result = sweep(tmp_path, "model.lr=1e-3,1e-4")
    assert result.returncode == 0, result.stderr[-3000:]
    names = ["swwae_hard_mnist_sample_lr0.001_seed0", "swwae_hard_mnist_sample_lr0.0001_seed0"]
    jobs = sorted(p.name for p in (tmp_path / "sweep").glob("[01]_*"))
    assert jobs == [f"{number}_{name}" for number, name in enumerate(names)]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.is_dir()) == sorted(names)
    assert "2 jobs, 2 configs, 0 failed" in (tmp_path / "sweep" / "summary.md").read_text()
