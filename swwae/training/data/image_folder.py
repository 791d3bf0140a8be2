"""A folder of images as a data set (``data=image_folder data.root=DIR``), read once into memory.

Two layouts: torchvision's ``ImageFolder`` (one sub-folder per class, labelled; images in
nested folders count for their class) or a flat folder (images directly in DIR, no labels).
Files are found as ``ImageFolder`` finds them (its ``find_classes``, ``make_dataset`` and
extensions, plus ``.gif``); files with other extensions are skipped silently, and so are
hidden files and folders (``.ipynb_checkpoints``, macOS's ``._photo.jpg``). A file with an
image extension that PIL cannot read is an error that names it: a data set silently smaller
than its folder would be a different data set.

Every image becomes ``channels`` x S x S uint8: EXIF orientation applied, converted to grey
("L") or RGB as PIL converts (alpha dropped, as torchvision's loader does; 16-bit grey scaled
to 0..255, where PIL would clip it), then the shorter side resized to S (bilinear,
antialiased: torchvision's ``Resize(S)``) and the centre S x S cropped (``CenterCrop(S)``):
no image is stretched, and every pixel kept is at the image's own scale in both directions.
Animated GIFs and multi-page TIFFs give their first frame. Conversions are said once, in one
log line with the count of images per source mode.

The images are held as one uint8 tensor (N, C, S, S), filled in place (no second copy while
reading), and refused above ``max_bytes`` before anything is decoded. The fingerprint is a
SHA-256 over each image file's relative path and bytes (see :func:`folder_fingerprint`).
"""

from __future__ import annotations

import hashlib
import io
import logging
import math
import os
import struct
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image, ImageOps
from torch import Tensor
from torchvision.datasets.folder import IMG_EXTENSIONS, find_classes, has_file_allowed_extension, make_dataset
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from swwae.errors import ConfigError, DataError, Unreadable, one_line
from swwae.files import read_bytes, sha256_of
from swwae.loss import UNLABELLED
from swwae.progress import progress as progress_steps
from swwae.settings import check_int
from swwae.splits import SPLIT, generator, stratified_split
from swwae.training.data.base import InMemoryDataModule, Splits

log = logging.getLogger(__name__)

IMAGE_EXTENSIONS = (*IMG_EXTENSIONS, ".gif")  # ImageFolder's, and GIF
# the decoders PIL may use: only those of the extensions above (no plugin that runs a program)
PIL_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM")
FORMAT_WORDS = "PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM"
CHANNEL_MODES = {1: "L", 3: "RGB"}  # data.channels -> the PIL mode every image is converted to
SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")  # "I": 16-bit PNG/PGM in some Pillow versions
MEMORY_LIMIT = 8 * 2**30  # the default memory budget of the images: 8 GiB of uint8
IMAGE_FILE_LIMIT = 2**30  # bytes of one image file, at most (PIL refuses more than ~180 megapixels anyway)
READ_STEP = 256  # images decoded side by side between two progress steps, at least
FINGERPRINT_VERSION = b"swwae image folder 1\0"
# what reading a file with an image extension can raise, besides DataError
DECODE_ERRORS = (
    OSError, ValueError, SyntaxError, EOFError, TypeError, KeyError, IndexError, MemoryError, struct.error,
    Image.DecompressionBombError,
)  # fmt: skip


class ImageFolderContents(NamedTuple):
    """What :func:`read_image_folder` reads: ``images`` uint8 (N, C, S, S); ``labels`` int64
    (N,) indices into ``classes``, or None for a flat folder (``classes`` then empty);
    ``files`` the images' paths relative to ``root`` (POSIX), in the images' order;
    ``fingerprint`` the SHA-256 (hex) of the folder's image files (:func:`folder_fingerprint`)."""

    root: str
    images: Tensor
    labels: Tensor | None
    classes: tuple[str, ...]
    files: tuple[str, ...]
    fingerprint: str


class Listing(NamedTuple):
    """The image files of a folder, before any is opened: absolute paths in reading order,
    their labels (None: flat) and the class names."""

    root: Path
    paths: tuple[str, ...]
    labels: tuple[int, ...] | None
    classes: tuple[str, ...]

    def relative(self, path: str) -> str:
        return Path(path).relative_to(self.root).as_posix()


# finding the files


def hidden(name: str) -> bool:
    return name.startswith(".")


def list_image_folder(root: str | os.PathLike, root_hint: str = "data.root=<folder>") -> Listing:
    """The image files under ``root`` in either layout, without opening them: one DataError
    line for a missing or empty folder (``root_hint``: how the command names another), one class
    only, a class folder without images, and images both at the top and in class folders."""
    folder = Path(root).expanduser().absolute()
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "not found"
        raise DataError(f"image folder {folder} {what}: {root_hint} says where the images are ({layouts()})")
    top = sorted(e.name for e in os.scandir(folder) if e.is_file() and not hidden(e.name) and is_image_name(e.name))
    classes = [c for c in find_classes_or_none(folder) if not hidden(c)]
    index = {c: i for i, c in enumerate(classes)}
    found = (
        make_dataset(folder, index, is_valid_file=lambda p: is_image_file(folder, p), allow_empty=True) if index else []
    )
    counts = Counter(label for _, label in found)
    if top and found:
        filled = [c for c in classes if counts[index[c]]]
        raise DataError(
            f"image folder {folder} holds images both at its top ({examples(top)}) and in sub-folders "
            f"({examples(filled)}): put every image in a class folder (labelled), or all of them directly "
            f"in {folder.name}/ (unlabelled)"
        )
    if top:  # flat; sub-folders without images are no classes
        return Listing(folder, tuple(str(folder / name) for name in top), None, ())
    if not found:
        raise DataError(f"image folder {folder} holds no images ({FORMAT_WORDS}): {layouts()}")
    empty = [c for c in classes if not counts[index[c]]]
    if empty:
        raise DataError(
            f"class folder {folder / empty[0]} holds no images ({FORMAT_WORDS}): add images or remove it "
            f"(every sub-folder of {folder} is a class)"
        )
    if len(classes) == 1:
        raise DataError(
            f"image folder {folder} has one class folder ({classes[0]}): a labelled folder needs two or more; "
            f"for unlabelled images put them directly in {folder.name}/ (the flat layout)"
        )
    return Listing(folder, tuple(p for p, _ in found), tuple(label for _, label in found), tuple(classes))


def find_classes_or_none(folder: Path) -> list[str]:
    try:
        return find_classes(folder)[0]
    except FileNotFoundError:  # no sub-folder at all
        return []


def is_image_name(name: str) -> bool:
    return has_file_allowed_extension(name, IMAGE_EXTENSIONS)


def is_image_file(folder: Path, path: str) -> bool:
    """An image file of a class: an image extension, a regular file, no hidden part in its path."""
    parts = Path(path).relative_to(folder).parts
    return is_image_name(path) and not any(hidden(p) for p in parts) and os.path.isfile(path)


def layouts() -> str:
    return "one sub-folder of images per class (labelled), or images directly in it (unlabelled)"


def examples(names: list[str], shown: int = 3) -> str:
    more = f", ... ({len(names)} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


# the fingerprint


def folder_fingerprint(root: str | os.PathLike) -> str:
    """The SHA-256 (hex) of the image files under ``root``: their relative paths (so their
    classes) and their bytes, in reading order. Bytes, not sizes and modification times: a
    folder copied to another disk or machine (new times) is the same data and so the same run,
    and an image edited in place is different data even where its size and time come out
    equal. :func:`read_image_folder` hashes the bytes it decodes (one read, not two); this
    reads them on their own, for a run's identity before the images are decoded: a small part
    of decoding them (2,000 JPEG photos of 320 x 240: 0.8 s here, against 11 s to read them at
    size 64). Files skipped as not images (a README, hidden files) do not count."""
    listing = list_image_folder(root)
    hasher = fingerprinter()
    for path in listing.paths:
        with image_file_errors():
            add_file(hasher, listing.relative(path), sha256_of(path, "image file"))
    return hasher.hexdigest()


def fingerprinter():
    return hashlib.sha256(FINGERPRINT_VERSION)


def add_file(hasher, relative: str, digest: str) -> None:
    """One file into the fingerprint: its relative path (length first: no two lists of paths
    run together the same) and the SHA-256 (hex) of its bytes."""
    name = relative.encode("utf-8", "surrogateescape")
    hasher.update(len(name).to_bytes(8, "little") + name + digest.encode("ascii"))


# reading


def read_image_folder(
    root: str | os.PathLike,
    image_size: int,
    channels: int,
    progress: bool = True,
    max_bytes: int = MEMORY_LIMIT,
    threads: int | None = None,
    root_hint: str = "data.root=<folder>",
) -> ImageFolderContents:
    """Every image under ``root`` as ``channels`` x ``image_size`` x ``image_size`` uint8 (the
    module's docstring says how), with labels and the fingerprint. One DataError line for a bad
    folder or file, one ConfigError line for a bad ``image_size`` or ``channels``; a folder whose
    images would take more than ``max_bytes`` is refused before any is decoded. ``progress``: a
    bar on a terminal, a few lines in a log (stderr). ``threads`` decode side by side (PIL lets
    go of the GIL); the result does not depend on how many."""
    size = check_int("image_size", image_size, 1)
    if isinstance(channels, bool) or channels not in CHANNEL_MODES:
        raise ConfigError(f"data.channels={channels!r} must be 1 (grey) or 3 (RGB)")
    listing = list_image_folder(root, root_hint)
    count = len(listing.paths)
    check_memory(listing.root, count, size, channels, max_bytes)
    images = torch.empty((count, channels, size, size), dtype=torch.uint8)
    pixels = images.numpy()  # the same memory: each image is written into its place
    hasher, sources = fingerprinter(), Counter()
    threads = threads or min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)

    def read(i: int) -> tuple[str, str]:
        path = listing.paths[i]
        with image_file_errors():
            data = read_bytes(path, "image file", IMAGE_FILE_LIMIT)
        array, source = decode(data, path, size, CHANNEL_MODES[channels])
        pixels[i] = array[None] if channels == 1 else array.transpose(2, 0, 1)
        return hashlib.sha256(data).hexdigest(), source

    with ThreadPoolExecutor(threads) as pool:
        for chunk in chunks(count, listing.root, progress):
            for i, (digest, source) in zip(chunk, pool.map(read, chunk)):
                add_file(hasher, listing.relative(listing.paths[i]), digest)
                sources[source] += 1
    say_conversions(listing.root, sources, CHANNEL_MODES[channels], count)
    labels = None if listing.labels is None else torch.tensor(listing.labels, dtype=torch.int64)
    files = tuple(listing.relative(p) for p in listing.paths)
    return ImageFolderContents(str(listing.root), images, labels, listing.classes, files, hasher.hexdigest())


def check_memory(folder: Path, count: int, size: int, channels: int, max_bytes: int) -> None:
    """Refuse, in one line, images that would take more than ``max_bytes`` as uint8."""
    needed = count * channels * size * size
    if needed <= max_bytes:
        return
    fits = math.isqrt(max_bytes // (count * channels))
    smaller = f"lower data.image_size (at most {fits} fits)" if fits >= 1 else "lower data.image_size"
    raise DataError(
        f"the {count:,} images of {folder} at data.image_size={size} with {channels} channel(s) take "
        f"{gib(needed)} in memory as uint8, above the limit of {gib(max_bytes)}: {smaller}, or use a folder "
        "with fewer images"
    )


def gib(n: int) -> str:
    return f"{n / 2**30:.1f} GiB"


def chunks(count: int, folder: Path, progress: bool) -> Iterator[range]:
    """The image indices in steps of at least ``READ_STEP`` images, at most 20 steps: a bar on a
    terminal, at most 21 lines in a log (a line as each step starts, one at the end)."""
    step = max(READ_STEP, math.ceil(count / 20))
    parts = [range(start, min(start + step, count)) for start in range(0, count, step)]
    if not progress:
        return iter(parts)
    return progress_steps(parts, f"reading {folder}", name=lambda r: f"images {r.start + 1:,}-{r.stop:,} of {count:,}")


@contextmanager
def image_file_errors():
    """The bounded reader's Unreadable (a kind of CheckpointError) as what it is here: DataError."""
    try:
        yield
    except Unreadable as err:
        raise DataError(str(err)) from err


def decode(data: bytes, path: str, size: int, mode: str) -> tuple[np.ndarray, str]:
    """One image file's bytes as uint8 (S, S) or (S, S, 3), and the mode it was stored in."""
    try:
        with Image.open(io.BytesIO(data), formats=PIL_FORMATS) as img:
            source = img.mode
            img.draft(source, (size, size))  # JPEG: decode at a reduced scale, still >= S on both sides
            img = converted(ImageOps.exif_transpose(img), mode, path)
            img = TF.resize(img, size, interpolation=InterpolationMode.BILINEAR)
            return np.asarray(TF.center_crop(img, size)), source
    except DataError:
        raise
    except DECODE_ERRORS as err:
        raise DataError(
            f"image file {path} cannot be read as an image ({one_line(err, limit=120)}): replace or delete it"
        ) from err


def converted(img: Image.Image, mode: str, path: str) -> Image.Image:
    """``img`` in ``mode``: 16-bit grey scaled to 8 bits (PIL's own conversion would clip every
    value above 255 to white); floating-point images refused (their range is unknown)."""
    if img.mode == mode:
        return img
    if img.mode in SIXTEEN_BIT:
        values = np.clip(np.asarray(img).astype(np.int64), 0, 65535)
        img = Image.fromarray(((values + 128) // 257).astype(np.uint8))
    elif img.mode == "P" and "transparency" in img.info:  # by way of RGBA, as PIL asks (else a warning each)
        img = img.convert("RGBA")
    elif img.mode == "F":
        raise DataError(
            f"image file {path} holds floating-point pixels, whose range swwae cannot know: "
            "save it as an 8- or 16-bit image"
        )
    return img.convert(mode)


def say_conversions(folder: Path, sources: Counter, mode: str, count: int) -> None:
    others = {m: n for m, n in sources.items() if m != mode}
    if others:
        modes = ", ".join(f"{n} {m}" for m, n in sorted(others.items(), key=lambda mn: (-mn[1], mn[0])))
        log.warning("%s: converted %d of %d images to %s (from %s)", folder, sum(others.values()), count, mode, modes)


# splits


def image_folder_splits(
    contents: ImageFolderContents, val_size: int, test_size: int, split_seed: int
) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """(train_x, train_y, val_x, val_y, test_x, test_y), in the order of
    ``swwae.training.data.base.Splits``: ``val_size`` and ``test_size`` images drawn stratified
    by class (``swwae.splits``, stream SPLIT of ``split_seed``, as every data set here), the rest
    for training. A flat folder's images all carry the label UNLABELLED (-1)."""
    labelled = contents.labels is not None
    y = contents.labels if labelled else torch.full((len(contents.images),), UNLABELLED, dtype=torch.int64)
    check_split_sizes(len(y), len(contents.classes) if labelled else 1, val_size, test_size, contents.root)
    val, test, train = stratified_split(y, [val_size, test_size], generator(split_seed, SPLIT))
    x = contents.images
    return x[train], y[train], x[val], y[val], x[test], y[test]


def check_split_sizes(count: int, classes: int, val_size: int, test_size: int, where: str) -> None:
    """One ConfigError line unless ``val_size`` and ``test_size`` (each >= 1) leave every one
    of ``classes`` room for a training image among the ``count`` images of ``where``."""
    check_int("val_size", val_size, 1)
    check_int("test_size", test_size, 1)
    if val_size + test_size > count - classes:
        one_per_class = f" (one per class: {classes})" if classes > 1 else ""
        raise ConfigError(
            f"data.val_size={val_size} + data.test_size={test_size} leave too few of the {count} images "
            f"of {where} for training{one_per_class}: lower them, or add images"
        )


# the data set


class ImageFolderDataModule(InMemoryDataModule):
    """``data=image_folder data.root=DIR``: a folder of your own images (the module's docstring
    says how it is read), split seeded and stratified into train/val/test like every data set
    here. A flat folder has no labels: its images train the reconstruction terms only, and no
    accuracy is reported. Its settings: ``swwae.datasets.ImageFolderSettings``."""

    @classmethod
    def contents_of(cls, settings) -> str:
        return folder_fingerprint(settings.root)

    def load(self) -> Splits:
        contents = read_image_folder(self.root, self.image_size, self.channels, root_hint=self.root_hint)
        self.num_classes = len(contents.classes) or None
        self.class_names = contents.classes
        return Splits(*image_folder_splits(contents, self.val_size, self.test_size, self.split_seed))
