"""The scan of a folder of images stays inside it and is bounded: links out of it or in a loop,
pseudo file systems and folders above the bounds are one line each; file links are followed,
FIFOs and dangling links skipped and said; a refused folder leaves the launch folder as it was.
Empty files stand in for images: the scan opens none."""

from __future__ import annotations

import io
import logging
import os
from pathlib import Path

import pytest

import swwae.folder_scan as folder_scan
from helpers.cli import train_here
from helpers.image_folders import write_image_folder
from swwae.errors import DataError
from swwae.folder_scan import ScanLimits, scan_image_folder

LINUX_PROC = Path("/proc/self/mountinfo").is_file()


def empty_images(folder: Path, *names: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).touch()
    return folder


def pets(root: Path, per_class: int = 2) -> Path:
    """A labelled folder of empty image files: cat/ and dog/."""
    for label in ("cat", "dog"):
        empty_images(root / label, *(f"{i}.png" for i in range(per_class)))
    return root


def refused(root, **limits) -> str:
    with pytest.raises(DataError) as err:
        scan_image_folder(root, limits=ScanLimits(**limits))
    message = str(err.value)
    assert "\n" not in message
    return message


# links to folders: inside followed once, outside and loops refused


def test_a_link_to_the_root_of_the_file_system_is_refused_naming_it(tmp_path):
    root = pets(tmp_path / "pets")
    (root / "cat" / "up").symlink_to("/")
    message = refused(root)
    assert message.startswith(f"cat/up in the image folder {root} is a link to the folder /, outside it")
    assert "copy or move that folder in, or point data.root at a folder that holds both" in message


@pytest.mark.parametrize("target", ["..", ".", "../../pets"])
def test_a_link_in_a_loop_is_refused(tmp_path, target):
    root = pets(tmp_path / "pets")
    (root / "cat" / "again").symlink_to(target)
    message = refused(root)
    assert message.startswith("cat/again in the image folder") and "a loop; remove the link" in message


def test_a_link_to_a_folder_outside_is_refused_and_its_images_never_join(tmp_path):
    root = pets(tmp_path / "pets")
    outside = empty_images(tmp_path / "elsewhere" / "more", "x.png")
    (root / "dog" / "more").symlink_to(outside)
    message = refused(root)
    assert f"dog/more in the image folder {root} is a link to the folder {outside}, outside it" in message


def test_a_linked_store_inside_is_read_once_and_a_second_path_to_it_is_refused(tmp_path):
    """Class folders assembled by links to a hidden store inside the folder: each read once,
    under the link's name; a second link to a folder read already would count it twice."""
    root = tmp_path / "pets"
    empty_images(root / ".store" / "cats", "a.png", "b.png")
    empty_images(root / ".store" / "dogs", "c.png")
    (root / "cat").symlink_to(".store/cats")
    (root / "dog").symlink_to(root / ".store" / "dogs")  # absolute or relative: the same
    listing = scan_image_folder(root)
    assert [listing.relative(p) for p in listing.paths] == ["cat/a.png", "cat/b.png", "dog/c.png"]
    assert listing.labels == (0, 0, 1) and listing.classes == ("cat", "dog")
    (root / "dog" / "twice").symlink_to("../cats")  # in dog's target: .store/dogs/twice -> .store/cats
    assert "a second path to the same images; remove the link" in refused(root)


def test_a_folder_linked_before_it_is_reached_names_the_link(tmp_path):
    root = pets(tmp_path / "pets")
    empty_images(root / "dog" / "puppies", "p.png")
    (root / "cat" / "also").symlink_to("../dog/puppies")  # cat/ is read before dog/
    message = refused(root)
    assert message.startswith(f"dog/puppies in the image folder {root} is read already as cat/also (a link to it)")


# links to files, and entries that are no regular files


def test_links_to_files_are_followed_wherever_they_point(tmp_path):
    root = pets(tmp_path / "pets")
    outside = empty_images(tmp_path / "store", "far.png")
    (root / "cat" / "far.png").symlink_to(outside / "far.png")
    (root / "dog" / "near.png").symlink_to("../cat/0.png")  # a file linked twice counts twice
    listing = scan_image_folder(root)
    files = [listing.relative(p) for p in listing.paths]
    assert files == ["cat/0.png", "cat/1.png", "cat/far.png", "dog/0.png", "dog/1.png", "dog/near.png"]


def test_fifos_devices_and_dangling_links_are_skipped_and_said_once(tmp_path, caplog):
    from swwae.training.data.image_folder import read_image_folder

    root = write_image_folder(tmp_path / "pets", per_class=3)
    os.mkfifo(root / "cat" / "pipe.png")
    (root / "cat" / "gone.png").symlink_to(tmp_path / "nothing.png")
    (root / "dog" / "zero.png").symlink_to("/dev/zero")
    (root / "dog" / "notes").symlink_to(tmp_path / "nothing")  # no image name: passed over unsaid
    assert scan_image_folder(root).skipped == ("cat/gone.png", "cat/pipe.png", "dog/zero.png")
    with caplog.at_level(logging.WARNING):
        contents = read_image_folder(root, 4, 3, progress=False)
    assert len(contents.files) == 6
    (line,) = [r.getMessage() for r in caplog.records if "skipped" in r.getMessage()]
    assert "skipped 3 entries (an image name, but no regular file behind it" in line and "cat/gone.png" in line


# pseudo file systems


@pytest.mark.skipif(not LINUX_PROC, reason="no /proc here")
def test_proc_as_the_folder_is_refused_at_once():
    message = refused("/proc/self")
    assert message.startswith("image folder /proc/self is on the proc file system")


@pytest.mark.skipif(not LINUX_PROC, reason="no /proc here")
def test_a_link_to_a_file_of_proc_is_refused(tmp_path):
    root = pets(tmp_path / "pets")
    (root / "cat" / "env.png").symlink_to("/proc/self/environ")
    assert "a file of the proc file system (the kernel's state, not an image): remove it" in refused(root)


def test_the_mount_table_marks_pseudo_file_systems_by_device(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 27 0:21 / /proc rw,relatime - proc proc rw\n"
        "27 1 254:0 / / rw,relatime - ext4 /dev/vda rw\n"
        "31 23 0:28 / /sys/fs/cgroup rw shared:9 master:2 - cgroup2 cgroup2 rw\n"
        "garbage\n"
    )
    assert folder_scan.pseudo_devices(str(table)) == {os.makedev(0, 21): "proc", os.makedev(0, 28): "cgroup2"}
    assert folder_scan.pseudo_devices(str(tmp_path / "none")) == {}  # no table: the bounds still hold


# the bounds


@pytest.fixture(scope="module")
def crowded(tmp_path_factory) -> Path:
    """A folder of 100,000 empty entries (made with mknod: one call each)."""
    root = tmp_path_factory.mktemp("crowded")
    for i in range(100_000):
        os.mknod(root / f"{i:06d}.png")
    return root


def test_a_crowded_folder_stops_at_the_entry_bound_and_says_which(crowded, monkeypatch):
    message = refused(crowded, entries=50_000)
    assert message.startswith(f"image folder {crowded} holds more than 50,000 entries (data.max_entries")
    assert message.endswith("or raise data.max_entries")
    monkeypatch.setattr(folder_scan, "PROGRESS_EVERY_S", 0.0)  # a line as often as the scan looks at the clock
    lines = io.StringIO()
    listing = scan_image_folder(crowded, progress=True, stream=lines)  # under the default bound: all of it
    assert len(listing.paths) == 100_000 and listing.labels is None
    said = lines.getvalue().splitlines()
    assert f"scanning {crowded}: 4,096 entries in 1 folder so far" in [line.rpartition(" (")[0] for line in said]
    assert said[-1].startswith(f"scanning {crowded}: done, 100,000 entries in 1 folder, 100,000 image files")


def test_folders_and_depth_have_bounds(tmp_path):
    root = pets(tmp_path / "pets")
    empty_images(root / "cat" / "a" / "b", "deep.png")
    assert "pets has more than 3 folders (data.max_folders)" in refused(root, folders=3)
    message = refused(root, depth=2)
    assert (
        message.startswith("cat/a/b in the image folder") and "3 folders deep, deeper than data.max_depth=2" in message
    )
    assert len(scan_image_folder(root, limits=ScanLimits(folders=5, depth=3)).paths) == 5


# through the job: before anything is written


def test_a_refused_folder_leaves_the_launch_folder_as_it_was(tmp_path):
    root = pets(tmp_path / "pets")
    (root / "cat" / "up").symlink_to("/")
    launch = tmp_path / "launch"
    launch.mkdir()
    result = train_here(launch, "data=image_folder", f"data.root={root}")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert line.startswith("error: cat/up in the image folder") and "outside it" in line
    assert not any(launch.iterdir())


def test_too_few_images_for_many_classes_is_one_line_before_any_is_read(tmp_path):
    root = tmp_path / "many"
    for c in range(300):
        empty_images(root / f"c{c:03d}", "a.png")  # empty files: none is opened before the check
    launch = tmp_path / "launch"
    launch.mkdir()
    result = train_here(launch, "data=image_folder", f"data.root={root}")
    assert result.returncode == 2
    (line,) = result.stderr.splitlines()
    assert "leave too few of the 300 images" in line and "(one per class: 300)" in line
    assert not any(launch.iterdir())
