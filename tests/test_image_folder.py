"""A folder of images as a data set: both layouts, every common format and mode, one line per
bad folder, a fingerprint that follows the folder's contents, and seeded stratified splits."""

from __future__ import annotations

import logging
import os
import re
import shutil
import struct
import warnings
import zlib

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from PIL import Image
from torchvision import transforms

from helpers.image_folders import picture, save, write_image_folder
from swwae.errors import ConfigError, DataError
from swwae.training.data.image_folder import folder_fingerprint, image_folder_splits, read_image_folder


def read(root, size=8, channels=3, **kwargs):
    return read_image_folder(root, size, channels, progress=False, **kwargs)


# the layouts


def test_labelled_folder_of_mixed_formats_modes_and_sizes(tmp_path, caplog):
    root = write_image_folder(tmp_path / "pets", classes=("cat", "dog", "emu"), per_class=10, mixed=True)
    (root / "dog" / "notes.txt").write_text("not an image")  # skipped silently, as ImageFolder does
    save(picture(0, (6, 6)), root / "cat" / ".hidden" / "thumb.png")  # hidden folders too
    (root / "cat" / "._img000.png").write_bytes(b"macOS metadata")  # and hidden files
    with caplog.at_level(logging.WARNING):
        contents = read(root, size=9, channels=3)
    assert contents.images.shape == (30, 3, 9, 9) and contents.images.dtype == torch.uint8
    assert contents.labels.dtype == torch.int64
    assert contents.labels.tolist() == [0] * 10 + [1] * 10 + [2] * 10
    assert contents.classes == ("cat", "dog", "emu")
    assert contents.files[:2] == ("cat/img000.png", "cat/img001.png") and len(contents.files) == 30
    assert {os.path.splitext(f)[1] for f in contents.files} == {
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".tif",
        ".webp",
        ".bmp",
    }
    assert len(torch.unique(contents.images.flatten(1), dim=0)) == 30  # every image its own
    line, enlarged = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]  # each said once
    assert "converted 15 of 30 images to RGB" in line
    assert "enlarged 3 of 30 images whose shorter side is under data.image_size=9" in enlarged  # the 7x7 TIFFs
    assert enlarged.endswith("(the smallest: cat/img007.tif, 7 px)")
    sixteen_bit = Image.open(save(picture(0, (4, 4), "I;16"), tmp_path / "probe.png")).mode  # "I" in Pillow 10.1
    assert "6 P" in line and f"3 {sixteen_bit}," in line and "3 L" in line and "3 RGBA" in line


def test_flat_folder_is_unlabelled_and_grey_on_request(tmp_path, caplog):
    root = write_image_folder(tmp_path / "flat", classes=(), per_class=7, mixed=True)
    os.mkdir(root / "empty")  # a sub-folder without images makes no class
    with caplog.at_level(logging.WARNING):
        contents = read(root, size=5, channels=1)
    assert contents.images.shape == (7, 1, 5, 5)
    assert contents.labels is None and contents.classes == ()
    assert contents.files == tuple(sorted(contents.files)) and "/" not in "".join(contents.files)
    (line,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert "converted 6 of 7 images to L" in line


def test_images_above_pils_warning_bound_are_read_and_said_in_one_line_by_name(tmp_path, monkeypatch, caplog):
    """PIL's DecompressionBombWarning names no file and is said once: one line of ours instead."""
    root = write_image_folder(tmp_path / "flat", classes=(), per_class=4)
    save(picture(1, (40, 30)), root / "wide.png")
    save(picture(2, (36, 36)), root / "square.png")
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # PIL refuses above twice it: these are read
    with warnings.catch_warnings(), caplog.at_level(logging.WARNING):
        warnings.simplefilter("error")  # PIL's own warning would fail the read
        contents = read(root)
    assert len(contents.files) == 6
    (line,) = [r.getMessage() for r in caplog.records if "decompression" in r.getMessage()]
    assert "2 of 6 images have more than 1,000 pixels" in line
    assert line.endswith("(the largest: square.png, 1,296 pixels): read all the same")


def test_progress_is_shown_on_stderr(tmp_path, capsys):
    root = write_image_folder(tmp_path / "pets", per_class=2)
    read_image_folder(root, 4, 3, progress=True)
    captured = capsys.readouterr()
    assert captured.out == "" and f"reading {root} 1/1 (0 s): images 1-4 of 4" in captured.err
    assert f"reading {root}: 4 images read (" in captured.err  # images, not steps of them


# what each image becomes


def test_an_image_of_the_size_asked_is_read_pixel_for_pixel(tmp_path):
    pixels = np.random.default_rng(0).integers(0, 256, (6, 6, 3), dtype=np.uint8)
    save(Image.fromarray(pixels), tmp_path / "flat" / "a.png")
    contents = read(tmp_path / "flat", size=6)
    assert torch.equal(contents.images[0], torch.from_numpy(pixels).permute(2, 0, 1))


def test_the_centre_is_cropped_without_stretching(tmp_path):
    """Three bands of 8 columns, 8 rows high (and its transpose): at size 8 nothing is resized,
    and the centre 8 x 8 is the middle band."""
    bands = np.repeat(np.array([0, 100, 200], dtype=np.uint8), 8)[None].repeat(8, axis=0)
    save(Image.fromarray(bands), tmp_path / "flat" / "wide.png")
    save(Image.fromarray(np.ascontiguousarray(bands.T)), tmp_path / "flat" / "tall.png")
    images = read(tmp_path / "flat", size=8, channels=1).images
    assert images.unique().tolist() == [100]


def test_a_large_image_is_read_as_torchvisions_resize_and_centre_crop(tmp_path):
    pixels = np.random.default_rng(1).integers(0, 256, (30, 45, 3), dtype=np.uint8)
    save(Image.fromarray(pixels), tmp_path / "flat" / "photo.png")
    recipe = transforms.Compose([transforms.Resize(10), transforms.CenterCrop(10), transforms.PILToTensor()])
    assert torch.equal(read(tmp_path / "flat", size=10).images[0], recipe(Image.fromarray(pixels)))


def test_sixteen_bit_grey_is_scaled_not_clipped(tmp_path):
    values = np.array([[0, 257 * 64], [257 * 128, 65535]], dtype=np.uint16)
    save(Image.fromarray(values), tmp_path / "flat" / "deep.png")
    assert Image.open(tmp_path / "flat" / "deep.png").mode.startswith("I")
    grey = read(tmp_path / "flat", size=2, channels=1).images[0, 0]
    assert grey.tolist() == [[0, 64], [128, 255]]


def test_exif_orientation_is_applied(tmp_path):
    """A photo stored sideways with the EXIF tag 'rotate 90 clockwise' (6) reads upright."""
    upright = np.zeros((8, 8), dtype=np.uint8)
    upright[:4] = 255  # white top half
    stored = Image.fromarray(upright).transpose(Image.Transpose.ROTATE_90)  # as the camera wrote it
    exif = Image.Exif()
    exif[0x0112] = 6
    path = tmp_path / "flat" / "photo.jpg"
    path.parent.mkdir()
    stored.save(path, "JPEG", exif=exif, quality=95)
    image = read(tmp_path / "flat", size=8, channels=1).images[0, 0].int()
    assert image[:3].min() > 200 and image[5:].max() < 50


@pytest.mark.filterwarnings("error")
def test_a_palette_with_transparency_reads_without_a_warning_of_pils(tmp_path):
    palette = Image.fromarray(np.arange(16, dtype=np.uint8).reshape(4, 4)).convert("P")
    (tmp_path / "flat").mkdir()
    palette.save(tmp_path / "flat" / "a.png", transparency=bytes(16))  # every entry transparent
    assert read(tmp_path / "flat", size=4).images.shape == (1, 3, 4, 4)


# reading the same folder, and a changed one


def test_the_same_folder_reads_bit_identical_and_a_copy_has_its_fingerprint(tmp_path):
    root = write_image_folder(tmp_path / "pets", per_class=6, mixed=True)
    first, second = read(root), read(root, threads=1)
    assert torch.equal(first.images, second.images) and torch.equal(first.labels, second.labels)
    assert first.fingerprint == second.fingerprint == folder_fingerprint(root)
    copy = shutil.copytree(root, tmp_path / "elsewhere")  # new modification times, same bytes
    (copy / "README.txt").write_text("not an image: not part of the data")
    assert folder_fingerprint(copy) == first.fingerprint


@pytest.mark.parametrize("change", ["edit", "add", "remove", "move to another class"])
def test_a_changed_folder_has_another_fingerprint(tmp_path, change):
    root = write_image_folder(tmp_path / "pets", per_class=3)
    before = folder_fingerprint(root)
    target = root / "cat" / "img001.png"
    if change == "edit":  # same size, same modification time, other bytes
        stat, data = target.stat(), bytearray(target.read_bytes())
        data[-20] ^= 1
        target.write_bytes(bytes(data))
        os.utime(target, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    elif change == "add":
        save(picture(99, (12, 10)), root / "dog" / "new.png")
    elif change == "remove":
        target.unlink()
    else:
        target.rename(root / "dog" / "img001_cat.png")
    assert folder_fingerprint(root) != before


# bad folders: one line each


def corrupt_png(root):
    write_image_folder(root, per_class=2)
    (root / "dog" / "broken.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 40)


def truncated_jpeg(root):
    write_image_folder(root, per_class=2)
    picture(1, (64, 64)).save(root / "cat" / "cut.jpg", "JPEG")
    data = (root / "cat" / "cut.jpg").read_bytes()
    (root / "cat" / "cut.jpg").write_bytes(data[: len(data) // 2])


def text_as_png(root):
    write_image_folder(root, classes=(), per_class=2)
    (root / "notes.png").write_text("hello")


def float_tiff(root):
    write_image_folder(root, classes=(), per_class=2)
    Image.fromarray(np.ones((4, 4), dtype=np.float32)).save(root / "float.tif", "TIFF")


def empty_file(root):
    write_image_folder(root, classes=(), per_class=2)
    (root / "blank.jpg").touch()


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def pixel_bomb(root):
    """A PNG whose header claims 20,000 x 20,000 pixels (no pixel data: PIL refuses it at open)."""
    write_image_folder(root, classes=(), per_class=2)
    header = png_chunk(b"IHDR", struct.pack(">IIBBBBB", 20_000, 20_000, 8, 0, 0, 0, 0))
    (root / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + header + png_chunk(b"IDAT", b""))


def one_class(root):
    write_image_folder(root, classes=("cat",), per_class=3)


def mixed_layout(root):
    write_image_folder(root, per_class=2)
    save(picture(7, (8, 8)), root / "stray.png")


def empty_class(root):
    write_image_folder(root, per_class=2)
    (root / "owl").mkdir()
    (root / "owl" / "readme.txt").write_text("no pictures yet")


def only_text(root):
    root.mkdir()
    (root / "notes.txt").write_text("no pictures")


def a_file(root):
    save(picture(0, (8, 8)), root.with_suffix(".png")).rename(root)


BAD = {
    "missing": (lambda root: None, "not found"),
    "not a folder": (a_file, "is not a folder"),
    "empty": (lambda root: root.mkdir(), "holds no images"),
    "no image files": (only_text, "holds no images"),
    "corrupt png": (corrupt_png, "dog/broken.png in {root} is a damaged PNG file"),
    "truncated jpeg": (truncated_jpeg, "cat/cut.jpg in {root} is truncated (a JPEG file cut short)"),
    "text named png": (text_as_png, "notes.png in {root} is not an image (its bytes are no PNG, JPEG"),
    "empty file": (empty_file, "blank.jpg in {root} is empty (0 bytes)"),
    "too many pixels": (pixel_bomb, "bomb.png in {root} has too many pixels (400,000,000; PIL decodes"),
    "float pixels": (float_tiff, "float.tif in {root} holds floating-point pixels"),
    "one class": (one_class, "has one class folder (cat)"),
    "mixed layout": (mixed_layout, "holds images both at its top (stray.png) and in sub-folders (cat, dog)"),
    "empty class": (empty_class, "owl holds no images"),
}


@pytest.mark.parametrize("case", BAD)
def test_a_bad_folder_is_one_line(tmp_path, case):
    make, words = BAD[case]
    root = tmp_path / "data"
    make(root)
    with pytest.raises(DataError) as err:
        read(root)
    message = str(err.value)
    assert words.format(root=root) in message and "\n" not in message
    assert " at 0x" not in message  # a reason in words, never an object's repr
    if case in ("one class", "empty"):
        assert "directly in" in message  # the way to the other layout is said


def test_an_empty_file_is_refused_by_the_fingerprint_before_any_image_is_decoded(tmp_path):
    root = tmp_path / "data"
    empty_file(root)
    with pytest.raises(DataError, match=r"^image file blank.jpg in .* is empty \(0 bytes\): replace or delete it$"):
        folder_fingerprint(root)


def test_too_many_bytes_are_refused_before_decoding(tmp_path):
    root = write_image_folder(tmp_path / "pets", per_class=5)
    with pytest.raises(
        DataError, match=r"at data.image_size=64 with 3 channel\(s\).*lower data.image_size \(at most 31 fits\)"
    ):
        read(root, size=64, max_bytes=10 * 3 * 32 * 32 - 1)
    assert read(root, size=32, max_bytes=10 * 3 * 32 * 32).images.shape == (10, 3, 32, 32)


@pytest.mark.parametrize(("size", "channels", "words"), [(0, 3, "data.image_size=0"), (8, 2, "data.channels=2")])
def test_bad_settings_are_one_line(tmp_path, size, channels, words):
    with pytest.raises(ConfigError, match=words):
        read(write_image_folder(tmp_path / "pets", per_class=2), size=size, channels=channels)


# splits


def test_splits_are_seeded_stratified_and_cover_the_folder(tmp_path):
    root = write_image_folder(tmp_path / "pets", classes=("a", "b", "c"), per_class=8)
    contents = read(root, size=4)
    train_x, train_y, val_x, val_y, test_x, test_y = image_folder_splits(contents, 6, 3, split_seed=0)
    assert (len(train_y), len(val_y), len(test_y)) == (15, 6, 3)
    assert torch.bincount(val_y).tolist() == [2, 2, 2] and sorted(test_y.tolist()) == [0, 1, 2]
    rows = {tuple(x.flatten().tolist()) for x in torch.cat([train_x, val_x, test_x])}
    assert len(rows) == 24  # disjoint, and every image in one of them
    again = image_folder_splits(contents, 6, 3, split_seed=0)
    other = image_folder_splits(contents, 6, 3, split_seed=1)
    assert torch.equal(again[2], val_x) and not torch.equal(other[2], val_x)


def test_a_flat_folder_splits_unlabelled(tmp_path):
    contents = read(write_image_folder(tmp_path / "flat", classes=(), per_class=10), size=4)
    train_x, train_y, val_x, val_y, test_x, test_y = image_folder_splits(contents, 2, 3, split_seed=0)
    assert (len(train_x), len(val_x), len(test_x)) == (5, 2, 3)
    assert set(torch.cat([train_y, val_y, test_y]).tolist()) == {-1}


@pytest.mark.parametrize(
    ("val", "test", "per_class", "words"),
    [
        (5, 4, 5, r"leave too few of the 10 images .*: lower them, or add images$"),
        (0, 2, 5, "data.val_size=0"),
        (1, 1, 1, r"leave too few of the 2 images .* \(one per class: 2\): add images \(4 at least\)$"),  # no sizes fit
    ],
)
def test_splits_that_leave_too_few_for_training_are_one_line(tmp_path, val, test, per_class, words):
    contents = read(write_image_folder(tmp_path / "pets", per_class=per_class), size=4)
    with pytest.raises(ConfigError, match=words):
        image_folder_splits(contents, val, test, split_seed=0)


def test_num_labels_on_a_flat_folder_is_one_line_before_any_image_is_read(tmp_path):
    """A flat folder has no labels to keep: the job's check says so from the scan alone (the
    files here are empty: none is opened), and so does the data module built directly."""
    from swwae.datasets import DATA_SETS, ImageFolderSettings
    from swwae.training.data import ImageFolderDataModule

    root = tmp_path / "flat"
    root.mkdir()
    for i in range(6):
        (root / f"{i}.png").touch()
    words = rf"^data.num_labels=2 keeps the labels .* of {re.escape(str(root))} have none .*: put them in one"
    settings = {"root": str(root), "num_labels": 2, "val_size": 1, "test_size": 1}
    with pytest.raises(ConfigError, match=words):
        DATA_SETS["image_folder"].check_files(ImageFolderSettings(**settings))
    shutil.rmtree(root)
    write_image_folder(root, classes=(), per_class=6)
    with pytest.raises(ConfigError, match=words):
        ImageFolderDataModule(**settings).setup()


# the data set: data=image_folder, through the job


def folder_run(tmp_path, folder, *overrides):
    """A quick run of the job on a folder of images; (its metrics.json, the config)."""
    import json

    from hydra.core.global_hydra import GlobalHydra

    from helpers.config import compose_config
    from swwae.training.run import train

    settings = [f"data.root={folder}", "data.val_size=4", "data.test_size=4", "data.image_size=16"]
    cfg = compose_config(tmp_path, ["data=image_folder", "model.widths=[4]", *settings, *overrides])
    train(cfg)
    GlobalHydra.instance().clear()
    return json.loads((tmp_path / "output" / "metrics.json").read_text()), cfg


@pytest.mark.slow
def test_a_folder_of_images_trains_continues_and_exports(tmp_path):
    import swwae

    folder = write_image_folder(tmp_path / "pics", classes=("a", "b", "c"), per_class=8, mixed=True)
    metrics, _ = folder_run(tmp_path, folder)
    assert metrics["status"] == "ok" and "test/acc" in metrics["metrics"]
    again, _ = folder_run(tmp_path, folder)  # the same command again: the finished run, reported
    assert again["metrics"] == metrics["metrics"]
    net = swwae.load(metrics["checkpoint"])
    assert net.image_shape == (3, 16, 16) and net.classifier[-1].out_features == 3
    swwae.save_pretrained(net, tmp_path / "m")
    x = torch.rand(2, 3, 16, 16)
    assert torch.equal(swwae.load(tmp_path / "m")(x).recon, net(x).recon)


@pytest.mark.slow
def test_a_folder_run_is_probed_on_the_folder_named_again(tmp_path, capsys, monkeypatch):
    """``swwae probe`` of a folder run reads the folder given with --data-root (a file never
    says where data lies): the run's probes beside the pixel and random-weights controls;
    without it, one error line."""
    import json

    from swwae.commands.probe import main as probe_main

    folder = write_image_folder(tmp_path / "pics", classes=("a", "b", "c"), per_class=8)
    metrics, _ = folder_run(tmp_path, folder)
    out = tmp_path / "probes.json"
    probe = [metrics["checkpoint"], "--labels", "all", "--k", "3", "--json", str(out)]
    assert probe_main([*probe, "--data-root", str(folder)]) == 0
    result = json.loads(out.read_text())
    assert result["train_images"] == 24 - 4 - 4
    pixels, random, run = result["rows"]
    assert pixels["name"] == "pixels" and random["name"].startswith("random weights")
    assert run["name"] == "swwae_hard_image_folder_seed0" and 0 <= run["knn"]["all"] <= 1
    assert set(run["invariance"]) == {"pixels", "stage_1"}  # the one stage of model.widths=[4]
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert probe_main(probe) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: image folder ") and "not found: --data-root <folder> says where the images" in line


@pytest.mark.slow
def test_a_flat_folder_trains_its_reconstruction_only(tmp_path):
    folder = write_image_folder(tmp_path / "pics", classes=(), per_class=24)
    metrics, _ = folder_run(tmp_path, folder, "data.channels=1")
    assert "test/recon_mse" in metrics["metrics"] and "test/acc" not in metrics["metrics"]


def test_a_changed_folder_is_another_run(tmp_path):
    """The folder's contents are part of the run's identity: the same settings over changed
    images never continue or report the old run."""
    from helpers.config import compose_config
    from swwae.training.composing import launch
    from swwae.training.run import run_folder
    from swwae.training.spec import check_config

    folder = write_image_folder(tmp_path / "pics", classes=("a", "b"), per_class=6)

    def identity(*overrides):
        settings = ["data=image_folder", f"data.root={folder}", "data.val_size=2", "data.test_size=2"]
        cfg = compose_config(tmp_path, [*settings, *overrides])
        return run_folder(check_config(cfg), OmegaConf.to_container(cfg, resolve=True), launch()).identity

    before = identity()
    assert identity("data.max_entries=1000", "data.max_depth=3") == before  # the scan's bounds are no part of it
    (folder / "a" / sorted(os.listdir(folder / "a"))[0]).unlink()
    assert identity() != before
