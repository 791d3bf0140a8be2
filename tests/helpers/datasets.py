"""Tiny datasets written in each dataset's real on-disk format, for torchvision to read.

Image i is filled with the value i % 200 (channel c adds 50 c), label i % 10 (or i % 100):
tests can tell which image landed where. torchvision checks the md5 of what it reads
against its published sums; ``trust`` points those sums at the files written here.
"""

from __future__ import annotations

import hashlib
import pickle
import struct
from pathlib import Path

import numpy as np
import torchvision.datasets


def fake_images(n: int, shape, classes: int = 10, start: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Image i is filled with value i (mod 200); channel c of a colour image adds 50*c."""
    index = np.arange(start, start + n)
    labels = index % classes
    images = np.broadcast_to((index % 200).reshape(n, *[1] * len(shape)), (n, *shape)).copy()
    if len(shape) == 3:
        images += (np.arange(shape[0]) * 50).reshape(1, -1, 1, 1).astype(images.dtype)
    return images.astype(np.uint8), labels.astype(np.uint8)


def md5(path: Path) -> str:
    return hashlib.md5(Path(path).read_bytes()).hexdigest()


def write_idx(path: Path, array: np.ndarray) -> None:
    """torchvision's read_sn3_pascalvincent_tensor: magic 0x0000 08 <ndim>, big-endian dims."""
    path.parent.mkdir(parents=True, exist_ok=True)
    header = struct.pack(">I", 0x0800 | array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    path.write_bytes(header + array.astype(np.uint8).tobytes())


def write_mnist(root: Path, n_train: int = 100, n_test: int = 30) -> Path:
    raw = Path(root) / "MNIST" / "raw"
    for prefix, n in [("train", n_train), ("t10k", n_test)]:
        images, labels = fake_images(n, (28, 28))
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels)
    return raw


def write_cifar(root: Path, monkeypatch, classes: int = 10, per_batch: int = 20, n_test: int = 30) -> Path:
    """CIFAR-10 (5 pickled training batches + a test batch) or CIFAR-100 (one ``train`` and
    one ``test`` pickle, ``fine_labels``), test images numbered after the training ones."""
    cls = torchvision.datasets.CIFAR10 if classes == 10 else torchvision.datasets.CIFAR100
    folder = Path(root) / cls.base_folder
    folder.mkdir(parents=True)
    train_names = [name for name, _ in cls.train_list]
    n_train = per_batch * len(train_names)
    images, labels = fake_images(n_train + n_test, (3, 32, 32), classes)
    key = "labels" if classes == 10 else "fine_labels"
    parts = [slice(per_batch * k, per_batch * (k + 1)) for k in range(len(train_names))] + [slice(n_train, None)]
    for name, part in zip([*train_names, cls.test_list[0][0]], parts):
        entry = {"data": images[part].reshape(-1, 3072), key: labels[part].tolist(), "filenames": []}
        (folder / name).write_bytes(pickle.dumps(entry))
    meta_key = "label_names" if classes == 10 else "fine_label_names"
    (folder / cls.meta["filename"]).write_bytes(pickle.dumps({meta_key: [f"c{i}" for i in range(classes)]}))
    trust(monkeypatch, cls, folder)
    return folder


def write_svhn(root: Path, monkeypatch, counts=(("train", 100), ("test", 30))) -> Path:
    """SVHN's .mat files: X (32, 32, 3, N) uint8, y (N, 1) with the digit 0 labelled 10."""
    from scipy.io import savemat

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    start = 0
    for part, n in counts:
        images, labels = fake_images(n, (3, 32, 32), start=start)
        start += n
        y = np.where(labels == 0, 10, labels).reshape(-1, 1)
        savemat(root / torchvision.datasets.SVHN.split_list[part][1], {"X": images.transpose(2, 3, 1, 0), "y": y})
    trust(monkeypatch, torchvision.datasets.SVHN, root)
    return root


def write_stl10(root: Path, monkeypatch, n_train: int = 100, n_test: int = 30, n_unlabelled: int = 50) -> Path:
    """STL-10's binary files (uint8 images stored 3 x 96 x 96 column-major, labels 1..10),
    10 folds of ``n_train // 10`` training images each, class names."""
    folder = Path(root) / "stl10_binary"
    folder.mkdir(parents=True)
    start = 0
    for name, n in [("train", n_train), ("test", n_test), ("unlabeled", n_unlabelled)]:
        images, labels = fake_images(n, (3, 96, 96), start=start)
        start += n
        (folder / f"{name}_X.bin").write_bytes(np.ascontiguousarray(images.transpose(0, 1, 3, 2)).tobytes())
        if name != "unlabeled":
            (folder / f"{name}_y.bin").write_bytes((labels + 1).astype(np.uint8).tobytes())
    folds = np.arange(n_train).reshape(10, -1)
    (folder / "fold_indices.txt").write_text("\n".join(" ".join(map(str, f)) for f in folds) + "\n")
    (folder / "class_names.txt").write_text("\n".join(f"c{i}" for i in range(10)) + "\n")
    trust(monkeypatch, torchvision.datasets.STL10, folder)
    return folder


def trust(monkeypatch, cls, folder: Path) -> None:
    """Point a torchvision dataset class's md5 sums at the files in ``folder``."""

    def sums(entries):
        return [[name, md5(folder / name) if (folder / name).is_file() else m] for name, m in entries]

    if cls is torchvision.datasets.SVHN:
        monkeypatch.setattr(
            cls,
            "split_list",
            {
                part: [url, name, md5(folder / name) if (folder / name).is_file() else m]
                for part, (url, name, m) in cls.split_list.items()
            },
        )
        return
    monkeypatch.setattr(cls, "train_list", sums(cls.train_list))
    monkeypatch.setattr(cls, "test_list", sums(cls.test_list))
    if hasattr(cls, "meta"):
        monkeypatch.setattr(cls, "meta", {**cls.meta, "md5": md5(folder / cls.meta["filename"])})
