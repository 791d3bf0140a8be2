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

A folder is written whole or not at all (``replace_folder``): a new sibling folder, then
swapped in by two renames. A kill, a full disk or a read-only parent leaves the old folder as
it was, never new weights beside an old ``config.json``.

``Pretrained`` is the mixin that gives the network ``save_pretrained`` and ``from_folder``;
it builds with ``cls(**settings)``, so it needs nothing of the class it is mixed into
(``swwae.model`` imports this module, not the other way round).
"""

from __future__ import annotations

import glob
import hashlib
import inspect
import io
import json
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path

import torch
from torch import Tensor

from swwae.card import CARD_FILE, NO_METRICS, RunFacts, RunMetrics, model_card, run_metrics
from swwae.errors import CheckpointError, DiskError, NonFiniteError, Unreadable, one_line
from swwae.files import open_regular, read_json
from swwae.install import command
from swwae.stored import kind, parse_network_settings, parse_stored_config, plain
from swwae.version import __version__

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT = "swwae-folder/1"
META_KEYS = ("swwae", "run_config")  # config.json's entries beside the constructor's arguments
WEIGHTS_CHECKSUM_KEY = "swwae_sha256"  # in the safetensors header's metadata, and config.json's "swwae"
PICKLED_WEIGHTS = ("pytorch_model.bin", "model.pt", "model.pth")
CONFIG_LIMIT = 1 << 20  # bytes: a config.json is a few kB
# the dtypes a floating-point parameter or buffer may be stored in: each widens to float32
# exactly or is float64, as a network moved to float64 keeps it (float16 and bfloat16: a
# halved file, common on the Hub, loads as exactly the values it holds); an integer buffer
# (batch norm's num_batches_tracked) is stored as it is kept
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16")
KEPT_DTYPES = (*FLOAT_DTYPES, "int64")  # what a network's tensors are stored in, whichever it is
SAFETENSORS_DTYPES = {  # the header's names -> torch's
    "F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
    "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool", "C64": "complex64",
}  # fmt: skip
SIBLING = re.compile(r"\.(?P<name>.+)\.swwae-(?P<role>new|old)-(?P<pid>\d+)-[0-9a-f]{8}")  # replace_folder's
OLD_TEMP = re.compile(r"\.(config\.json|model\.safetensors|README\.md)\.\d+\.tmp")  # earlier releases' temp files

# helpers


def weights_checksum(state: Mapping[str, Tensor]) -> str:
    """SHA-256 over every tensor's name, dtype, shape and bytes, in name order."""
    digest = hashlib.sha256()
    for name in sorted(state):
        t = state[name].detach().cpu().contiguous()
        digest.update(f"{name}:{t.dtype}:{tuple(t.shape)};".encode())
        digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return digest.hexdigest()


def tensor_kinds(state: Mapping[str, Tensor]) -> dict[str, tuple[tuple[int, ...], str]]:
    """(shape, dtype name) of each tensor: what ``check_tensors`` compares."""
    return {name: (tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in state.items()}


def check_finite(state: Mapping[str, Tensor], what: str) -> None:
    """``NonFiniteError`` (one line) if a floating tensor of ``state`` holds NaN or infinity:
    such weights are never written (they give NaN outputs, which no check can compare)."""
    bad = sorted(name for name, t in state.items() if t.is_floating_point() and not bool(t.isfinite().all()))
    if bad:
        raise NonFiniteError(
            f"the weights of {what} are not finite: {len(bad)} of {len(state)} tensors hold NaN or infinite "
            f"values (e.g. {bad[0]}): nothing was written"
        )


def reason(err: OSError) -> str:
    return err.strerror or type(err).__name__


def write_file(path: Path, data: bytes) -> None:
    """A new file ``path`` holding ``data``, on disk (fsynced) before this returns."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def fsync_folder(folder: Path) -> None:
    """The folder's entries on disk: a rename survives a power cut. (Windows has no folder
    handles to fsync.)"""
    if os.name == "posix":
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def link_or_copy(source: str, target: str) -> None:
    """A hard link (no bytes copied), or a copy where the file system takes no links."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def sibling(folder: Path, role: str) -> Path:
    """A hidden name beside ``folder`` for ``replace_folder``'s new or old copy (``role``),
    unique to this writer (its process id, for ``interrupted_copies``, and a random part)."""
    return folder.with_name(f".{folder.name}.swwae-{role}-{os.getpid()}-{secrets.token_hex(4)}")


def interrupted_copies(folder: Path) -> list[tuple[Path, str]]:
    """(path, "new" or "old") of the copies of ``folder`` that a writer killed mid-way left
    beside it, newest first; those of a process still running are not leftovers."""
    copies = []
    for path in folder.parent.glob(f".{glob.escape(folder.name)}.swwae-*"):
        match = SIBLING.fullmatch(path.name)
        if match and match["name"] == folder.name and not alive(int(match["pid"])):
            copies.append((path, match["role"]))
    return sorted(copies, key=lambda copy: copy[0].lstat().st_mtime_ns, reverse=True)


def alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this machine (elsewhere than POSIX: assumed so)."""
    if os.name != "posix" or pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # another user's process
        return True
    return True


def tidy_interrupted(folder: Path) -> None:
    """Clear what a writer killed mid-way left beside ``folder``: a missing folder whose old
    copy is there gets it back (the kill fell between the two renames), then the copies go."""
    copies = interrupted_copies(folder)
    old = next((path for path, role in copies if role == "old"), None)
    if old is not None and not (folder.exists() or folder.is_symlink()):
        os.rename(old, folder)
    for path, _ in copies:
        shutil.rmtree(path, ignore_errors=True)


def keep_other_files(old: Path, new: Path, written: Mapping[str, bytes]) -> None:
    """Give ``new`` every entry of ``old`` that is not about to be written (a user's notes, a
    Hub clone's .git), as hard links: nothing in the folder is lost by writing it again.
    The stray temp files of earlier releases' writer are not carried over."""
    for entry in old.iterdir():
        if entry.name in written or OLD_TEMP.fullmatch(entry.name):
            continue
        target = new / entry.name
        if entry.is_symlink():
            os.symlink(os.readlink(entry), target)
        elif entry.is_dir():
            shutil.copytree(entry, target, symlinks=True, copy_function=link_or_copy)
        elif entry.is_file():
            link_or_copy(entry, target)  # a device or FIFO is no part of a model folder: left out


def replace_folder(folder: Path, files: Mapping[str, bytes]) -> None:
    """Make ``folder`` hold ``files`` (name -> bytes) besides the other entries it had, whole or
    not at all. POSIX renames one folder over another only when the other is empty, so:

    1. write a new sibling folder, ``.<name>.swwae-new-<pid>-<random>``: the other entries of
       ``folder`` hard-linked in, then ``files``, each fsynced, then the folder itself;
    2. rename ``folder`` aside to ``.<name>.swwae-old-<pid>-<random>`` (one atomic rename);
    3. rename the new folder to ``folder`` (atomic; then the parent is fsynced);
    4. remove the old copy.

    A failure or a kill in step 1 leaves ``folder`` untouched (a failure also removes the
    new copy; a kill leaves it, hidden, for the next write to remove). Between steps 2 and 3
    ``folder`` is missing for an instant while both copies are whole beside it: a kill there
    leaves the old copy, which the next write to ``folder`` puts back. After step 3 the folder
    is the new one. At no moment does ``folder`` hold new weights beside an old
    ``config.json``. (Linux's ``renameat2(RENAME_EXCHANGE)`` would swap in one step, but
    Python does not offer it.) The cost: room for both copies for a moment, and a parent
    folder that takes new entries; a symbolic link is followed to its folder."""
    target = Path(os.path.realpath(folder)) if folder.is_symlink() else folder
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tidy_interrupted(target)
    except OSError as err:
        raise DiskError(f"cannot write the model folder {folder}: {reason(err)} (in {target.parent})") from None
    existed = target.is_dir()
    new = sibling(target, "new")
    try:
        new.mkdir()
        if existed:
            keep_other_files(target, new, files)
            new.chmod(target.stat().st_mode & 0o7777)  # a shared folder stays shared
        for name, data in files.items():
            write_file(new / name, data)
        fsync_folder(new)
    except BaseException as err:
        shutil.rmtree(new, ignore_errors=True)
        if not isinstance(err, OSError):
            raise
        raise DiskError(
            f"cannot write the model folder {folder}: {reason(err)} (in {target.parent}); "
            + (f"{folder} is as it was" if existed else "nothing was written")
        ) from None
    old = sibling(target, "old")
    try:
        if existed:
            os.rename(target, old)
        os.rename(new, target)
    except BaseException as err:
        if existed and old.exists() and not target.exists():
            os.rename(old, target)
        shutil.rmtree(new, ignore_errors=True)
        if not isinstance(err, OSError):
            raise
        raise DiskError(f"cannot write the model folder {folder}: {reason(err)}; it is as it was") from None
    fsync_folder(target.parent)
    shutil.rmtree(old, ignore_errors=True)


# writing and reading


def folder_config(settings: Mapping, *, network: str, weights: str, run_config: Mapping | None) -> dict:
    """config.json's contents: the constructor's arguments at the top level (the Hub's
    convention), then swwae's own entry (with ``weights``, the checksum of the weights written
    with it: a config.json is never read with other weights) and the run config."""
    return {
        **plain(settings),
        "swwae": {"format": FORMAT, "version": __version__, "network": network, WEIGHTS_CHECKSUM_KEY: weights},
        "run_config": plain(run_config) if run_config is not None else None,
    }


def check_folder_target(folder: str | Path) -> Path:
    """One line (``CheckpointError``, ``DiskError``) when a model folder cannot be written at
    ``folder``: a file is there, it is (or holds) the current folder, which is replaced whole,
    it holds a run's checkpoints (a run folder, the checkpoint folder), or the folder beside
    which it is written takes no new folder (read-only, not yours). Cheap: ``swwae export``
    asks it before any work."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise CheckpointError(f"{folder} is a file: a model folder needs a folder of its own")
    target, here = Path(os.path.realpath(folder)), Path(os.path.realpath("."))
    if target == here or target in here.parents:
        raise CheckpointError(
            f"the model folder {folder} is the current folder or holds it: a model folder is replaced whole, "
            f"so name one of its own (e.g. {folder / 'model'})"
        )
    if folder.is_dir() and (checkpoints := checkpoints_in(folder)):
        raise CheckpointError(
            f"the model folder {folder} holds checkpoints ({checkpoints[0]}): a model folder is replaced whole, and a "
            f"run saving there meanwhile would lose that save; name one of its own (e.g. models/{target.name})"
        )
    check_can_write(target, f"the model folder {folder}")
    return folder


def checkpoints_in(folder: Path) -> list[Path]:
    """The first checkpoint found in ``folder`` or anywhere below it (links not followed): a
    run's folder, the folder of runs (paths.checkpoint_dir) or a folder holding that one
    (``checkpoints/``, whose ``quick/`` holds the quick checks' runs), which a model folder
    written over it would swap out under a run. The walk stops at the first one."""
    for parent, folders, files in os.walk(folder):
        folders.sort()
        found = sorted(name for name in files if name.endswith(".ckpt"))
        if found:
            return [Path(parent) / found[0]]
    return []


def check_can_write(path: Path, what: str) -> None:
    """``DiskError`` (one line, naming ``what``) unless the folder ``path`` goes in, or its
    nearest existing parent, takes a new entry (tried: a folder made and removed again); a
    file where a folder of the path should be is named as such."""
    existing = next(p for p in (path.parent, *path.parent.parents) if p.exists())
    if not existing.is_dir():
        raise DiskError(f"cannot write {what}: {existing} is a file, not a folder")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=f".{path.name}.swwae-probe-", dir=existing))
    except OSError as err:
        raise DiskError(f"cannot write {what}: {reason(err)} (in {existing})") from None


def same_weights(stored: Mapping[str, Tensor], state: Mapping[str, Tensor]) -> bool:
    """Whether ``stored`` holds the tensors of ``state``: the same names and shapes, and the same
    values once cast to ``state``'s dtypes (a 64-true run's float64 checkpoint is the float32
    network ``swwae.load`` built from it)."""
    return stored.keys() == state.keys() and all(
        isinstance(stored[name], Tensor)
        and stored[name].shape == t.shape
        and torch.equal(stored[name].to(t.dtype), t.detach().cpu())
        for name, t in state.items()
    )


def measured_metrics(net: torch.nn.Module, run: RunFacts) -> RunMetrics:
    """The test metrics of ``net``'s run (its ``metrics.json``, ``swwae.card.run_metrics``) if
    they were measured on these very weights, else none (``NO_METRICS``): the checkpoint that
    metrics.json names still holds the bytes it measured (its ``checkpoint_sha256``), and its
    network's weights are ``net``'s. A network of last.ckpt, or one trained on since, never
    carries best.ckpt's scores on its card. The checkpoint is read as tensors and plain values
    only (``torch.load(weights_only=True)``), from the bytes whose SHA-256 was checked (here, not
    by ``swwae.checkpoint_file``, which imports the model, and the model this module)."""
    metrics = run_metrics(run.output_dir)
    if not (metrics.values and metrics.checkpoint and metrics.checkpoint_sha256):
        return NO_METRICS
    try:
        with os.fdopen(open_regular(metrics.checkpoint, "checkpoint"), "rb") as f:
            data = f.read()
        if hashlib.sha256(data).hexdigest() != metrics.checkpoint_sha256:
            return NO_METRICS  # written again since it was measured
        stored = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)["state_dict"]
        stored = {name.removeprefix("net."): t for name, t in stored.items() if name.startswith("net.")}
    except Exception:  # noqa: BLE001 - a file that is gone or does not read is no measurement of these weights
        return NO_METRICS
    return metrics if same_weights(stored, net.state_dict()) else NO_METRICS


def write_folder(
    net: Pretrained, folder: str | Path, *, config: Mapping | None = None, metrics: RunMetrics | None = None
) -> Path:
    """Write ``net`` as the model folder ``folder``, whole or not at all (``replace_folder``;
    other files in it are kept): its weights, its config.json and its model card README.md.
    ``config`` is the run config; ``metrics`` the test metrics for the card (default: those of
    the run's metrics.json where they were measured on these very weights, ``measured_metrics``).
    Weights that are not finite (``NonFiniteError``) and a folder that cannot be written
    (``DiskError``) are one line each, and write nothing."""
    from safetensors.torch import save

    # the card first: one that cannot be written (a mode or data set no table knows) writes no file
    run = RunFacts.of(config)
    card = model_card(net, run=run, metrics=measured_metrics(net, run) if metrics is None else metrics)
    folder = check_folder_target(folder)
    network = getattr(net, "arch", type(net).__name__)
    state = {name: t.detach().cpu().contiguous() for name, t in net.state_dict().items()}
    check_finite(state, f"the network {network}")
    checksum = weights_checksum(state)
    metadata = {"format": "pt", WEIGHTS_CHECKSUM_KEY: checksum}
    text = json.dumps(folder_config(net.settings, network=network, weights=checksum, run_config=config), indent=2)
    text += "\n"
    replace_folder(
        folder, {WEIGHTS_FILE: save(state, metadata=metadata), CONFIG_FILE: text.encode(), CARD_FILE: card.encode()}
    )
    return folder


def run_checkpoint_hint(folder: Path) -> str:
    """' (the run's best checkpoint: <folder>/best.ckpt)' where ``folder`` holds a run's
    checkpoints, else '': what a run folder given for a checkpoint or a model folder meant."""
    inside = [name for name in ("best.ckpt", "last.ckpt") if (folder / name).is_file()]
    return f" (the run's {inside[0].removesuffix('.ckpt')} checkpoint: {folder / inside[0]})" if inside else ""


def read_config(folder: Path) -> dict:
    """``folder/config.json``, read with bounds (a regular file of at most CONFIG_LIMIT bytes,
    nesting bounded) and parsed: the network's settings plain, its run config a run config."""
    path = folder / CONFIG_FILE
    if not folder.is_dir():
        raise CheckpointError(f"model folder {folder} does not exist")
    if not (path.exists() or path.is_symlink()):  # anything else there is read with bounds, and refused
        how = f" (write one with swwae.save_pretrained or {command('export')} --to)"
        raise CheckpointError(
            f"{folder} holds no {CONFIG_FILE}: it is not a model folder{run_checkpoint_hint(folder) or how}"
        )
    config = read_json(path, "model folder file", CONFIG_LIMIT)  # size bounded before parsing
    if not isinstance(config, dict):
        raise Unreadable(f"{path} holds no settings (a JSON object), but {type(config).__name__}")
    meta = config.get("swwae") if isinstance(config.get("swwae"), dict) else {}
    written = meta.get("format", FORMAT)
    if written != FORMAT:
        raise CheckpointError(
            f"{path} is in the model folder format {written!r}; this swwae ({__version__}) reads {FORMAT!r}"
        )
    checksum = meta.get(WEIGHTS_CHECKSUM_KEY)
    if checksum is not None and not (isinstance(checksum, str) and re.fullmatch("[0-9a-f]{64}", checksum)):
        raise Unreadable(f"{path} is unreadable: swwae.{WEIGHTS_CHECKSUM_KEY} is {kind(checksum)}, not a SHA-256")
    source = f"model folder file {path}"
    settings = parse_network_settings({k: v for k, v in config.items() if k not in META_KEYS}, source)
    run_config = config.get("run_config")
    return settings | {
        "swwae": meta,
        "run_config": None if run_config is None else parse_stored_config(run_config, source),
    }


def check_pool_mode(settings: Mapping, source: str) -> None:
    """A stored network's pooling mode is one registered here. A run made with a lab's own mode
    and read where its plugin is not loaded would otherwise read as a file swwae did not write
    (its mode's settings unknown) or a bad setting; CheckpointError (one line) saying what to load."""
    from swwae.plugins import ENVIRONMENT, GROUP
    from swwae.pooling.modes import POOL_MODES

    mode = settings.get("pool_mode")
    if isinstance(mode, str) and mode not in POOL_MODES:
        raise CheckpointError(
            f"{source} was trained with the pooling mode {mode[:80]!r}, which is not registered here "
            f"({', '.join(POOL_MODES)}): load the lab's plugin that registers it ({ENVIRONMENT}=<module>, "
            f"or its package's {GROUP} entry point)"
        )


def meta_kinds(build: Callable[[], torch.nn.Module]) -> dict[str, tuple[tuple[int, ...], str]]:
    """(shape, dtype name) of each tensor of the module ``build()`` makes, built on the meta
    device: nothing allocated, whatever the settings ask for."""
    with torch.device("meta"):
        return tensor_kinds(build().state_dict())


def check_tensors(expected: Mapping[str, tuple], found: Mapping[str, tuple], what: str) -> None:
    """One line unless a file's tensors (``found``: name -> (shape, dtype name)) are those the
    network built from its settings keeps (``expected``, from ``meta_kinds``): the same names
    and shapes (else ``CheckpointError``), and for each a dtype of its kind (``Unreadable``):
    a floating tensor stored in one of ``FLOAT_DTYPES``, any other in its own dtype. Bool,
    integer or complex weights would be cast without a word, and evaluated."""
    shapes = {name: shape for name, (shape, _) in expected.items()}
    found_shapes = {name: shape for name, (shape, _) in found.items()}
    wrong = sorted(k for k in shapes.keys() | found_shapes.keys() if shapes.get(k) != found_shapes.get(k))
    if wrong:
        raise CheckpointError(
            f"{what} does not fit its own settings ({len(wrong)} tensors differ, e.g. {wrong[0]}: "
            f"{found_shapes.get(wrong[0], 'missing')} in the weights, {shapes.get(wrong[0], 'missing')} "
            f"by the settings): nothing was built"
        )
    odd = sorted(
        name
        for name, (_, dtype) in expected.items()
        if not (found[name][1] in FLOAT_DTYPES if dtype in FLOAT_DTYPES else found[name][1] == dtype)
    )
    if odd:
        keeps = expected[odd[0]][1]
        wanted = "floating point (" + ", ".join(FLOAT_DTYPES) + ")" if keeps in FLOAT_DTYPES else keeps
        raise Unreadable(
            f"{what} is unreadable: {len(odd)} of {len(expected)} tensors are not of the kind the network "
            f"keeps, e.g. {odd[0]} is {found[odd[0]][1]}, not {wanted}"
        )


def weight_kinds(folder: Path) -> dict[str, tuple[tuple[int, ...], str]]:
    """(shape, dtype name) of each tensor in ``folder/model.safetensors``'s header, no tensor read."""
    from safetensors import safe_open

    path = folder / WEIGHTS_FILE
    try:
        with safe_open(str(path), framework="pt") as weights:
            slices = {name: weights.get_slice(name) for name in weights.keys()}  # noqa: SIM118 - not a dict
            return {
                name: (tuple(t.get_shape()), SAFETENSORS_DTYPES.get(t.get_dtype(), t.get_dtype()))
                for name, t in slices.items()
            }
    except Exception as err:  # noqa: BLE001 - safetensors raises its own error types on bad bytes
        raise Unreadable(f"{path} is unreadable (truncated or corrupt?): {one_line(err, limit=200)}") from None


def read_weights(folder: Path, written_with: str | None = None) -> dict[str, Tensor]:
    """The tensors of ``folder/model.safetensors``, checked against their checksum (when the
    file carries one: a file written elsewhere may not) and against ``written_with``, the
    checksum config.json was written with (when it names one): a config.json and weights of
    two different writes (what an interrupted save of an earlier release could leave) are one
    line, not a network built from the one and loaded with the other."""
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
        raise Unreadable(f"{path} is unreadable (truncated or corrupt?): {one_line(err, limit=200)}") from None
    expected = metadata.get(WEIGHTS_CHECKSUM_KEY)
    actual = weights_checksum(state) if expected is not None or written_with is not None else None
    if expected is not None and actual != expected:
        raise CheckpointError(f"{path} is corrupt: its tensors do not match the checksum written with them")
    if written_with is not None and actual != written_with:
        raise CheckpointError(
            f"model folder {folder} is mixed: its {CONFIG_FILE} was written with other weights than its "
            f"{WEIGHTS_FILE} (an interrupted save?): write the folder again"
        )
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
        (default: those of the run's ``metrics.json``, when it is found and they were measured
        on these very weights: ``measured_metrics``)."""
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
        check_pool_mode(config, f"model folder {folder}")
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
            expected = meta_kinds(lambda: cls(**settings))
        except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
            raise CheckpointError(
                f"model folder {folder} does not fit swwae's model: {one_line(err, limit=200)}"
            ) from None
        check_tensors(expected, weight_kinds(folder), f"model folder {folder}")
        state = read_weights(folder, written_with=config["swwae"].get(WEIGHTS_CHECKSUM_KEY))
        try:
            net = cls(**settings)
            net.load_state_dict(state)
        except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
            raise CheckpointError(
                f"model folder {folder} does not fit swwae's model: {one_line(err, limit=200)}"
            ) from None
        net.config = config.get("run_config") or {}
        return net.to(device).eval()
