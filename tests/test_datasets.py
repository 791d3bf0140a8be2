"""The paper's other datasets (SVHN, STL-10, CIFAR-100), read by torchvision from files the
tests write in each dataset's real on-disk format; batch augmentation; every data config."""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from helpers.config import CONFIG_DIR, compose_config
from helpers.datasets import write_cifar, write_stl10, write_svhn
from helpers.steps import quiet_trainer
from swwae.datasets import DATA_SETS
from swwae.errors import ConfigError, DataError
from swwae.training import data
from swwae.training.data.augment import random_crop_flip
from swwae.training.data.batching import UNLABELLED
from swwae.training.data.stl10 import read_stl10_images

CONFIGS = CONFIG_DIR / "data"


def value(images: torch.Tensor) -> list[int]:
    """The number each fake image is filled with (channel 0, one pixel)."""
    return images[:, 0, 3, 5].tolist()


# --------------------------------------------------------------------------- SVHN


def test_svhn_reads_mat_files_with_0_for_the_digit_labelled_10(tmp_path, monkeypatch):
    write_svhn(tmp_path, monkeypatch)
    dm = data.SVHNDataModule(root=str(tmp_path), val_size=20, batch_size=16)
    dm.setup()
    assert (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (80, 20, 30)
    assert dm.train_x.dtype == torch.uint8 and dm.train_x.shape[1:] == (3, 32, 32)
    assert value(dm.test_x) == list(range(100, 130)) and dm.test_y.tolist() == [i % 10 for i in range(100, 130)]
    assert int(dm.test_y.min()) == 0  # stored as 10
    channels = dm.test_x[0, :, 3, 5].tolist()
    assert channels == [100, 150, 200]  # channels first, in order
    assert sorted(value(dm.train_x) + value(dm.val_x)) == list(range(100))


def test_svhn_extra_joins_training_only(tmp_path, monkeypatch):
    write_svhn(tmp_path, monkeypatch, counts=(("train", 100), ("test", 30), ("extra", 40)))
    dm = data.SVHNDataModule(root=str(tmp_path), val_size=20, extra=True)
    dm.setup()
    assert (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (120, 20, 30)
    assert set(value(dm.train_x)) >= set(range(130, 170))
    assert not set(value(dm.val_x)) & set(range(130, 170))


def test_svhn_missing_files_name_the_folder(tmp_path):
    with pytest.raises(DataError) as err:
        data.SVHNDataModule(root=str(tmp_path / "svhn"), extra=True).setup()
    msg = str(err.value)
    assert str((tmp_path / "svhn").resolve()) in msg and "train_32x32.mat, test_32x32.mat, extra_32x32.mat" in msg
    assert "data.download=true" in msg and "\n" not in msg


# --------------------------------------------------------------------------- CIFAR-100


def test_cifar100_has_100_classes_from_its_fine_labels(tmp_path, monkeypatch):
    write_cifar(tmp_path, monkeypatch, classes=100, per_batch=300, n_test=200)
    dm = data.CIFAR100DataModule(root=str(tmp_path), val_size=100)
    dm.setup()
    assert dm.num_classes == 100 and (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (200, 100, 200)
    assert torch.equal(torch.bincount(dm.val_y, minlength=100), torch.ones(100, dtype=torch.long))
    assert dm.test_y.tolist() == [i % 100 for i in range(300, 500)]


def test_cifar100_partial_files(tmp_path, monkeypatch):
    folder = write_cifar(tmp_path, monkeypatch, classes=100, per_batch=300, n_test=200)
    (folder / "test").unlink()
    with pytest.raises(DataError, match="cifar100 files not found in .*cifar-100-python .*expected train, test, meta"):
        data.CIFAR100DataModule(root=str(tmp_path), val_size=100).setup()


# --------------------------------------------------------------------------- STL-10


def test_stl10_labelled_and_unlabelled_images_and_a_fold(tmp_path, monkeypatch):
    write_stl10(tmp_path, monkeypatch, n_train=100, n_test=30, n_unlabelled=50)
    dm = data.STL10DataModule(root=str(tmp_path), val_size=20, batch_size=16, labelled_per_batch=4)
    dm.setup()
    assert dm.train_x.dtype == torch.uint8 and dm.train_x.shape[1:] == (3, 96, 96)
    assert (len(dm.train_x), len(dm.val_x), len(dm.test_x)) == (80 + 50, 20, 30)
    assert value(dm.train_x[80:]) == list(range(130, 180))  # the unlabelled images, in file order
    assert (dm.train_y[80:] == UNLABELLED).all() and (dm.train_y[:80] >= 0).all()
    assert value(dm.test_x) == list(range(100, 130)) and dm.test_y.tolist() == [i % 10 for i in range(100, 130)]
    # the column-major layout of the files comes out as rows and columns
    assert torch.equal(dm.test_x[0, 0], torch.full((96, 96), 100, dtype=torch.uint8))
    x, y = next(iter(dm.train_dataloader()))  # semi-supervised batches without num_labels
    assert x.dtype == torch.float32 and (y[:4] >= 0).all() and (y[4:] == UNLABELLED).all()


def test_stl10_fold_keeps_the_labelled_images_of_that_predefined_fold(tmp_path, monkeypatch):
    write_stl10(tmp_path, monkeypatch, n_train=200, n_test=30, n_unlabelled=5)
    fold = data.STL10DataModule(root=str(tmp_path), val_size=5, fold=3, unlabelled=False)
    fold.setup()
    assert sorted(value(fold.train_x) + value(fold.val_x)) == list(range(60, 80))  # line 4 of fold_indices.txt
    assert len(fold.val_x) == 5 and fold.labelled is None


def test_stl10_reads_unlabelled_images_in_chunks_into_place(tmp_path, monkeypatch):
    folder = write_stl10(tmp_path, monkeypatch, n_unlabelled=37)
    out = torch.zeros(37, 3, 96, 96, dtype=torch.uint8)
    read_stl10_images(str(folder / "unlabeled_X.bin"), out, chunk=5)
    assert value(out) == list(range(130, 167)) and out[:, 2, 50, 7].tolist() == [
        (v % 200 + 100) % 256 for v in range(130, 167)
    ]


def test_stl10_truncated_unlabelled_file_is_one_line(tmp_path, monkeypatch):
    folder = write_stl10(tmp_path, monkeypatch)
    path = folder / "unlabeled_X.bin"
    path.write_bytes(path.read_bytes()[:100_000])
    monkeypatch.setattr("torchvision.datasets.STL10._check_integrity", lambda self: True)
    with pytest.raises(DataError, match=r"stl10 files in .*stl10_binary look partial or corrupt .*unlabeled_X\.bin"):
        data.STL10DataModule(root=str(tmp_path), val_size=20).setup()


@pytest.mark.parametrize("fold", [10, -1])
def test_stl10_fold_out_of_range(fold):
    with pytest.raises(ConfigError, match="data.fold"):
        data.STL10DataModule(fold=fold)


# --------------------------------------------------------------------------- augmentation


def test_crops_shift_each_image_by_its_own_offset_within_the_padding():
    x = torch.arange(2 * 8 * 8, dtype=torch.float32).view(2, 1, 8, 8) + 1  # no zeros inside
    out = random_crop_flip(x.repeat(50, 1, 1, 1), padding=2, flip=False, generator=torch.Generator().manual_seed(0))
    shifts = set()
    for image, original in zip(out, x.repeat(50, 1, 1, 1)):
        found = [
            (dy, dx)
            for dy in range(-2, 3)
            for dx in range(-2, 3)
            if torch.equal(
                image, torch.roll(torch.nn.functional.pad(original, (2, 2, 2, 2)), (-dy, -dx), (1, 2))[:, 2:10, 2:10]
            )
        ]
        assert found, "each output is the padded input shifted by at most the padding"
        shifts.add(found[0])
    assert len(shifts) > 5  # images get different offsets


def test_flips_mirror_about_half_of_the_images_and_digits_are_never_flipped():
    x = torch.rand(400, 3, 6, 6)
    out = random_crop_flip(x, padding=0, flip=True, generator=torch.Generator().manual_seed(1))
    mirrored = [torch.equal(o, i.flip(-1)) for o, i in zip(out, x)]
    kept = [torch.equal(o, i) for o, i in zip(out, x)]
    assert all(m or k for m, k in zip(mirrored, kept)) and 150 < sum(mirrored) < 250
    assert not DATA_SETS["mnist_sample"].flips and not DATA_SETS["svhn"].flips
    assert DATA_SETS["cifar10"].flips and DATA_SETS["stl10"].flips


@pytest.mark.slow
def test_augmentation_runs_on_training_batches_only_and_is_seeded(make_config):
    import lightning as L

    class Record(L.Callback):
        def __init__(self):
            self.train, self.val = [], []

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            self.train.append(batch[0].clone())

        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            self.val.append(batch[0].clone())

    def run(augment: bool, seed: int = 0):
        dm = data.MNISTSampleDataModule(batch_size=16, augment=augment, seed=seed)
        probe = Record()
        trainer = quiet_trainer(
            max_epochs=1, limit_train_batches=2, limit_val_batches=1, num_sanity_val_steps=0, callbacks=[probe]
        )
        from swwae.training.module import SWWAEModule

        trainer.fit(SWWAEModule(widths=[4]), datamodule=dm)
        return probe

    plain, shifted, again, other = run(False), run(True), run(True), run(True, seed=1)
    assert not torch.equal(plain.train[0], shifted.train[0]) and torch.equal(plain.val[0], shifted.val[0])
    assert all(torch.equal(a, b) for a, b in zip(shifted.train, again.train))  # seeded
    assert not torch.equal(shifted.train[1], other.train[1])


# --------------------------------------------------------------------------- configs


def test_pixel_mean_per_channel(tmp_path, monkeypatch):
    write_cifar(tmp_path, monkeypatch)
    dm = data.CIFAR10DataModule(root=str(tmp_path), val_size=10)
    dm.setup()
    expected = dm.train_x.double().mean((0, 2, 3)) / 255
    assert dm.pixel_mean(chunk=7) == pytest.approx(expected.tolist())


CLASSES = {name: DATA_SETS[name].load() for name in DATA_SETS.shipped}  # the data-set table's (swwae.datasets)


def test_an_epoch_of_the_sample_is_the_tables_epoch_images():
    dm = data.MNISTSampleDataModule()
    dm.setup()
    assert len(dm.train_x) == DATA_SETS["mnist_sample"].epoch_images


def test_every_data_config_is_tested_here():
    assert set(CLASSES) == {p.stem for p in CONFIGS.glob("*.yaml")}


@pytest.mark.parametrize("name", sorted(CLASSES))
def test_configs_instantiate(name, tmp_path):
    """Each data config builds its class with the table's facts, the run's seed and the
    schema's defaults."""
    cfg = compose_config(tmp_path, [f"data={name}", "seed=7"], quick=False)
    dm = instantiate(cfg.data)
    entry = DATA_SETS[name]
    assert type(dm) is CLASSES[name] and dm.name == name and dm.seed == 7
    assert (dm.image_shape, dm.num_classes) == (entry.shape_of(dm.settings), entry.classes_of(dm.settings))
    assert dm.batch_size == 128 and dm.num_labels is None and not dm.augment
