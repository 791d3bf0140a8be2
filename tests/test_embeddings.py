"""The code space in TensorBoard's projector: at the end of training
(``callbacks.embeddings.enabled=true``) and from ``scripts/evaluate.py --embeddings``, the top
what of test images, their labels and thumbnails, in the files TensorBoard's projector reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra.utils import instantiate
from PIL import Image

import swwae
from swwae.model import SWWAE
from swwae.training.embeddings import top_codes
from swwae.training.run import train

RUN = "swwae_hard_mnist_sample_seed0"

# helpers


def projector_files(logdir: Path) -> dict:
    """What the projector of ``logdir`` shows: its config, and the first embedding's vectors,
    labels and sprite."""
    config = (logdir / "projector_config.pbtxt").read_text()
    folder = next(logdir.glob("*/top_what"))
    rows = [line.split("\t") for line in (folder / "tensors.tsv").read_text().splitlines()]
    return {
        "config": config,
        "vectors": torch.tensor([[float(v) for v in row] for row in rows]),
        "labels": (folder / "metadata.tsv").read_text().split(),
        "sprite": Image.open(folder / "sprite.png"),
    }


def test_top_codes_are_the_flattened_top_whats_in_eval_mode():
    net = SWWAE(widths=[4, 8], dropout=0.5)  # training mode: dropout would change them
    x = torch.rand(7, 1, 28, 28)
    codes = top_codes(net, x, batch_size=3)
    with torch.no_grad():
        expected = net.eval().encode(x)[0][-1].flatten(1)
    assert codes.shape == (7, 8 * 7 * 7)
    torch.testing.assert_close(codes, expected)  # batches of 3: the convolutions may round otherwise


@pytest.mark.slow
def test_training_ends_with_the_test_images_top_whats_in_the_projector(make_config, tmp_path):
    train(make_config("model.widths=[4,8]", "callbacks.embeddings.enabled=true", "callbacks.embeddings.num_images=60"))
    shown = projector_files(tmp_path / "logs" / RUN / "version_0")
    assert 'tensor_name: "top_what:00003"' in shown["config"] and "sprite" in shown["config"]  # 3 steps trained
    net = swwae.load(tmp_path / "checkpoints" / RUN / "last.ckpt")  # the weights training ended with
    data = instantiate(net.config["data"])
    data.setup("test")
    torch.testing.assert_close(shown["vectors"], top_codes(net, data.images("test", 60)), rtol=1e-5, atol=1e-6)
    assert shown["labels"] == [str(int(y)) for y in data.test_y[:60]]
    assert shown["sprite"].size == (8 * 28, 8 * 28)  # 60 thumbnails on an 8 x 8 grid


@pytest.mark.slow
def test_the_default_run_writes_no_projector_files(make_config, tmp_path):
    train(make_config("model.widths=[4,8]"))
    assert not list((tmp_path / "logs" / RUN).rglob("projector_config.pbtxt"))


@pytest.mark.slow
def test_evaluate_writes_the_projector_files_under_logs_here_or_where_asked(make_config, tmp_path, capsys, monkeypatch):
    from swwae.commands.evaluate import main

    train(make_config("model.widths=[4,8]"))
    best = tmp_path / "checkpoints" / RUN / "best.ckpt"
    capsys.readouterr()  # training's own lines
    monkeypatch.chdir(tmp_path)
    assert main([str(best), "--embeddings", "--split", "val", "--out", "val.png"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["embeddings"] == "logs/best_val_embeddings" and result["embedded_images"] == 500
    shown = projector_files(Path(result["embeddings"]))
    assert shown["vectors"].shape == (500, 8 * 7 * 7) and len(shown["labels"]) == 500

    assert main([str(best), "--embeddings", str(tmp_path / "tb")]) == 0
    assert json.loads(capsys.readouterr().out)["embeddings"] == str(tmp_path / "tb")
    assert projector_files(tmp_path / "tb")["vectors"].shape == (500, 392)


class Projector:
    """A writer that keeps what ``add_embedding`` is handed."""

    def add_embedding(self, codes, metadata, label_img, global_step, tag):
        self.metadata = metadata

    def flush(self):
        pass


def test_the_projector_names_a_folders_classes_by_their_names():
    """Its legend colours ``cat`` and ``dog``, not 0 and 1; numbers where the data name none."""
    from swwae.training.embeddings import write_embedding

    net, projector = SWWAE(widths=[4]), Projector()
    labels = torch.tensor([1, 0, 1])
    assert write_embedding(projector, net, torch.rand(3, 1, 28, 28), labels, names=("cat", "dog\tcat")) == 3
    assert projector.metadata == ["dog cat", "cat", "dog cat"]  # a tab would split the metadata file's row
    write_embedding(projector, net, torch.rand(3, 1, 28, 28), labels)
    assert projector.metadata == ["1", "0", "1"]
