"""Model cards (``swwae.card``): every model folder carries a README.md whose YAML metadata the
Hub reads (library, tags, license, data set, the run's test metrics), the network in the paper's
notation and how to load it; the text is the same with and without huggingface_hub."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
import yaml
from hydra.core.global_hydra import GlobalHydra

import swwae
from helpers.config import compose_config
from helpers.hub import fake_hub
from swwae.card import NO_METRICS, RunFacts, RunMetrics, model_card, run_metrics
from swwae.errors import ConfigError
from swwae.model import SWWAE
from swwae.training.run import train

RUN = "swwae_hard_mnist_sample_seed0"

# helpers


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """The folder of a finished quick run: its checkpoints and its metrics.json."""
    tmp = tmp_path_factory.mktemp("run")
    train(compose_config(tmp, ["model.widths=[4,8]"]))
    GlobalHydra.instance().clear()
    return tmp


def card_of(folder: Path) -> tuple[dict, str]:
    """(metadata, body) of the card in ``folder``."""
    text = (folder / "README.md").read_text()
    assert text.startswith("---\n")
    _, block, body = text.split("---\n", 2)
    return yaml.safe_load(block), body


def reported(metadata: dict) -> dict[str, float]:
    [entry] = metadata["model-index"]
    return {m["type"]: m["value"] for result in entry["results"] for m in result["metrics"]}


RUN_CONFIG = {"run_name": "r", "data": {"_target_": "swwae.training.data.CIFAR10DataModule"}}


# the card of an exported run


@pytest.mark.slow
def test_export_writes_a_card_with_the_runs_test_metrics(run, tmp_path):
    from swwae.commands.export import main

    best = run / "checkpoints" / RUN / "best.ckpt"
    assert main([str(best), "--to", str(tmp_path / "m")]) == 0
    metadata, body = card_of(tmp_path / "m")
    assert metadata["library_name"] == "swwae" and metadata["license"] == "mit"
    assert "swwae" in metadata["tags"] and metadata["datasets"] == ["mnist"]
    measured = json.loads((run / "output" / "metrics.json").read_text())["metrics"]
    assert reported(metadata) == {
        "accuracy": round(measured["test/acc"], 6),
        "mse": round(measured["test/recon_mse"], 6),
    }
    assert metadata["model-index"][0]["name"] == RUN and set(metadata["metrics"]) == {"accuracy", "mse"}
    assert "`(4)3c-2p-(8)3c-2p-10fc` in the paper's notation" in body and 'swwae.load("path/to/this/folder")' in body
    assert f"{measured['test/acc']:.4f}" in body and "from_pretrained" in body

    again = swwae.load(tmp_path / "m")  # the card is beside the weights, not in the way
    x = torch.rand(2, 1, 28, 28)
    assert torch.equal(again(x).recon, swwae.load(best)(x).recon)


@pytest.mark.slow
def test_a_card_reports_the_runs_metrics_only_for_the_weights_they_were_measured_on(run, tmp_path):
    """metrics.json reports best.ckpt: a network of last.ckpt holding the same weights (one
    epoch) gets its metrics, through the Python API as through export; a network trained on
    since gets none, nor does best.ckpt's network once best.ckpt was written again."""
    from swwae.commands.export import main

    best, last = (run / "checkpoints" / RUN / name for name in ("best.ckpt", "last.ckpt"))
    measured = json.loads((run / "output" / "metrics.json").read_text())["metrics"]
    expected = {"accuracy": round(measured["test/acc"], 6), "mse": round(measured["test/recon_mse"], 6)}
    swwae.save_pretrained(swwae.load(last), tmp_path / "last")
    assert reported(card_of(tmp_path / "last")[0]) == expected
    assert main([str(tmp_path / "last"), "--to", str(tmp_path / "again")]) == 0  # a model folder exported again
    assert reported(card_of(tmp_path / "again")[0]) == expected

    changed = swwae.load(best)
    with torch.no_grad():
        changed.classifier[-1].bias[0] += 1e-3  # trained on since
    swwae.save_pretrained(changed, tmp_path / "changed")
    metadata, body = card_of(tmp_path / "changed")
    assert "model-index" not in metadata and "metrics" not in metadata and metadata["datasets"] == ["mnist"]
    assert "None recorded" in body

    data = best.read_bytes()
    try:
        best.write_bytes(data + b"\0")  # written again since it was measured
        swwae.save_pretrained(swwae.load(last), tmp_path / "rewritten")
    finally:
        best.write_bytes(data)
    assert "model-index" not in card_of(tmp_path / "rewritten")[0]
    output_dir = RunFacts.of(swwae.load(last).config).output_dir
    assert run_metrics(output_dir, checkpoint=last) is NO_METRICS  # run_metrics itself goes by the path
    assert run_metrics(output_dir).checkpoint.endswith("best.ckpt")


def test_a_network_without_a_run_gets_a_card_and_still_loads(tmp_path):
    net = SWWAE(widths=[4], num_classes=None, pool_mode="soft", beta=10.0)
    swwae.save_pretrained(net, tmp_path / "m")
    metadata, body = card_of(tmp_path / "m")
    assert metadata == {"library_name": "swwae", "license": "mit", "tags": metadata["tags"]}
    assert "soft where (soft argmax, beta = 10)" in body and "no classifier head" in body
    assert swwae.load(tmp_path / "m").settings == net.settings


def test_a_run_that_trained_no_decoder_reports_no_reconstruction_error():
    """A classifier alone (model.lambda_rec=0, model=classifier_only): the MSE of its decoder as
    initialised is no result of it, so the card reports its accuracy only and says why."""
    metrics = RunMetrics({"test/recon_mse": 0.0945, "test/acc": 0.974}, "/x/best.ckpt")
    run = RunFacts.of({**RUN_CONFIG, "model": {"lambda_rec": 0.0, "lambda_m": 0.0}})
    card = model_card(SWWAE(widths=[4], image_shape=(3, 32, 32)), run=run, metrics=metrics)
    metadata = yaml.safe_load(card.split("---\n")[1])
    assert reported(metadata) == {"accuracy": 0.974} and metadata["metrics"] == ["accuracy"]
    assert "0.0945" not in card and "The decoder was not trained (the run's `model.lambda_rec` is 0" in card
    trained = model_card(SWWAE(widths=[4], image_shape=(3, 32, 32)), run=RunFacts.of(RUN_CONFIG), metrics=metrics)
    assert "0.0945" in trained and "not trained" not in trained


# the same text with and without huggingface_hub


@pytest.mark.parametrize(
    "metrics",
    [RunMetrics({"test/recon_mse": 0.00301234, "test/acc": 0.974}, "/x/best.ckpt"), NO_METRICS],
    ids=["with-metrics", "without"],
)
@pytest.mark.parametrize("config", [RUN_CONFIG, {}], ids=["cifar10-run", "no-run-config"])
@pytest.mark.extra("hub")
def test_the_card_is_the_same_with_and_without_huggingface_hub(metrics, config, monkeypatch):
    net = SWWAE(widths=[4, 8], image_shape=(3, 32, 32))
    with_hub = model_card(net, run=RunFacts.of(config), metrics=metrics)
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # import huggingface_hub raises ImportError
    without = model_card(net, run=RunFacts.of(config), metrics=metrics)
    assert without == with_hub
    metadata = yaml.safe_load(without.split("---\n")[1])
    assert metadata["library_name"] == "swwae"
    if config and metrics.values:
        assert reported(metadata) == {"mse": 0.003012, "accuracy": 0.974} and metadata["datasets"] == ["cifar10"]


@pytest.mark.extra("hub")
def test_push_to_hub_sends_the_card(tmp_path, monkeypatch):
    import swwae.hub

    uploaded = tmp_path / "uploaded"
    fake_hub(monkeypatch, uploaded)
    net = swwae.hub.SWWAE.of(SWWAE(widths=[4, 8]))
    net.config = RUN_CONFIG
    net.push_to_hub("user/swwae-test")
    metadata, body = card_of(uploaded)
    assert metadata["library_name"] == "swwae" and metadata["datasets"] == ["cifar10"]
    assert (uploaded / "README.md").read_text() == model_card(net, run=RunFacts.of(RUN_CONFIG))  # not the mixin's card


@pytest.mark.extra("hub")
def test_importing_the_hub_mixin_leaves_every_cards_tags_alone(tmp_path):
    """The mixin adds its own tags to the list it is given: a copy, not swwae.card.TAGS, so a
    card is the same whether swwae.hub was imported or not."""
    import swwae.card
    import swwae.hub

    assert swwae.card.TAGS == ["swwae", "autoencoder", "what-where", "unpooling", "image-reconstruction"]
    swwae.save_pretrained(SWWAE(widths=[4]), tmp_path / "m")
    assert card_of(tmp_path / "m")[0]["tags"] == swwae.card.TAGS
    assert "pytorch_model_hub_mixin" in swwae.hub.SWWAE._hub_mixin_info.model_card_data.tags


# what the tables do not know


def test_a_data_set_the_table_does_not_know_is_one_error_line(tmp_path):
    net = SWWAE(widths=[4], num_classes=None)
    foreign = {"run_name": "r", "data": {"_target_": "elsewhere.MyDataModule"}}
    with pytest.raises(ConfigError, match=r"^the run config's data._target_='elsewhere.MyDataModule' is no data set"):
        swwae.save_pretrained(net, tmp_path / "m", config=foreign)
    assert not (tmp_path / "m").exists()  # nothing written


def test_a_pooling_mode_the_table_does_not_know_is_one_error_line():
    net = SWWAE(widths=[4], num_classes=None)
    net.settings = dict(net.settings, pool_mode="gone")  # a mode registered when it was built, since taken out
    with pytest.raises(ConfigError, match=r"^the network's pool_mode='gone' is unknown; choose one of hard, soft"):
        model_card(net)
