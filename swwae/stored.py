"""What a stored file may hold, parsed before anything uses it: a checkpoint's run config, its
network settings and state dict, a model folder's ``config.json``, a ``metrics.json``, a sweep
job's overrides. Each parser takes the value a file gave (through the bounded readers of
``swwae.files``, or ``torch.load(weights_only=True)``) and returns it checked, or raises
``Unreadable`` (one line naming the entry and what it holds). A file is data: its values
are checked for their kind and shape here, never trusted because the file's checksum is right
(anyone can compute one).

``parse_stored_config`` checks the structure of a run config (its sections are mappings, its
plain values plain); it is the one place to point at a full schema of the run's settings.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Mapping

from swwae.errors import Unreadable
from swwae.files import check_nesting

PLAIN = (str, int, float, bool, type(None))
SECTIONS = ("model", "data", "trainer", "paths", "logger", "callbacks")  # mappings (or null) when present
TEXT_KEYS = ("run_name", "optimized_metric", "optimized_mode")
IMAGE_SIDE_LIMIT = 1 << 14  # pixels: no data set swwae ships is near it
CHANNELS_LIMIT = 64
LIGHTNING_MAPPINGS = ("callbacks", "loops")  # what Lightning reads on resume: its shape checked, its contents its own
LIGHTNING_LISTS = ("optimizer_states", "lr_schedulers")  # lists of mappings
SHA256 = re.compile(r"[0-9a-f]{64}")
FLOAT_MAX = sys.float_info.max  # an integer beyond it has no float

# helpers


def plain(value):
    """``value`` as a stored file holds it (JSON, a checkpoint's run config): tuples as lists,
    numpy and one-element tensor numbers as Python numbers; dicts and lists copied, so later
    changes to the original do not show. The one conversion a run's identity, a model
    folder's ``config.json`` and the network's settings all make."""
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "item") and callable(value.item) and getattr(value, "ndim", 0) == 0:  # numpy or 0-d tensor
        return value.item()
    return value


def kind(value) -> str:
    """What a value is, in a few words, for an error line."""
    text = repr(value)
    return f"{type(value).__name__} {text[:40]}{'...' if len(text) > 40 else ''}"


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def finite_number(value) -> bool:
    return is_number(value) and abs(value) <= FLOAT_MAX and math.isfinite(value)


def is_json_like(value) -> bool:
    """Plain values, and mappings with string keys and lists of them, all the way down."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, Mapping):
            if not all(isinstance(k, str) for k in node):
                return False
            stack.extend(node.values())
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif not isinstance(node, PLAIN):
            return False
    return True


def mapping(value, source: str, what: str) -> dict:
    """``value`` as a dict with string keys, or Unreadable."""
    if not isinstance(value, Mapping):
        raise Unreadable(f"{source} is unreadable: {what} is {kind(value)}, not a mapping")
    if not all(isinstance(k, str) for k in value):
        raise Unreadable(f"{source} is unreadable: {what} has a key that is not a string")
    return dict(value)


def optional_int(value, source: str, what: str, minimum: int | None = None) -> int | None:
    if value is None:
        return None
    if not is_int(value) or (minimum is not None and value < minimum):
        at_least = f" >= {minimum}" if minimum is not None else ""
        raise Unreadable(f"{source} is unreadable: {what} is {kind(value)}, not an integer{at_least}")
    return value


def text(value, source: str, what: str) -> str | None:
    if value is not None and not isinstance(value, str):
        raise Unreadable(f"{source} is unreadable: {what} is {kind(value)}, not a string")
    return value


# run configs


def parse_stored_config(config, source: str = "stored config") -> dict:
    """A run config read from a file (a checkpoint's ``swwae_config``, a model folder's
    ``run_config``, a sweep job's saved config): a mapping of plain values whose sections
    (``model``, ``data``, ``trainer``, ...) are mappings, whose ``_target_``s are strings, and
    whose numbers a run compares (``seed``, ``trainer.max_epochs``/``max_steps``) are integers."""
    config = mapping(check_nesting(config, source), source, "the run config")
    if not is_json_like(config):
        raise Unreadable(f"{source} is unreadable: its run config holds a value that is not plain (a tensor?)")
    for section in SECTIONS:
        if config.get(section) is not None:
            config[section] = mapping(config[section], source, f"the run config's {section} section")
    for section in ("model", "data"):
        text((config.get(section) or {}).get("_target_"), source, f"{section}._target_")
    for key in TEXT_KEYS:
        text(config.get(key), source, key)
    optional_int(config.get("seed"), source, "seed")
    trainer = config.get("trainer") or {}
    for key in ("max_epochs", "max_steps"):
        optional_int(trainer.get(key), source, f"trainer.{key}")
    for key, value in (config.get("paths") or {}).items():
        text(value, source, f"paths.{key}")
    return config


# networks


def parse_network_settings(settings, source: str) -> dict:
    """The settings a network is built from (a checkpoint's ``hyper_parameters``, a model
    folder's ``config.json``): a mapping of plain values and lists of them, its data's image
    shape three positive integers (C, H, W), its classes an integer, its pixel mean a number or
    one per channel."""
    settings = mapping(settings, source, "the network settings")
    for key, value in settings.items():
        items = value if isinstance(value, (list, tuple)) else [value]
        if not all(isinstance(v, PLAIN) for v in items):
            raise Unreadable(f"{source} is unreadable: setting {key} is {kind(value)}, not a plain value")
    shape = settings.get("image_shape")
    if shape is not None:
        limits = (CHANNELS_LIMIT, IMAGE_SIDE_LIMIT, IMAGE_SIDE_LIMIT)
        if not (
            isinstance(shape, (list, tuple))
            and len(shape) == 3
            and all(is_int(s) and 0 < s <= limit for s, limit in zip(shape, limits))
        ):
            raise Unreadable(
                f"{source} is unreadable: image_shape is {kind(shape)}, not (channels, height, width) as positive "
                f"integers"
            )
    optional_int(settings.get("num_classes"), source, "num_classes", minimum=0)
    mean = settings.get("pixel_mean")
    means = mean if isinstance(mean, (list, tuple)) else [mean]
    if mean is not None and not (means and all(finite_number(m) for m in means)):
        raise Unreadable(f"{source} is unreadable: pixel_mean is {kind(mean)}, not a number or one per channel")
    return settings


# checkpoints


def parse_position(value, source: str) -> dict | None:
    """A mid-epoch save's position ``{"epoch": e, "batches_done": k}`` (None or {}: none)."""
    if not value:
        return None
    position = mapping(value, source, "the mid-epoch position")
    for key in ("epoch", "batches_done"):
        if optional_int(position.get(key), source, f"the mid-epoch position's {key}", minimum=0) is None:
            raise Unreadable(f"{source} is unreadable: the mid-epoch position has no {key}")
    if position.get("train_means") is not None:
        position["train_means"] = parse_train_means(position["train_means"], source)
    return position


def parse_train_means(value, source: str) -> dict:
    """A pre-empted epoch's training sums so far (``TermMeans.totals``): names, as many finite
    sums, and a positive count of samples."""
    means = mapping(value, source, "the mid-epoch training means")
    names, sums, count = means.get("names"), means.get("sums"), means.get("count")
    if not (isinstance(names, list) and 0 < len(names) <= 64 and all(isinstance(n, str) and n for n in names)):
        raise Unreadable(f"{source} is unreadable: the mid-epoch training means name no terms")
    if not (isinstance(sums, list) and len(sums) == len(names) and all(finite_number(v) for v in sums)):
        raise Unreadable(f"{source} is unreadable: the mid-epoch training means are not one number a term")
    if not (finite_number(count) and count > 0):
        raise Unreadable(f"{source} is unreadable: the mid-epoch training means count no samples")
    return {"names": names, "sums": [float(v) for v in sums], "count": float(count)}


def parse_checkpoint(checkpoint: dict, source: str, position_key: str) -> dict:
    """A checkpoint's dict (as ``torch.load(weights_only=True)`` gave it, checksum checked)
    with every entry swwae reads parsed: the state dict names tensors, the network settings and
    the run config are as above, the epoch, step and mid-epoch position are integers."""
    import torch

    state = mapping(checkpoint["state_dict"], source, "state_dict")
    odd = next((k for k, v in state.items() if not isinstance(v, torch.Tensor)), None)
    if odd is not None:
        raise Unreadable(f"{source} is unreadable: state_dict entry {odd[:60]} is {kind(state[odd])}, not a tensor")
    checkpoint["hyper_parameters"] = parse_network_settings(checkpoint["hyper_parameters"], source)
    checkpoint["swwae_config"] = parse_stored_config(checkpoint["swwae_config"], source)
    for key, minimum in (("epoch", -1), ("global_step", 0)):
        if key in checkpoint and optional_int(checkpoint[key], source, key, minimum) is None:
            raise Unreadable(f"{source} is unreadable: {key} is None, not an integer")
    if position_key in checkpoint:
        checkpoint[position_key] = parse_position(checkpoint[position_key], source)
    for key in LIGHTNING_MAPPINGS:
        if checkpoint.get(key) is not None:
            mapping(checkpoint[key], source, key)
    for key in LIGHTNING_LISTS:
        entries = checkpoint.get(key)
        if entries is not None and not isinstance(entries, (list, tuple)):
            raise Unreadable(f"{source} is unreadable: {key} is {kind(entries)}, not a list")
        for entry in entries or []:
            mapping(entry, source, f"an entry of {key}")
    return checkpoint


# metrics.json and sweep folders


def parse_metrics(record, source: str) -> dict:
    """A ``metrics.json``: a mapping whose ``metrics`` map names to numbers, whose status,
    error, run name and checkpoint are strings, whose ``checkpoint_sha256`` is a SHA-256."""
    record = mapping(record, source, "the record")
    metrics = mapping(record.get("metrics") or {}, source, "metrics")
    odd = next((k for k, v in metrics.items() if not (isinstance(v, float) or is_int(v) and abs(v) <= FLOAT_MAX)), None)
    if odd is not None:
        raise Unreadable(f"{source} is unreadable: metric {odd[:60]} is {kind(metrics[odd])}, not a number")
    record["metrics"] = {k: float(v) for k, v in metrics.items()}
    for key in ("status", "error", "run_name", "checkpoint", "identity", "model", "arch", "reported_again"):
        text(record.get(key), source, key)
    sha = record.get("checkpoint_sha256")
    if sha is not None and not (isinstance(sha, str) and SHA256.fullmatch(sha)):
        raise Unreadable(f"{source} is unreadable: checkpoint_sha256 is {kind(sha)}, not a SHA-256")
    if record.get("monitor") is not None:
        monitor = mapping(record["monitor"], source, "monitor")
        for key in ("metric", "mode"):
            text(monitor.get(key), source, f"monitor.{key}")
    seed = record.get("seed")
    if seed is not None and not (is_int(seed) or isinstance(seed, str)):
        raise Unreadable(f"{source} is unreadable: seed is {kind(seed)}, not an integer")
    return record


def parse_overrides(overrides, source: str) -> dict[str, str]:
    """A sweep job's ``.hydra/overrides.yaml``: a list of ``key=value`` strings (none: empty)."""
    if overrides is None:
        return {}
    if not isinstance(overrides, list) or not all(isinstance(item, (str, int, float, bool)) for item in overrides):
        raise Unreadable(f"{source} is unreadable: it is {kind(overrides)}, not a list of key=value overrides")
    parsed = {}
    for item in map(str, overrides):
        key, _, value = item.partition("=")
        parsed[key] = value
    return parsed
