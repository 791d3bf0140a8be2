"""Feature probes (swwae/probe.py, scripts/probe.py, the val/knn_acc callback): the linear
probe is scikit-learn's, k-NN votes as documented, invariance measures what it says, the
labelled subsets are the same for every model, and the script reports in one table or one
error line."""

from __future__ import annotations

import json
import sys

import pytest
import torch
import torch.nn.functional as F
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from helpers.cli import run_cli, train_here
from helpers.config import ROOT, SAMPLE_DATA
from helpers.extras import hide_package
from swwae.commands.probe import main as probe_main
from swwae.model import SWWAE
from swwae.probe import (
    features,
    invariance,
    knn_probe,
    labelled_subset,
    linear_probe,
    probe_features,
    random_like,
    shift,
)
from swwae.training.module import SWWAEModule
from swwae.training.probing import encoder_key

DATA = SAMPLE_DATA

# helpers


def blobs(n=300, dim=20, classes=3, seed=0, spread=0.5):
    """Gaussian clusters around well separated centres: linearly separable up to noise."""
    gen = torch.Generator().manual_seed(seed)
    centres = 4 * torch.randn(classes, dim, generator=gen)
    y = torch.arange(n) % classes
    return centres[y] + spread * torch.randn(n, dim, generator=gen), y


def tiny_trained_net(steps=30) -> SWWAE:
    """A two-stage SWWAE trained for a few steps to reconstruct sample digits."""
    from swwae.training.data import MNISTSampleDataModule

    data = MNISTSampleDataModule()
    data.setup()
    torch.manual_seed(0)
    net = SWWAE(widths=(4, 8), num_classes=None)
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)
    x = data.images("train", 256)
    for _ in range(steps):
        loss = F.mse_loss(net(x).recon, x)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return net.eval()


def checkpoint_of(net: SWWAE, path):
    """The net inside a checkpoint as train.py writes one (what swwae.load reads)."""
    module = SWWAEModule(widths=[4, 8], lambda_nll=0.0)
    module.net.load_state_dict(net.state_dict())
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": dict(module.hparams),
            "swwae_config": {"data": DATA, "model": {"pool_mode": "hard"}, "run_name": "tiny"},
        },
        path,
    )
    return path


@pytest.fixture(scope="module")
def tiny_net():
    return tiny_trained_net()


# the probes


def test_the_linear_probe_beats_chance_and_equals_scikit_learn_called_directly():
    (x, y), (vx, vy), (tx, ty) = blobs(seed=0), blobs(seed=0, n=90), blobs(seed=0, n=150)
    result = linear_probe(x, y, vx, vy, tx, ty, grid=(1e-3, 1e-2, 1.0))
    assert result.acc > 0.9 > 1 / 3  # separable: far above chance
    scaler = StandardScaler().fit(x.numpy())
    direct = LogisticRegression(C=result.C, max_iter=1000).fit(scaler.transform(x.numpy()), y.numpy())
    assert result.acc == float((direct.predict(scaler.transform(tx.numpy())) == ty.numpy()).mean())
    assert result.val_acc == float((direct.predict(scaler.transform(vx.numpy())) == vy.numpy()).mean())


def test_the_linear_probe_picks_its_regularisation_on_validation_only():
    (x, y), (vx, vy) = blobs(seed=1, spread=3.0), blobs(seed=1, n=120, spread=3.0)
    tx, ty = blobs(seed=1, n=60, spread=3.0)
    picked = linear_probe(x, y, vx, vy, tx, ty).C
    assert picked == linear_probe(x, y, vx, vy, tx, 1 - ty.clamp(max=1)).C  # the test labels play no part
    scaler = StandardScaler().fit(x.numpy())
    val_acc = {
        C: (
            LogisticRegression(C=C, max_iter=1000)
            .fit(scaler.transform(x.numpy()), y.numpy())
            .predict(scaler.transform(vx.numpy()))
            == vy.numpy()
        ).mean()
        for C in (1e-4, 1e-3, 1e-2, 0.1, 1, 10)
    }
    assert val_acc[picked] == max(val_acc.values())


def test_knn_with_one_neighbour_on_its_own_training_set_is_perfect():
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(300, 20, generator=gen), torch.randint(0, 3, (300,), generator=gen)  # labels without structure
    assert knn_probe(x, y, x, y, k=1) == 1.0
    assert knn_probe(x, y, x, y, k=20) == 1.0  # distance weighting: an exact match decides alone
    assert knn_probe(x[:150], y[:150], x[150:], y[150:], k=20) < 0.5  # held out: about chance


def test_knn_votes_by_cosine_similarity():
    train = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    test = torch.tensor([[10.0, 1.0], [0.1, 3.0]])  # far in euclidean terms, close in angle
    assert knn_probe(train, torch.tensor([0, 1]), test, torch.tensor([0, 1]), k=1) == 1.0


def test_the_same_seed_draws_the_same_class_balanced_subsets():
    y = torch.arange(1000) % 10
    a, b = labelled_subset(y, 100, seed=3), labelled_subset(y, 100, seed=3)
    assert torch.equal(a, b) and len(set(a.tolist())) == 100
    assert torch.bincount(y[a], minlength=10).tolist() == [10] * 10
    assert not torch.equal(torch.sort(a).values, torch.sort(labelled_subset(y, 100, seed=4)).values)
    assert torch.equal(labelled_subset(y, None), torch.arange(1000))  # all


@pytest.mark.slow
def test_invariance_is_zero_for_a_shift_of_zero_and_for_a_constant_image(tiny_net):
    digits = torch.rand(4, 1, 28, 28, generator=torch.Generator().manual_seed(0))
    for code in invariance(tiny_net, digits, shifts=(0,)).values():
        assert code[0] == 0.0
    constant = torch.full((2, 1, 28, 28), 0.7)
    for code in invariance(tiny_net, constant, shifts=(1, 2, 3), fill="wrap").values():
        assert all(abs(v) < 1e-6 for v in code.values())  # a circular shift leaves it as it was


def test_invariance_with_zero_fill_counts_what_leaves_the_frame():
    ones = torch.ones(3, 1, 28, 28)
    pixels = invariance(tiny_trained_net(steps=0), ones, shifts=(1, 2))["pixels"]
    for s, value in pixels.items():  # a shift of s px zeroes s of the 28 rows (or columns)
        assert value == pytest.approx((s / 28) ** 0.5)
    assert torch.equal(shift(torch.arange(4.0).view(1, 2, 2), 1, 0), torch.tensor([[[0.0, 0.0], [0.0, 1.0]]]))


def test_invariance_reports_every_stage_and_grows_with_the_shift(tiny_net):
    from swwae.training.data import MNISTSampleDataModule

    data = MNISTSampleDataModule()
    data.setup()
    result = invariance(tiny_net, data.test_x[:64], shifts=(1, 2, 3))
    assert list(result) == ["pixels", "stage_1", "stage_2"]
    for code in result.values():
        assert 0 < code[1] < code[2] < code[3]
    assert result["stage_2"][1] < result["pixels"][1]  # pooling: the top what moves less than the image


def test_features_are_the_top_what_as_the_classifier_reads_it(tiny_net):
    x = torch.rand(5, 1, 28, 28)
    top = features(tiny_net, x)
    assert torch.equal(top, tiny_net.encode(x)[0][-1].flatten(1))
    assert features(tiny_net, x, stages="all", pooled=2).shape == (5, (4 + 8) * 4)
    assert torch.equal(
        features(tiny_net, (x * 255).round().to(torch.uint8)), features(tiny_net, (x * 255).round() / 255)
    )  # uint8 images read as [0, 1]


def test_random_weights_keep_the_architecture_and_leave_the_global_generator_alone(tiny_net):
    torch.manual_seed(5)
    expected = torch.rand(1)
    torch.manual_seed(5)
    twin = random_like(tiny_net, seed=0)
    assert torch.equal(torch.rand(1), expected)
    assert tiny_net.state_dict().keys() == twin.state_dict().keys()
    conv = "encoders.0.0.weight"
    assert not torch.equal(twin.state_dict()[conv], tiny_net.state_dict()[conv])
    assert torch.equal(random_like(tiny_net, seed=0).state_dict()[conv], twin.state_dict()[conv])
    fresh = SWWAE(widths=(4, 8), num_classes=None).state_dict()[conv]
    assert twin.state_dict()[conv].abs().max() <= fresh.abs().max() * 1.5  # the default init's scale


@pytest.mark.parametrize("setting", [{"batch_norm": True}, {"nonlinearity": "tanh"}, {"pool_stride": 1}])
def test_networks_that_compute_another_encoder_get_their_own_random_weights_control(setting):
    # one key, one control: a batch-norm (or tanh, or overlapping-pool) network shared a plain one's
    plain = SWWAE(widths=(4, 8), num_classes=None)
    other = SWWAE(widths=(4, 8), num_classes=None, **setting)
    assert plain.arch == other.arch and encoder_key(plain) != encoder_key(other)
    assert encoder_key(plain) == encoder_key(SWWAE(widths=(4, 8), num_classes=10, dropout=0.5))  # the same encoder
    assert encoder_key(SWWAE(widths=(4, 8), pool_mode="soft", beta=1.0)) != encoder_key(
        SWWAE(widths=(4, 8), pool_mode="soft", beta=10.0)
    )


def test_probe_features_uses_the_given_subsets_for_every_probe():
    (x, y), (vx, vy), (tx, ty) = blobs(seed=2), blobs(seed=2, n=60), blobs(seed=2, n=60)
    subsets = {"30": labelled_subset(y, 30, seed=0, num_classes=3), "all": labelled_subset(y, None)}
    result = probe_features((x, y), (vx, vy), (tx, ty), subsets, k=5)
    assert set(result) == {"linear", "linear_C", "knn"} and set(result["knn"]) == {"30", "all"}
    idx = subsets["30"]
    assert result["knn"]["30"] == knn_probe(x[idx], y[idx], tx, ty, k=5)


# the script


@pytest.mark.slow
def test_the_script_prints_one_table_with_the_controls(tmp_path, capsys, tiny_net):
    ckpt = checkpoint_of(tiny_net, tmp_path / "best.ckpt")
    out = tmp_path / "probe.json"
    assert probe_main([str(ckpt), "--labels", "50", "200", "--shifts", "2", "--k", "60", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "k-NN k=60 (N where N is smaller);" in text  # 50 labels vote with all 50
    rows = [line.split()[0] for line in text.splitlines()]
    assert "pixels" in rows and "random" in rows and "tiny" in rows
    result = json.loads(out.read_text())
    names = [row["name"] for row in result["rows"]]
    assert names[0] == "pixels" and names[1].startswith("random weights") and names[2] == "tiny"
    for row in result["rows"]:
        assert set(row["linear"]) == {"50", "200"} and all(0.1 < v <= 1 for v in row["knn"].values())
    assert result["rows"][2]["invariance"]["stage_2"]["2"] > 0


@pytest.mark.slow
def test_two_checkpoints_are_probed_on_the_same_labelled_images(tmp_path, capsys, tiny_net):
    a, b = checkpoint_of(tiny_net, tmp_path / "a.ckpt"), checkpoint_of(tiny_net, tmp_path / "b.ckpt")
    out = tmp_path / "probe.json"
    assert probe_main([str(a), str(b), "--labels", "40", "--no-controls", "--json", str(out)]) == 0
    assert "k-NN k=20;" in capsys.readouterr().out
    first, second = json.loads(out.read_text())["rows"]
    assert first["linear"] == second["linear"] and first["knn"] == second["knn"]  # same net, same subsets


@pytest.mark.parametrize(
    "argv, message",
    [
        (["missing.ckpt"], "error: checkpoint missing.ckpt does not exist"),
        (["x.ckpt", "--labels", "ten"], "error: --labels takes positive numbers or 'all', got 'ten'"),
        # checked before any work (they were a traceback at the end), and never onto a checkpoint
        (["x.ckpt", "--json", "x.ckpt"], "error: --json=x.ckpt: name a .json file (or a folder for probes.json)"),
        (
            ["x.ckpt", "--json", "x.ckpt/p.json"],
            "error: cannot write the results p.json in x.ckpt: x.ckpt is a file, not a folder; "
            "set --json=... to write elsewhere",
        ),
    ],
)
def test_bad_input_is_one_error_line(tmp_path, capsys, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "x.ckpt").write_bytes(b"")
    assert probe_main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [message] or (len(err) == 1 and err[0].startswith("error: checkpoint x.ckpt"))
    assert (tmp_path / "x.ckpt").read_bytes() == b""


@pytest.mark.slow
def test_the_script_runs_as_a_user_runs_it(tmp_path, tiny_net):
    ckpt = checkpoint_of(tiny_net, tmp_path / "best.ckpt")
    result = run_cli(ROOT / "scripts" / "probe.py", ckpt, "--labels", "100", cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-2000:]
    assert "linear 100" in result.stdout and "k-NN 100" in result.stdout and "stage_2" in result.stdout
    missing = run_cli(ROOT / "scripts" / "probe.py", tmp_path / "nope.ckpt", cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines() == [f"error: checkpoint {tmp_path / 'nope.ckpt'} does not exist"]


# the training-time metric


@pytest.mark.slow
def test_val_knn_acc_is_logged_when_asked_and_not_by_default_where_scikit_learn_is_not_imported(tmp_path, monkeypatch):
    result = train_here(tmp_path, "callbacks.knn_accuracy.every_n_epochs=1", "model.lambda_nll=0", name="on")
    assert result.returncode == 0, result.stderr[-2000:]
    metrics = json.loads((tmp_path / "outputs" / "on" / "metrics.json").read_text())["metrics"]
    assert 0.1 < metrics["val/knn_acc"] <= 1.0
    # a run with the monitor off runs as if scikit-learn were not installed: it never imports it
    hide_package(monkeypatch, "sklearn")
    for name in ("swwae.probe", "swwae.training.knn_monitor"):  # imported above: imported again if asked for
        parent, _, child = name.rpartition(".")
        monkeypatch.delitem(sys.modules, name)
        monkeypatch.delattr(sys.modules[parent], child)  # Hydra finds a module as its package's attribute first
    result = train_here(tmp_path, "run_name=off", name="off")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "val/knn_acc" not in json.loads((tmp_path / "outputs" / "off" / "metrics.json").read_text())["metrics"]


def test_val_knn_acc_picks_best_ckpt_and_is_measured_again_for_a_finished_run(make_config, tmp_path):
    """optimized_metric=val/knn_acc, measured at every validation: best.ckpt by the highest, the
    value returned and reported; a finished run whose metrics.json is gone measures it again; its
    vote (k) is the run's: another k is another run."""
    from swwae.checkpoint_file import read_checkpoint
    from swwae.errors import CheckpointError
    from swwae.training.run import train

    knn = ["optimized_metric=val/knn_acc", "callbacks.knn_accuracy.every_n_epochs=1", "model.widths=[4]"]
    short = ["trainer.limit_train_batches=1", "trainer.limit_val_batches=1", "++trainer.limit_test_batches=1"]
    value = train(make_config(*knn, *short))
    summary = json.loads((tmp_path / "output" / "metrics.json").read_text())
    assert summary["monitor"] == {"metric": "val/knn_acc", "mode": "max"}
    assert value == summary["metrics"]["val/knn_acc"] and 0 < value <= 1
    best = read_checkpoint(tmp_path / "checkpoints" / "swwae_hard_mnist_sample_seed0" / "best.ckpt")
    [state] = [v for k, v in best["callbacks"].items() if "'val/knn_acc'" in k]
    assert float(state["best_model_score"]) == pytest.approx(value)
    (tmp_path / "output" / "metrics.json").unlink()
    assert train(make_config(*knn, *short)) == pytest.approx(value)  # evaluated again, the k-NN vote with it
    again = json.loads((tmp_path / "output" / "metrics.json").read_text())
    assert again["reported_again"] == "evaluated again from best.ckpt"
    with pytest.raises(CheckpointError, match=r"holds another run \(callbacks.knn_accuracy.k: 20 -> 5\)"):
        train(make_config(*knn, *short, "callbacks.knn_accuracy.k=5"))


@pytest.mark.parametrize("option", [["--k", "0"], ["--k", "-3"], ["--seed", "-1"], ["--shifts", "2", "-1"]])
def test_feature_study_settings_a_probe_cannot_take_are_one_line_before_any_checkpoint(tmp_path, capsys, option):
    """As swwae probe: not a scikit-learn traceback once every model is loaded."""
    from swwae.commands.feature_study import main as feature_study_main

    assert feature_study_main([str(tmp_path / "no sweep"), *option]) == 2
    out, err = capsys.readouterr()
    assert err.splitlines() == ["error: --k must be >= 1, --seed and --shifts >= 0"] and out == ""
