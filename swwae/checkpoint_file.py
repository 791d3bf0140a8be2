"""The one reader of checkpoint files, and their content checksum. Pure torch.

Every read of a checkpoint (``swwae.load``, resume, testing the best epoch, the scripts, and
Lightning's own ``ckpt_path`` loads through ``AtomicCheckpointIO``) goes through
``read_checkpoint``:

* ``torch.load(..., weights_only=True)``, passed explicitly: torch's
  ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` only overrides callers that leave it unset, so a
  crafted pickle can never run code here, whatever the environment says;
* a content checksum: the training job writes ``swwae_checksum`` (SHA-256 over every tensor's
  bytes and every plain value) into each checkpoint; a file whose bytes changed (a flipped bit
  inside a tensor, which torch's loader does not notice: it checks no zip CRC) reads as
  corrupt, in one line. Checkpoints written before checksums existed have none and load as
  they are;
* bounds and a parse: only a regular file is opened, its nesting is bounded before the
  checksum walks it, and every entry swwae reads (state dict, network settings, run config,
  epoch, step, mid-epoch position) is parsed (``swwae.stored.parse_checkpoint``), and the
  state dict holds no tensor of a dtype that no network keeps (bool, complex, int32: cast
  into a float parameter, it would be evaluated without a word). A file that torch cannot
  read, or with a valid checksum and odd contents, is "unreadable" in one line saying why,
  and resume passes over it. Where a network is built from it (``network_of``), each tensor
  is held to the network's own: name, shape and kind of dtype.
"""

from __future__ import annotations

import errno
import hashlib
import os
import pickle
import zipfile
from collections.abc import Callable, Mapping
from pathlib import Path

import torch

from swwae.errors import CheckpointError, Corrupt, Unreadable, one_line
from swwae.files import check_nesting, open_regular, sha256_of
from swwae.model import SWWAE
from swwae.pretrained import (
    FLOAT_DTYPES,
    KEPT_DTYPES,
    check_pool_mode,
    check_tensors,
    meta_kinds,
    run_checkpoint_hint,
    tensor_kinds,
)
from swwae.stored import parse_checkpoint

CHECKPOINT_CHECKSUM_KEY = "swwae_checksum"  # in a checkpoint: the checksum of its other entries
POSITION_KEY = "swwae_preempted"  # in a checkpoint saved mid-epoch: {"epoch": e, "batches_done": k}
REQUIRED_KEYS = ("state_dict", "hyper_parameters", "swwae_config")
DEPTH_LIMIT = 32  # containers inside containers: Lightning's checkpoints nest 7 deep
CHECKPOINT_ITEMS_LIMIT = 10_000_000  # entries of every container together

# helpers


def mid_epoch_position(checkpoint: Mapping) -> tuple[int, int] | None:
    """(epoch, batches already trained in it) of a checkpoint saved mid-epoch (its
    ``POSITION_KEY``), else None."""
    position = checkpoint.get(POSITION_KEY)
    return None if not position else (int(position["epoch"]), int(position["batches_done"]))


def mid_epoch_means(checkpoint: Mapping) -> dict | None:
    """The training sums of the epoch so far (``TermMeans.totals``) that a checkpoint saved
    mid-epoch carries, else None."""
    return (checkpoint.get(POSITION_KEY) or {}).get("train_means")


def _feed(digest, value) -> None:
    """Hash ``value`` canonically: the same contents give the same bytes, whatever the
    container types (a dict's keys in sorted order)."""
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        digest.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        # the array itself, not a copy of its bytes: hashlib reads it without holding the GIL
        # (a checkpoint written in a background thread, swwae.training.checkpoints)
        digest.update(t.reshape(-1).view(torch.uint8).numpy() if t.numel() else b"")
    elif isinstance(value, Mapping):
        digest.update(f"D{len(value)}".encode())
        for key in sorted(value, key=repr):
            _feed(digest, key)
            _feed(digest, value[key])
    elif isinstance(value, (list, tuple)):
        digest.update(f"L{len(value)}".encode())
        for item in value:
            _feed(digest, item)
    else:
        digest.update(f"V{type(value).__name__}:{value!r};".encode())


def content_checksum(checkpoint: Mapping) -> str:
    """SHA-256 of a checkpoint's contents, its own checksum entry left out."""
    digest = hashlib.sha256()
    _feed(digest, {k: v for k, v in checkpoint.items() if k != CHECKPOINT_CHECKSUM_KEY})
    return digest.hexdigest()


def file_sha256(path) -> str:
    """SHA-256 of a file's bytes, as ``sha256sum`` prints it: what ``metrics.json`` records of
    the checkpoint it reports."""
    return sha256_of(path, "checkpoint")


def with_checksum(checkpoint: dict) -> dict:
    """``checkpoint`` with its content checksum added (in place, and returned)."""
    checkpoint[CHECKPOINT_CHECKSUM_KEY] = content_checksum(checkpoint)
    return checkpoint


# reading


ZIP_HEAD, PICKLE_HEAD = b"PK\x03\x04", b"\x80"  # torch.save's zip archive; a pickle, its format before torch 1.6


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(4)


def why_unreadable(path: Path) -> str:
    """Why ``torch.load`` could not read the file at ``path``, from what the file is (its
    unpickler's own error says ``KeyError: 101`` or ``IndexError: pop from empty list``)."""
    head = _head(path)
    if not head:
        return "the file is empty"
    if head == ZIP_HEAD:
        try:
            with zipfile.ZipFile(path) as archive:
                names = archive.namelist()
        except (zipfile.BadZipFile, OSError, ValueError):
            return "a zip archive cut short or damaged (truncated or corrupt?)"
        if not any(name.endswith("/data.pkl") for name in names):
            return "a zip archive, but not one torch.save wrote (it holds no data.pkl)"
        return "torch.save's zip archive, but what it holds does not unpickle (corrupt?)"
    if head.startswith(PICKLE_HEAD):
        return "a pickle cut short or damaged (truncated or corrupt?)"
    return "not a file that torch.save writes (neither a zip archive nor a pickle)"


def load_weights_only(path) -> object:
    """``torch.load`` of tensors and plain values only, or CheckpointError (one line)."""
    path = Path(path)
    if path.is_dir():
        raise CheckpointError(f"checkpoint {path} is a folder, not a checkpoint file{run_checkpoint_hint(path)}")
    os.close(open_regular(path, "checkpoint"))  # a device or FIFO is never read
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        # a pickle of arbitrary objects: not ours (torch's weights-only unpickler refuses any other
        # file, an image given for a checkpoint, in the same words: it read its first byte as an opcode)
        if "weights only" in str(err).lower() and _head(path).startswith((ZIP_HEAD, PICKLE_HEAD)):
            raise CheckpointError(
                f"checkpoint {path} holds pickled objects, not tensors and plain values: it was not written by "
                f"swwae's train.py, and is not loaded (a pickle can run code)"
            ) from None
        raise Unreadable(f"checkpoint {path} is unreadable: {why_unreadable(path)}") from None
    except OSError as err:
        # EINVAL: torch's reader seeks before the file's start where a zip archive's directory is cut off, a fault
        # of the bytes (as the file says); any other OSError is the disk's (EIO), said as the system says it
        why = why_unreadable(path) if err.errno == errno.EINVAL else err.strerror or one_line(err)
        raise Unreadable(f"checkpoint {path} is unreadable: {why}") from None
    except Exception:  # noqa: BLE001 - corrupt bytes fail the unpickler in any way (KeyError, IndexError, ...)
        raise Unreadable(f"checkpoint {path} is unreadable: {why_unreadable(path)}") from None


def read_checkpoint(path) -> dict:
    """The checkpoint's dict, checked to be one that swwae's train.py wrote and, where it
    carries a checksum, to hold the bytes that were written."""
    return verified(load_weights_only(path), path)


def verified(checkpoint: object, path="checkpoint") -> dict:
    """``checkpoint`` (as loaded), its checksum entry removed, or CheckpointError (one line)
    if it is not swwae's, its contents do not match its checksum, or a tensor of its state
    dict is of a dtype no network keeps (``Unreadable``: bool, complex, int32, ...; which
    tensor must be which is checked where a network is built from it, ``network_of``)."""
    if not isinstance(checkpoint, dict):
        raise Unreadable(
            f"checkpoint {path} is unreadable: it holds a pickled {type(checkpoint).__name__}, "
            "not the entries of a checkpoint (a dict)"
        )
    if any(k not in checkpoint for k in REQUIRED_KEYS):
        raise Unreadable(
            f"checkpoint {path} is unreadable: it was not written by swwae's train.py (no state_dict or run config)"
        )
    check_nesting(checkpoint, f"checkpoint {path}", DEPTH_LIMIT, CHECKPOINT_ITEMS_LIMIT)  # before the checksum recurses
    expected = checkpoint.pop(CHECKPOINT_CHECKSUM_KEY, None)
    if expected is not None and content_checksum(checkpoint) != expected:
        raise Corrupt(f"checkpoint {path} is corrupt: its contents do not match the checksum written with it")
    checkpoint = parse_checkpoint(checkpoint, f"checkpoint {path}", POSITION_KEY)
    kinds = tensor_kinds(checkpoint["state_dict"])
    odd = sorted(name for name, (_, dtype) in kinds.items() if dtype not in KEPT_DTYPES)
    if odd:
        raise Unreadable(
            f"checkpoint {path} is unreadable: {len(odd)} of {len(kinds)} tensors are of a kind no network keeps, "
            f"e.g. {odd[0]} is {kinds[odd[0]][1]}, not floating point ({', '.join(FLOAT_DTYPES)})"
        )
    return checkpoint


def network_builder(checkpoint: dict) -> Callable[[], SWWAE]:
    """What builds the network of a checkpoint, from its model settings (``hyper_parameters``)."""
    settings = dict(checkpoint["hyper_parameters"])
    data = settings.pop("image_shape", (1, 28, 28)), settings.pop("num_classes", 10), settings.pop("pixel_mean", None)
    return lambda: SWWAE.from_settings(settings, *data)


def network_of(checkpoint: dict, path="checkpoint") -> SWWAE:
    """The trained network of a checkpoint that ``read_checkpoint`` returned: built from its
    model settings (``hyper_parameters``), its weights (the LightningModule's ``net.*``
    entries) held to the network's names, shapes and dtypes (on the meta device, before
    anything is allocated), then loaded."""
    state = {k.removeprefix("net."): v for k, v in checkpoint["state_dict"].items() if k.startswith("net.")}
    check_pool_mode(checkpoint["hyper_parameters"], f"checkpoint {path}")
    build = network_builder(checkpoint)
    try:
        expected = meta_kinds(build)
        check_tensors(expected, tensor_kinds(state), f"checkpoint {path}")
        net = build()
        net.load_state_dict(state)
    except CheckpointError:
        raise
    except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
        raise CheckpointError(f"checkpoint {path} does not fit swwae's model: {one_line(err, limit=200)}") from None
    return net
