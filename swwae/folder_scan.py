"""The bounded scan of a folder of images (``data=image_folder``): which files are its images and
in which classes, found without opening one and without ever walking out of the folder. PURE
PYTHON: the run's config check scans the folder before torch loads and before the job writes
anything (``swwae.datasets.ImageFolderSet.check_files``); the reader scans it again
(``swwae.training.data.image_folder``).

What the scan reads, in the two layouts of torchvision's ``ImageFolder`` (one sub-folder per
class, at any depth below it; or the images directly in the folder), in its order:

- files whose names end in an image extension (``IMAGE_EXTENSIONS``); other files are passed
  over, and so is every name that starts with ``.`` (hidden files and folders);
- a link to a folder is followed when its target lies inside the folder and was not read
  already; a link to a folder outside it, or to one read already (a loop, or a second path to
  the same images), is refused in one line naming the link and its target;
- a link to a file is followed wherever it points (a file cannot start a walk, and links are a
  common way to assemble class folders from a store of images): a file linked twice counts twice;
- an entry with an image name that is no regular file (a FIFO, a socket, a device, a dangling
  link) is skipped: ``Listing.skipped`` names them, and the reader says so in one line;
- the kernel's pseudo file systems (``PSEUDO_FILE_SYSTEMS``: ``/proc``, ``/sys``, ``/dev``, ...)
  are refused, judged by the device of the folder, of each folder below it and of each file a link
  points at, against ``/proc/self/mountinfo`` (where the system has one: Linux);
- the scan is bounded (``ScanLimits``: entries looked at, folders entered, depth); above a bound it
  stops, in one line naming the setting that raises it. The walk is iterative (no recursion), one
  ``os.scandir`` per folder, and says how far it got every ``PROGRESS_EVERY_S`` seconds.
"""

from __future__ import annotations

import os
import stat
import sys
import time
from pathlib import Path
from typing import NamedTuple, TextIO

from swwae.errors import ConfigError, DataError, Unreadable
from swwae.files import read_bytes
from swwae.settings import check_int

# torchvision's ImageFolder extensions (its IMG_EXTENSIONS), and GIF
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm", ".tif", ".tiff", ".webp", ".gif")
FORMAT_WORDS = "PNG, JPEG, BMP, GIF, TIFF, WebP, PPM/PGM"
# the scan's bounds by default: far above real data sets (ImageNet's training set: 1.28 M files in
# 1,000 class folders, 2 levels deep), low enough that a wrong data.root answers in seconds
MAX_ENTRIES = 10_000_000
MAX_FOLDERS = 100_000
MAX_DEPTH = 32
# the kernel's file systems: its state as files, never images (and endless, or blocking, to walk)
PSEUDO_FILE_SYSTEMS = frozenset(
    {
        "proc", "sysfs", "devtmpfs", "devfs", "devpts", "cgroup", "cgroup2", "debugfs", "tracefs",
        "securityfs", "pstore", "bpf", "configfs", "fusectl", "mqueue", "hugetlbfs", "binfmt_misc",
        "autofs", "efivarfs", "selinuxfs", "rpc_pipefs", "nsfs",
    }
)  # fmt: skip
MOUNTS = "/proc/self/mountinfo"
MOUNTS_LIMIT = 16 * 2**20  # bytes of the mount table, at most (a host with thousands of mounts: ~1 MB)
PROGRESS_EVERY_S = 2.0  # a progress line this often while a large folder is scanned
CHECK_EVERY = 4096  # entries between two looks at the clock


class ScanLimits(NamedTuple):
    """The scan's bounds: ``entries`` looked at (files, folders, links, hidden ones too),
    ``folders`` entered, ``depth`` of folders below the folder (a class folder is 1 deep).
    ``data.max_entries``, ``data.max_folders``, ``data.max_depth`` set them (``of``)."""

    entries: int = MAX_ENTRIES
    folders: int = MAX_FOLDERS
    depth: int = MAX_DEPTH

    @classmethod
    def of(cls, settings) -> ScanLimits:
        """The bounds an image folder's settings (``swwae.datasets.ImageFolderSettings``) set."""
        return cls(settings.max_entries, settings.max_folders, settings.max_depth)


DEFAULT_LIMITS = ScanLimits()


class Listing(NamedTuple):
    """The image files of a folder, before any is opened: absolute paths in reading order,
    their labels (None: flat), the class names, and the entries with an image name that were
    skipped as no regular files (relative to ``root``)."""

    root: Path
    paths: tuple[str, ...]
    labels: tuple[int, ...] | None
    classes: tuple[str, ...]
    skipped: tuple[str, ...] = ()

    def relative(self, path: str) -> str:
        return Path(path).relative_to(self.root).as_posix()


# helpers


def hidden(name: str) -> bool:
    return name.startswith(".")


def is_image_name(name: str) -> bool:
    return name.lower().endswith(IMAGE_EXTENSIONS)


def layouts() -> str:
    return "one sub-folder of images per class (labelled), or images directly in it (unlabelled)"


def examples(names, shown: int = 3) -> str:
    """The first ``shown`` of ``names``, and how many there are in all when there are more."""
    names = list(names)
    more = f", ... ({len(names):,} in all)" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def setting_of(root_hint: str) -> str:
    """The setting a root hint names: ``data.root=<folder>`` -> ``data.root``."""
    return root_hint.partition("=")[0].partition(" ")[0]


def pseudo_devices(mounts: str = MOUNTS) -> dict[int, str]:
    """The device ids of the mounted pseudo file systems -> their type, from the mount table
    (empty where there is none: the bounds still hold the scan)."""
    try:
        text = read_bytes(mounts, "mount table", MOUNTS_LIMIT).decode("utf-8", "replace")
    except Unreadable:
        return {}
    devices = {}
    for line in text.splitlines():
        # id parent major:minor root mount-point options [optional fields...] - type source options
        fields = line.split()
        try:
            kind, (major, _, minor) = fields[fields.index("-", 6) + 1], fields[2].partition(":")
        except (ValueError, IndexError):
            continue
        if kind in PSEUDO_FILE_SYSTEMS and major.isdigit() and minor.isdigit():
            devices[os.makedev(int(major), int(minor))] = kind
    return devices


def inside(path: str, folder: str) -> bool:
    """Whether the resolved ``path`` is ``folder`` (resolved) or lies in it."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


# the scan


class Scan:
    """One walk of a folder (``scan_image_folder``): its counts, what it has entered, the
    image names of each folder."""

    def __init__(self, folder: Path, root_hint: str, limits: ScanLimits, progress: bool, stream: TextIO | None):
        self.folder, self.text, self.hint = folder, str(folder), root_hint
        self.setting = setting_of(root_hint)
        self.limits = limits
        self.real = os.path.realpath(folder)
        self.pseudo = pseudo_devices()
        self.entries = self.folders = 0
        self.entered: dict[tuple[int, int], tuple[str, bool]] = {}  # (device, inode) -> (where, by a link)
        self.images: list[tuple[str, str | None, list[str]]] = []  # (folder's path, its class, image names)
        self.skipped: list[str] = []
        self.progress, self.stream = progress, stream
        self.started = self.shown = time.perf_counter()
        self.said = False

    # where things are, in error lines

    def name(self, relative: str) -> str:
        return f"{relative} in the image folder {self.folder}"

    def file_system(self, st: os.stat_result) -> str | None:
        return self.pseudo.get(st.st_dev)

    # the walk

    def walk(self) -> None:
        """Every folder from the top, depth first in name order (iterative: no recursion limit)."""
        root = self.root_stat()
        self.enter(root, "", None)
        stack = [(self.text, "", 0, None)]
        while stack:
            path, relative, depth, label = stack.pop()
            children = self.read(path, relative, depth, label)
            stack.extend(reversed(children))
        self.done()

    def root_stat(self) -> os.stat_result:
        try:
            st = os.stat(self.folder)
        except FileNotFoundError:
            st = None
        except OSError as err:
            raise DataError(
                f"image folder {self.folder} cannot be read ({reason(err)}): {self.hint} names another"
            ) from None
        if st is None or not stat.S_ISDIR(st.st_mode):
            what = "is not a folder" if st is not None else "not found"
            raise DataError(f"image folder {self.folder} {what}: {self.hint} says where the images are ({layouts()})")
        if kind := self.file_system(st):
            raise DataError(
                f"image folder {self.folder} is on the {kind} file system, which holds the kernel's state, "
                f"not images: {self.hint} names a folder of images"
            )
        return st

    def enter(self, st: os.stat_result, relative: str, target: str | None) -> None:
        """Note a folder entered (``target``: the resolved folder a link points at, or None),
        or refuse it: read already (a loop, a second path), on a pseudo file system."""
        key = (st.st_dev, st.st_ino)
        if key in self.entered:
            first, by_link = self.entered[key]
            first_name = first or "the image folder itself"
            if target is not None:
                parent = os.path.realpath(os.path.join(self.text, os.path.dirname(relative)))
                loop = inside(parent, target)
                why = "a loop" if loop else "a second path to the same images"
                raise DataError(
                    f"{self.name(relative)} is a link to {target}, a folder read already ({first_name}): {why}; "
                    "remove the link"
                )
            how = "a link to it" if by_link else "a mount of the same folder"
            raise DataError(
                f"{self.name(relative)} is read already as {first_name} ({how}): remove the link, so that its "
                "images are read once"
            )
        if kind := self.file_system(st):
            where = f"is a link to {target}, which is" if target is not None else "is"
            raise DataError(
                f"{self.name(relative)} {where} on the {kind} file system (the kernel's state, not images): "
                f"remove it, or point {self.setting} at the images alone"
            )
        self.entered[key] = (relative, target is not None)

    def read(self, path: str, relative: str, depth: int, label: str | None) -> list[tuple[str, str, int, str | None]]:
        """One folder's entries: its image names noted, its sub-folders (to walk) returned in name
        order."""
        self.folders += 1
        if self.folders > self.limits.folders:
            raise DataError(
                f"image folder {self.folder} has more than {self.limits.folders:,} folders (data.max_folders), "
                f"{self.entries:,} entries scanned so far: point {self.setting} at the images alone, or raise "
                "data.max_folders"
            )
        self.count()  # a progress line, where one is due
        images, folders = [], []
        seen, left = self.entries, self.limits.entries - self.entries  # entries before this folder, and allowed in it
        n = 0
        try:
            with os.scandir(path) as entries:
                for n, entry in enumerate(entries, start=1):
                    if n > left or not n % CHECK_EVERY:
                        self.entries = seen + n
                        self.count()
                    name = entry.name
                    if name.startswith("."):  # hidden
                        continue
                    if entry.is_dir(follow_symlinks=False):
                        folders.append((name, entry.stat(follow_symlinks=False), None))
                    elif entry.is_file(follow_symlinks=False):
                        if name.lower().endswith(IMAGE_EXTENSIONS):  # is_image_name, inlined: the scan's hot loop
                            images.append(name)
                    elif entry.is_symlink():
                        self.link(entry.path, join(relative, name), images, folders)
                    elif is_image_name(name):
                        self.skipped.append(join(relative, name))
        except OSError as err:
            where = f"image folder {self.folder}" if not relative else f"folder {self.name(relative)}"
            raise DataError(f"{where} cannot be read ({reason(err)}): give it read access, or move it out") from None
        finally:
            self.entries = seen + n
        if images:
            self.images.append((path, label, images))
        children = []
        for name, st, target in sorted(folders, key=lambda f: f[0]):
            child = join(relative, name)
            if depth + 1 > self.limits.depth:
                raise DataError(
                    f"{self.name(child)} lies {depth + 1} folders deep, deeper than data.max_depth="
                    f"{self.limits.depth}: raise data.max_depth if your images are nested so deep"
                )
            self.enter(st, child, target)
            children.append((os.path.join(path, name), child, depth + 1, name if label is None else label))
        return children

    def link(self, path: str, relative: str, images: list[str], folders: list) -> None:
        """A symbolic link: a folder inside followed, one outside refused; a file followed; an
        image name that leads to no regular file skipped."""
        try:
            st = os.stat(path)
        except OSError:  # dangling, or a loop of links
            st = None
        name = os.path.basename(relative)
        if st is not None and stat.S_ISDIR(st.st_mode):
            target = os.path.realpath(path)
            if not inside(target, self.real):
                raise DataError(
                    f"{self.name(relative)} is a link to the folder {target}, outside it: only what lies inside "
                    f"{self.setting} is read; copy or move that folder in, or point {self.setting} at a folder "
                    "that holds both"
                )
            folders.append((name, st, target))
        elif not is_image_name(name):
            return
        elif st is not None and stat.S_ISREG(st.st_mode):
            if kind := self.file_system(st):
                raise DataError(
                    f"{self.name(relative)} is a link to {os.path.realpath(path)}, a file of the {kind} file "
                    "system (the kernel's state, not an image): remove it"
                )
            images.append(name)
        else:
            self.skipped.append(relative)

    def count(self) -> None:
        """The bound on entries, and now and then a progress line."""
        if self.entries > self.limits.entries:
            raise DataError(
                f"image folder {self.folder} holds more than {self.limits.entries:,} entries (data.max_entries: "
                f"files, folders and links; {self.folders:,} folders entered so far): point {self.setting} at "
                "the images alone, or raise data.max_entries"
            )
        if self.progress:
            now = time.perf_counter()
            if now - self.shown >= PROGRESS_EVERY_S:
                self.shown, self.said = now, True
                self.say(f"{self.entries:,} entries in {folder_count(self.folders)} so far")

    def say(self, what: str) -> None:
        stream = self.stream if self.stream is not None else sys.stderr
        print(f"scanning {self.folder}: {what} ({time.perf_counter() - self.started:.0f} s)", file=stream, flush=True)

    def done(self) -> None:
        if self.said:
            images = sum(len(names) for _, _, names in self.images)
            self.say(f"done, {self.entries:,} entries in {folder_count(self.folders)}, {images:,} image files")


def folder_count(n: int) -> str:
    return f"{n:,} folder" if n == 1 else f"{n:,} folders"


def join(relative: str, name: str) -> str:
    return f"{relative}/{name}" if relative else name


def within(folder: str, names: list[str]) -> list[str]:
    """``os.path.join(folder, name)`` of each name (one prefix: a folder may hold millions)."""
    prefix = folder if folder.endswith(os.sep) else folder + os.sep
    return [prefix + name for name in names]


def scan_image_folder(
    root: str | os.PathLike,
    root_hint: str = "data.root=<folder>",
    limits: ScanLimits = DEFAULT_LIMITS,
    progress: bool = False,
    stream: TextIO | None = None,
) -> Listing:
    """The image files under ``root`` in either layout, without opening them (the module's
    docstring says which, and what is refused): one DataError line for a missing, empty or
    unreadable folder (``root_hint``: how the command names another), a link out of it or in a
    loop, a pseudo file system, a bound passed, one class only, a class folder without images, and
    images both at the top and in class folders. ``progress``: a line on stderr (``stream``)
    every ``PROGRESS_EVERY_S`` seconds of a long scan."""
    folder = Path(root).expanduser().absolute()
    scan = Scan(folder, root_hint, limits, progress, stream)
    scan.walk()
    top = sorted(name for path, label, names in scan.images if label is None for name in names)
    classes = sorted(class_folders(scan))
    index = {c: i for i, c in enumerate(classes)}
    found = sorted((index[label], path, names) for path, label, names in scan.images if label is not None)
    skipped = tuple(sorted(scan.skipped))
    if top and found:
        filled = sorted({classes[i] for i, _, _ in found})
        raise DataError(
            f"image folder {folder} holds images both at its top ({examples(top)}) and in sub-folders "
            f"({examples(filled)}): put every image in a class folder (labelled), or all of them directly "
            f"in {folder.name}/ (unlabelled)"
        )
    if top:  # flat; sub-folders without images are no classes
        return Listing(folder, tuple(within(scan.text, top)), None, (), skipped)
    if not found:
        raise DataError(f"image folder {folder} holds no images ({FORMAT_WORDS}): {layouts()}")
    filled = {i for i, _, _ in found}
    empty = [c for c in classes if index[c] not in filled]
    if empty:
        more = f" (and {len(empty) - 1:,} more class folders without images)" if len(empty) > 1 else ""
        raise DataError(
            f"class folder {folder / empty[0]} holds no images ({FORMAT_WORDS}){more}: add images or remove it "
            f"(every sub-folder of {folder} is a class)"
        )
    if len(classes) == 1:
        raise DataError(
            f"image folder {folder} has one class folder ({classes[0]}): a labelled folder needs two or more; "
            f"for unlabelled images put them directly in {folder.name}/ (the flat layout)"
        )
    paths, labels = [], []
    for i, path, names in found:  # classes in name order, each one's folders by path, files by name
        paths += within(path, sorted(names))
        labels += [i] * len(names)
    return Listing(folder, tuple(paths), tuple(labels), tuple(classes), skipped)


def class_folders(scan: Scan) -> set[str]:
    """The top's sub-folders (each a class in the labelled layout), found or not to hold images."""
    return {relative for relative, _ in scan.entered.values() if relative and "/" not in relative}


def count_classes(root: str | os.PathLike, max_entries: int = MAX_ENTRIES) -> int | None:
    """The classes of the folder ``root`` from its top alone (its sub-folders; None for images at
    the top, no sub-folder, or a top that cannot be read or passes ``max_entries``): what the
    full scan finds whenever it passes."""
    folders, seen = 0, 0
    try:
        with os.scandir(Path(root).expanduser()) as entries:
            for entry in entries:
                seen += 1
                if seen > max_entries:
                    return None
                if hidden(entry.name):
                    continue
                if entry.is_dir():
                    folders += 1
                elif is_image_name(entry.name) and entry.is_file():
                    return None
    except OSError:
        return None
    return folders or None


def check_split_sizes(count: int, classes: int, val_size: int, test_size: int, where: str) -> None:
    """One ConfigError line unless ``val_size`` and ``test_size`` (each >= 1) leave every one
    of ``classes`` room for a training image among the ``count`` images of ``where``."""
    check_int("val_size", val_size, 1)
    check_int("test_size", test_size, 1)
    if val_size + test_size > count - classes:
        one_per_class = f" (one per class: {classes})" if classes > 1 else ""
        images = f"{count} image" if count == 1 else f"{count} images"
        # no sizes fit under classes + 2 images: lowering them cannot help
        fix = "lower them, or add images" if count >= classes + 2 else f"add images ({classes + 2} at least)"
        raise ConfigError(
            f"data.val_size={val_size} + data.test_size={test_size} leave too few of the {images} "
            f"of {where} for training{one_per_class}: {fix}"
        )


def check_labels(labelled: bool, num_labels: int | None, where: str) -> None:
    """One ConfigError line for ``data.num_labels`` on a flat folder (``labelled`` false): it
    keeps the labels of some images, and a flat folder's images have none (else the run reads
    every image, then says there are 0 labelled samples)."""
    if num_labels is not None and not labelled:
        raise ConfigError(
            f"data.num_labels={num_labels} keeps the labels of that many images, but the images of {where} "
            "have none (they lie directly in it, no class folders): put them in one sub-folder per class, "
            "or set data.num_labels=null"
        )
