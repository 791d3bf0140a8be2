"""A folder of images as a data set (``data=image_folder data.root=DIR``), read once into memory.

Two layouts: torchvision's ``ImageFolder`` (one sub-folder per class, labelled; images in
nested folders count for their class) or a flat folder (images directly in DIR, no labels).
Files are found in ``ImageFolder``'s order and by its extensions (plus ``.gif``), by the bounded
scan of ``swwae.folder_scan``, which never leaves the folder (its docstring says what it
follows, skips and refuses); files with other extensions are skipped silently, and so are
hidden files and folders (``.ipynb_checkpoints``, macOS's ``._photo.jpg``). A file with an
image extension that PIL cannot read is an error that names it and says why (empty, not an
image, truncated, damaged, too many pixels): a data set silently smaller than its folder would
be a different data set.

Every image becomes ``channels`` x S x S uint8: EXIF orientation applied, converted to grey
("L") or RGB as PIL converts (alpha dropped, as torchvision's loader does; 16-bit grey scaled
to 0..255, where PIL would clip it), then the shorter side resized to S (bilinear,
antialiased: torchvision's ``Resize(S)``) and the centre S x S cropped (``CenterCrop(S)``):
no image is stretched, and every pixel kept is at the image's own scale in both directions.
Animated GIFs and multi-page TIFFs give their first frame. Conversions are said once, in one
log line with the count of images per source mode; so are enlarged images, and images above PIL's
warning bound on pixels (``say_huge``: in place of PIL's warning, which names no file).

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
import re
import struct
import warnings
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
from torchvision.transforms import InterpolationMode
from torchvision.transforms import functional as TF

from swwae.errors import ConfigError, DataError, Unreadable, one_line
from swwae.files import read_bytes, sha256_of
from swwae.folder_scan import (
    DEFAULT_LIMITS,
    FORMAT_WORDS,
    Listing,
    ScanLimits,
    check_labels,
    check_split_sizes,
    examples,
    scan_image_folder,
)
from swwae.loss import UNLABELLED
from swwae.progress import progress as progress_steps
from swwae.settings import check_int
from swwae.splits import SPLIT, generator, stratified_split
from swwae.training.data.base import InMemoryDataModule, Splits

log = logging.getLogger(__name__)

# the decoders PIL may use: only those of the image extensions (swwae.folder_scan; no plugin that runs a program)
PIL_FORMATS = ("PNG", "JPEG", "BMP", "GIF", "TIFF", "WEBP", "PPM")
CHANNEL_MODES = {1: "L", 3: "RGB"}  # data.channels -> the PIL mode every image is converted to
SIXTEEN_BIT = ("I;16", "I;16B", "I;16L", "I;16N", "I")  # "I": 16-bit PNG/PGM in some Pillow versions
MEMORY_LIMIT = 8 * 2**30  # the default memory budget of the images: 8 GiB of uint8
IMAGE_FILE_LIMIT = 2**30  # bytes of one image file, at most (PIL refuses more than ~180 megapixels anyway)
READ_STEP = 256  # images decoded side by side between two progress steps, at least
FINGERPRINT_VERSION = b"swwae image folder 1\0"
EMPTY_DIGEST = hashlib.sha256(b"").hexdigest()  # an empty file's, which no image has
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


# the fingerprint


def folder_fingerprint(root: str | os.PathLike, limits: ScanLimits = DEFAULT_LIMITS) -> str:
    """The SHA-256 (hex) of the image files under ``root``: their relative paths (so their
    classes) and their bytes, in reading order. Bytes, not sizes and modification times: a
    folder copied to another disk or machine (new times) is the same data and so the same run,
    and an image edited in place is different data even where its size and time come out
    equal. :func:`read_image_folder` hashes the bytes it decodes (one read, not two); this
    reads them on their own, for a run's identity before the images are decoded: a small part
    of decoding them (2,000 JPEG photos of 320 x 240: 0.8 s here, against 11 s to read them at
    size 64). Files skipped as not images (a README, hidden files) do not count. ``limits``: the
    scan's bounds (``swwae.folder_scan``). An empty file is its one line here already, before
    any image is decoded."""
    listing = scan_image_folder(root, limits=limits, progress=True)
    hasher = fingerprinter()
    for path in listing.paths:
        with image_file_errors():
            digest = sha256_of(path, "image file")
        if digest == EMPTY_DIGEST:
            raise DataError(f"image file {shown(listing, path)} {why_not(b'', None)}: replace or delete it")
        add_file(hasher, listing.relative(path), digest)
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
    limits: ScanLimits = DEFAULT_LIMITS,
) -> ImageFolderContents:
    """Every image under ``root`` as ``channels`` x ``image_size`` x ``image_size`` uint8 (the
    module's docstring says how), with labels and the fingerprint. One DataError line for a bad
    folder or file, one ConfigError line for a bad ``image_size`` or ``channels``; a folder whose
    images would take more than ``max_bytes`` is refused before any is decoded. ``progress``: a
    bar on a terminal, a few lines in a log (stderr). ``threads`` decode side by side (PIL lets
    go of the GIL); the result does not depend on how many. ``limits``: the scan's bounds
    (``swwae.folder_scan``); entries it skipped (a FIFO or a dangling link with an image name)
    are said in one log line."""
    size = check_int("image_size", image_size, 1)
    if isinstance(channels, bool) or channels not in CHANNEL_MODES:
        raise ConfigError(f"data.channels={channels!r} must be 1 (grey) or 3 (RGB)")
    listing = scan_image_folder(root, root_hint, limits, progress)
    say_skipped(listing)
    count = len(listing.paths)
    check_memory(listing.root, count, size, channels, max_bytes)
    images = torch.empty((count, channels, size, size), dtype=torch.uint8)
    pixels = images.numpy()  # the same memory: each image is written into its place
    hasher, sources, enlarged, huge = fingerprinter(), Counter(), [], []
    threads = threads or min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)

    def read(i: int) -> tuple[str, str, int]:
        path = listing.paths[i]
        with image_file_errors():
            data = read_bytes(path, "image file", IMAGE_FILE_LIMIT)
        array, source, stored = decode(data, shown(listing, path), size, CHANNEL_MODES[channels])
        pixels[i] = array[None] if channels == 1 else array.transpose(2, 0, 1)
        return hashlib.sha256(data).hexdigest(), source, stored

    with ThreadPoolExecutor(threads) as pool, warnings.catch_warnings():
        warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # said in one line below, naming the image
        for chunk in chunks(count, listing.root, progress):
            for i, (digest, source, (width, height)) in zip(chunk, pool.map(read, chunk)):
                relative = listing.relative(listing.paths[i])
                add_file(hasher, relative, digest)
                sources[source] += 1
                if min(width, height) < size:
                    enlarged.append((min(width, height), relative))
                if Image.MAX_IMAGE_PIXELS and width * height > Image.MAX_IMAGE_PIXELS:  # None: the user's "no bound"
                    huge.append((width * height, relative))
    say_conversions(listing.root, sources, CHANNEL_MODES[channels], count)
    say_enlarged(listing.root, enlarged, count, size)
    say_huge(listing.root, huge, count)
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
    return progress_steps(
        parts,
        f"reading {folder}",
        name=lambda r: f"images {r.start + 1:,}-{r.stop:,} of {count:,}",
        summary=f"{count:,} images read",
    )


@contextmanager
def image_file_errors():
    """The bounded reader's Unreadable (a kind of CheckpointError) as what it is here: DataError."""
    try:
        yield
    except Unreadable as err:
        raise DataError(str(err)) from err


def shown(listing: Listing, path: str) -> str:
    """An image file as error lines name it: its path in the folder, and the folder."""
    return f"{listing.relative(path)} in {listing.root}"


def decode(data: bytes, name: str, size: int, mode: str) -> tuple[np.ndarray, str, tuple[int, int]]:
    """One image file's bytes as uint8 (S, S) or (S, S, 3), the mode it was stored in and its
    stored size (width, height); a file that does not decode is one DataError line naming it (``name``) and why
    (``why_not``)."""
    try:
        with Image.open(io.BytesIO(data), formats=PIL_FORMATS) as img:
            source, stored = img.mode, img.size
            img.draft(source, (size, size))  # JPEG: decode at a reduced scale, still >= S on both sides
            img = converted(ImageOps.exif_transpose(img), mode, name)
            img = TF.resize(img, size, interpolation=InterpolationMode.BILINEAR)
            return np.asarray(TF.center_crop(img, size)), source, stored
    except DataError:
        raise
    except DECODE_ERRORS as err:
        raise DataError(f"image file {name} {why_not(data, err)}: replace or delete it") from err


# the formats' first bytes, to tell a damaged image from a file that is no image at all
SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "PNG"), (b"\xff\xd8\xff", "JPEG"), (b"GIF87a", "GIF"), (b"GIF89a", "GIF"),
    (b"BM", "BMP"), (b"II*\0", "TIFF"), (b"MM\0*", "TIFF"), (b"P5", "PGM"), (b"P6", "PPM"),
)  # fmt: skip
BOMB = re.compile(r"\((\d+) pixels\) exceeds limit of (\d+) pixels")
OBJECT_REPR = re.compile(r"<[^<>]* at 0x[0-9a-fA-F]+>")  # PIL's messages name the BytesIO object


def stored_format(data: bytes) -> str | None:
    """The format ``data`` starts as, by its first bytes (None: none that is read here)."""
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "WebP"
    return next((name for start, name in SIGNATURES if data.startswith(start)), None)


def why_not(data: bytes, err: BaseException | None) -> str:
    """Why an image file's bytes do not decode, in words: empty, not an image, truncated,
    damaged, too many pixels; PIL's own words only where they say more (never an object's repr)."""
    if not data:
        return "is empty (0 bytes)"
    if isinstance(err, Image.DecompressionBombError):
        found = BOMB.search(str(err))
        pixels = f" ({int(found[1]):,}; PIL decodes {int(found[2]):,} at most)" if found else ""
        return f"has too many pixels{pixels}, as a decompression bomb has"
    if isinstance(err, MemoryError):
        return "is too large to decode in the memory there is"
    kind = stored_format(data)
    if isinstance(err, Image.UnidentifiedImageError):
        if kind is None:
            return f"is not an image (its bytes are no {FORMAT_WORDS})"
        return f"is a damaged {kind} file (it starts as one, but its header does not read)"
    said = OBJECT_REPR.sub("the file", one_line(err, limit=120))
    if isinstance(err, EOFError) or "truncated" in said.lower():
        return f"is truncated (a {kind or 'image'} file cut short)"
    return f"is a damaged {kind or 'image'} file ({said})"


def converted(img: Image.Image, mode: str, name: str) -> Image.Image:
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
            f"image file {name} holds floating-point pixels, whose range swwae cannot know: "
            "save it as an 8- or 16-bit image"
        )
    return img.convert(mode)


def say_skipped(listing: Listing) -> None:
    """One log line for the entries with an image name that the scan skipped as no regular
    files (a FIFO, a socket, a device, a dangling link)."""
    count = len(listing.skipped)
    if count:
        log.warning(
            "%s: skipped %s (an image name, but no regular file behind it: a FIFO, device, socket or dangling "
            "link): %s",
            listing.root,
            "1 entry" if count == 1 else f"{count:,} entries",
            examples(listing.skipped),
        )


def say_conversions(folder: Path, sources: Counter, mode: str, count: int) -> None:
    others = {m: n for m, n in sources.items() if m != mode}
    if others:
        modes = ", ".join(f"{n} {m}" for m, n in sorted(others.items(), key=lambda mn: (-mn[1], mn[0])))
        log.warning("%s: converted %d of %d images to %s (from %s)", folder, sum(others.values()), count, mode, modes)


def say_huge(folder: Path, huge: list[tuple[int, str]], count: int) -> None:
    """One log line for the images above PIL's warning bound on pixels (below its error bound:
    they are read), in place of PIL's own warning, which names no file and is said once."""
    if huge:
        pixels, name = max(huge)
        log.warning(
            "%s: %d of %d images have more than %s pixels, where PIL warns of decompression bombs (the largest: "
            "%s, %s pixels): read all the same",
            folder,
            len(huge),
            count,
            f"{Image.MAX_IMAGE_PIXELS:,}",
            name,
            f"{pixels:,}",
        )


def say_enlarged(folder: Path, enlarged: list[tuple[int, str]], count: int, size: int) -> None:
    """One log line for the images whose shorter side is under ``size``: resizing enlarges them,
    and a blurred or blocky image trains as any other, so the user hears of it."""
    if enlarged:
        shorter, name = min(enlarged)
        log.warning(
            "%s: enlarged %d of %d images whose shorter side is under data.image_size=%d (the smallest: %s, %d px)",
            folder,
            len(enlarged),
            count,
            size,
            name,
            shorter,
        )


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


# the data set


class ImageFolderDataModule(InMemoryDataModule):
    """``data=image_folder data.root=DIR``: a folder of your own images (the module's docstring
    says how it is read), split seeded and stratified into train/val/test like every data set
    here. A flat folder has no labels: its images train the reconstruction terms only, and no
    accuracy is reported. Its settings: ``swwae.datasets.ImageFolderSettings``."""

    @classmethod
    def contents_of(cls, settings) -> str:
        return folder_fingerprint(settings.root, ScanLimits.of(settings))

    def load(self) -> Splits:
        limits = ScanLimits.of(self.settings)
        contents = read_image_folder(self.root, self.image_size, self.channels, root_hint=self.root_hint, limits=limits)
        check_labels(contents.labels is not None, self.num_labels, contents.root)
        self.num_classes = len(contents.classes) or None
        self.class_names = contents.classes
        return Splits(*image_folder_splits(contents, self.val_size, self.test_size, self.split_seed))
