"""A trained network as a folder anyone can load without running code. Pure torch + safetensors.

    m/config.json          the constructor's arguments (network settings, the data's image
                           shape and classes), the run config, the project version
    m/model.safetensors    the weights: tensors only, no pickle
    m/README.md            the model card (``swwae.card``): the Hub's metadata, the network,
                           its test metrics, how to load it

This is the Hugging Face Hub's layout (``PyTorchModelHubMixin``: ``config.json`` holds the
arguments that rebuild the model, ``model.safetensors`` its state dict), written and read
here without huggingface_hub; ``swwae.hub`` adds ``from_pretrained("user/repo")`` and
``push_to_hub`` on top of it. A content checksum of the tensors rides in the safetensors
header, so that a flipped bit reads as "corrupt", as it does for checkpoints.

``Pretrained`` is the mixin that gives the network ``save_pretrained`` and ``from_folder``;
it builds with ``cls(**settings)``, so it needs nothing of the class it is mixed into
(``swwae.model`` imports this module, not the other way round).
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import Tensor

from swwae.card import CARD_FILE, RunFacts, RunMetrics, model_card
from swwae.errors import CheckpointError, Unreadable, one_line
from swwae.files import read_json
from swwae.stored import parse_network_settings, parse_stored_config, plain
from swwae.version import __version__

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "swwae-folder/1"
META_KEYS = ("swwae", "run_config")  # config.json's entries beside the constructor's arguments
WEIGHTS_CHECKSUM_KEY = "swwae_sha256"  # in the safetensors header's metadata
PICKLED_WEIGHTS = ("pytorch_model.bin", "model.pt", "model.pth")
CONFIG_LIMIT = 1 << 20  # bytes: a config.json is a few kB

# helpers


def weights_checksum(state: Mapping[str, Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def write_atomically(path: Path, write: Callable[[Path], object]) -> None:
    """``write(temp)`` then rename the temp file over ``path``: a crash leaves the old file
    whole. Readable by all (0644), as a shared model folder should be, whatever mode the
    writer created it with (safetensors: 0600)."""
    temp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(temp)
        temp.chmod(0o644)
        os.replace(temp, path)
    finally:
        temp.unlink(missing_ok=True)


# writing and reading


def folder_config(settings: Mapping, *, network: str, run_config: Mapping | None) -> dict:
    """config.json's contents: the constructor's arguments at the top level (the Hub's
    convention), then swwae's own entry and the run config."""
    return {
        **plain(settings),
        "swwae": {"format": FORMAT, "version": __version__, "network": network},
        "run_config": plain(run_config) if run_config is not None else None,
    }


def check_folder_target(folder: str | Path) -> Path:
    """``CheckpointError`` (one line) when a model folder cannot be written at ``folder`` (a file is there)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"{folder} is a file: a model folder needs a folder of its own")
    return folder


def write_folder(
    net: Pretrained, folder: str | Path, *, config: Mapping | None = None, metrics: RunMetrics | None = None
) -> Path:
    """Write ``net`` into ``folder`` (created if need be; other files in it are left alone):
    its weights, its config.json, then its model card README.md, each atomically. ``config`` is
    the run config; ``metrics`` the test metrics for the card (default: the run's metrics.json)."""
    from safetensors.torch import save_file

    # the card first: one that cannot be written (a mode or data set no table knows) writes no file
    card = model_card(net, run=RunFacts.of(config), metrics=metrics)
    folder = check_folder_target(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {name: t.detach().cpu().contiguous() for name, t in net.state_dict().items()}
    metadata = {"format": "pt", WEIGHTS_CHECKSUM_KEY: weights_checksum(state)}
    write_atomically(folder / WEIGHTS_FILE, lambda temp: save_file(state, str(temp), metadata=metadata))
    text = json.dumps(
        folder_config(net.settings, network=getattr(net, "arch", type(net).__name__), run_config=config), indent=2
    )
    write_atomically(folder / CONFIG_FILE, lambda temp: temp.write_text(text + "\n"))
    write_atomically(folder / CARD_FILE, lambda temp: temp.write_text(card))
    return folder


def read_config(folder: Path) -> dict:
    """``folder/config.json``, read with bounds (a regular file of at most CONFIG_LIMIT bytes,
    nesting bounded) and parsed: the network's settings plain, its run config a run config."""
    path = folder / CONFIG_FILE
    if not folder.is_dir():
        raise CheckpointError(f"model folder {folder} does not exist")
    if not (path.exists() or path.is_symlink()):  # anything else there is read with bounds, and refused
        raise CheckpointError(
            f"{folder} holds no {CONFIG_FILE}: it is not a model folder (write one with "
            f"swwae.save_pretrained or scripts/export.py --to)"
        )
    config = read_json(path, "model folder file", CONFIG_LIMIT)  # size bounded before parsing
    if not isinstance(config, dict):
        raise Unreadable(f"{path} holds no settings (a JSON object), but {type(config).__name__}")
    written = (config.get("swwae") or {}).get("format", FORMAT) if isinstance(config.get("swwae"), dict) else FORMAT
    if written != FORMAT:
        raise CheckpointError(
            f"{path} is in the model folder format {written!r}; this swwae ({__version__}) reads {FORMAT!r}"
        )
    source = f"model folder file {path}"
    settings = parse_network_settings({k: v for k, v in config.items() if k not in META_KEYS}, source)
    run_config = config.get("run_config")
    return settings | {
        "swwae": config.get("swwae"),
        "run_config": None if run_config is None else parse_stored_config(run_config, source),
    }


def meta_shapes(build: Callable[[], torch.nn.Module]) -> dict[str, tuple[int, ...]]:
    """The tensor shapes of the module ``build()`` makes, built on the meta device: sizes
    only, nothing allocated, whatever the settings ask for."""
    with torch.device("meta"):
        return {name: tuple(t.shape) for name, t in build().state_dict().items()}


def check_shapes(expected: Mapping[str, tuple], found: Mapping[str, tuple], what: str) -> None:
    """CheckpointError (one line) unless the settings' tensors are the file's, name for name."""
    wrong = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    if wrong:
        raise CheckpointError(
            f"{what} does not fit its own settings ({len(wrong)} tensors differ, e.g. {wrong[0]}: "
            f"{found.get(wrong[0], 'missing')} in the weights, {expected.get(wrong[0], 'missing')} "
            f"by the settings): nothing was built"
        )


def weight_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """The shapes in ``folder/model.safetensors``'s header, no tensor read."""
    from safetensors import safe_open

    path = folder / WEIGHTS_FILE
    try:
        with safe_open(str(path), framework="pt") as weights:
            return {name: tuple(weights.get_slice(name).get_shape()) for name in weights.keys()}  # noqa: SIM118
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types on bad bytes
        raise CheckpointError(f"{path} is unreadable (truncated or corrupt?): {one_line(err, limit=200)}") from None


def read_weights(folder: Path) -> dict[str, Tensor]:
    """The tensors of ``folder/model.safetensors``, checked against their checksum (when the
    file carries one: a file written elsewhere may not)."""
    from safetensors import safe_open

    path = folder / WEIGHTS_FILE
    if not path.is_file():
        pickles = [name for name in PICKLED_WEIGHTS if (folder / name).exists()]
        hint = f"; {pickles[0]} is a pickle, which is never loaded (it can run code)" if pickles else ""
        raise CheckpointError(f"{folder} holds no {WEIGHTS_FILE}{hint}")
    try:
        with safe_open(str(path), framework="pt") as weights:
            metadata = weights.metadata() or {}
            state = {name: weights.get_tensor(name) for name in weights.keys()}  # noqa: SIM118 - not a dict
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types on bad bytes
        raise CheckpointError(f"{path} is unreadable (truncated or corrupt?): {one_line(err, limit=200)}") from None
    expected = metadata.get(WEIGHTS_CHECKSUM_KEY)
    if expected is not None and weights_checksum(state) != expected:
        raise CheckpointError(f"{path} is corrupt: its tensors do not match the checksum written with them")
    return state


# classes


class Pretrained:
    """What a network needs to live in a model folder. The class it is mixed into (an
    ``nn.Module``) sets ``self.settings``, its constructor's arguments as plain values, so
    that ``cls(**settings)`` builds the same network again."""

    settings: dict
    config: dict | None = None  # the run config it was trained with, when known

    def save_pretrained(
        self, folder: str | Path, *, config: Mapping | None = None, metrics: RunMetrics | None = None
    ) -> Path:
        """Write ``folder/config.json``, ``folder/model.safetensors`` and the model card
        ``folder/README.md``; ``config`` is the run config to keep with it (default:
        ``self.config``, the one ``swwae.load`` gave), ``metrics`` the card's test metrics
        (default: those of the run's ``metrics.json``, when it is found)."""
        return write_folder(self, folder, config=self.config if config is None else config, metrics=metrics)

    @classmethod
    def setting_names(cls) -> set[str]:
        """The settings ``cls(**settings)`` takes, as ``config.json`` stores them."""
        return set(inspect.signature(cls.__init__).parameters) - {"self"}

    @classmethod
    def from_folder(cls, folder: str | Path, device: str | torch.device = "cpu"):
        """The network of a model folder, in eval mode on ``device``, its run config as
        ``net.config`` ({} if none was saved). A missing, foreign, unreadable or corrupt
        folder raises ``CheckpointError`` (one line)."""
        folder = Path(folder)
        config = read_config(folder)
        known = cls.setting_names()
        unknown = sorted(set(config) - known - set(META_KEYS))
        if unknown:
            raise CheckpointError(
                f"{folder / CONFIG_FILE} holds settings that swwae's {cls.__name__} does not take "
                f"({', '.join(unknown[:5])}): it was not written by swwae"
            )
        settings = {k: v for k, v in config.items() if k in known}
        if not (folder / WEIGHTS_FILE).is_file():
            read_weights(folder)  # its one line: what is missing, and any pickle in its place
        try:
            expected = meta_shapes(lambda: cls(**settings))
        except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
            raise CheckpointError(
                f"model folder {folder} does not fit swwae's model: {one_line(err, limit=200)}"
            ) from None
        check_shapes(expected, weight_shapes(folder), f"model folder {folder}")
        state = read_weights(folder)
        try:
            net = cls(**settings)
            net.load_state_dict(state)
        except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
            raise CheckpointError(
                f"model folder {folder} does not fit swwae's model: {one_line(err, limit=200)}"
            ) from None
        net.config = config.get("run_config") or {}
        return net.to(device).eval()
