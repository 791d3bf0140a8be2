"""Checkpoints back into the job: the LightningModule and the run config of a checkpoint, and
whether a checkpoint's tensors fit the current model. Every file is read by
``swwae.checkpoint_file.read_checkpoint`` (weights only, checksum checked); which checkpoint a
run continues from is the run folder's decision (``swwae.training.runs``).

Writing them: Checkpoint files that are either the old one or the new one, never half of either, carry
their content checksum, and are read back only through the one safe reader.

Lightning's ``TorchCheckpointIO`` writes through an fsspec transaction: a temp file in the
system temp folder, then ``shutil.move`` (a copy when that folder is on another disk) and
no fsync, so a kill or a power cut during a save can leave a truncated ``last.ckpt``.
Here the bytes go to a temp file *in the checkpoint's own folder*, are fsynced, and
``os.replace`` swaps it in (atomic on POSIX and Windows); the folder is fsynced too, so
the rename itself survives a crash. A kill mid-save leaves at most a stray
``.<name>.tmp-*`` file, which ``remove_stale_temp_files`` clears and no reader ever opens.

``AtomicCheckpointIO`` is the Trainer's CheckpointIO plugin (``build_trainer``, which builds the
job's Trainer: so that no load of a ``ckpt_path`` bypasses the safe reader): every
save gets ``swwae_checksum``, and every load Lightning makes (``ckpt_path=`` of fit, validate
and test) goes through ``swwae.checkpoint_file.read_checkpoint``: weights only, whatever
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD`` says, checksum checked.

The job's Trainer writes in the background (``BackgroundCheckpointIO``): a save copies the
checkpoint's tensors to host memory, the state of that moment, and one writer thread checksums,
writes and fsyncs it while training goes on. The paper's CIFAR-10 network saves 353 MB
(weights and Adam's moments) in 0.7-1.6 s on 2 CPU cores, twice in an epoch whose validation
improved: time a GPU would otherwise wait for. Every read, the end of training and a
pre-emption wait for the writes; a failed one raises at the next save or at the end.
"""

from __future__ import annotations

import difflib
import logging
import os
import sys
import uuid
from collections import OrderedDict, deque
from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.fabric.utilities.cloud_io import _is_local_file_protocol
from lightning.pytorch.plugins.io import CheckpointIO, TorchCheckpointIO
from lightning_utilities.core.apply_func import apply_to_collection

from swwae.checkpoint_file import read_checkpoint, verified, with_checksum
from swwae.errors import CheckpointError, ConfigError, excerpt, one_line
from swwae.pretrained import check_pool_mode, check_tensors, meta_kinds, tensor_kinds
from swwae.training.callbacks import skip_empty_hooks
from swwae.training.composing import build
from swwae.training.folders import write_failed
from swwae.training.module import SWWAEModule
from swwae.training.registry import plain_settings

if TYPE_CHECKING:
    from swwae.training.trainer_settings import TrainerSpec

log = logging.getLogger(__name__)

# reading


def load_model(path) -> tuple[SWWAEModule, dict]:
    """(module in eval mode, the run config stored by ``SaveRunConfig``)."""
    checkpoint = read_checkpoint(path)
    settings = plain_settings(checkpoint["hyper_parameters"], "model", f"checkpoint {path}")
    check_pool_mode(settings, f"checkpoint {path}")
    try:
        expected = meta_kinds(lambda: SWWAEModule(**settings))
    except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:  # UserError is a ValueError
        raise CheckpointError(f"checkpoint {path} does not fit swwae's model: {one_line(err, limit=200)}") from None
    check_tensors(expected, tensor_kinds(checkpoint["state_dict"]), f"checkpoint {path}")
    try:
        module = SWWAEModule(**settings)
        module.load_state_dict(checkpoint["state_dict"])
    except (TypeError, RuntimeError, KeyError, ValueError, ArithmeticError) as err:
        raise CheckpointError(f"checkpoint {path} does not fit swwae's model: {one_line(err, limit=200)}") from None
    return module.eval(), checkpoint["swwae_config"]


# resuming


def check_fits_model(path: Path, checkpoint: dict, module) -> None:
    """CheckpointError (one line) unless the checkpoint's tensors have the current model's
    shapes: the last guard before Lightning loads them, for a run of the same identity written
    by a version of swwae whose network was laid out otherwise."""
    expected = {k: tuple(v.shape) for k, v in module.state_dict().items()}
    saved = {k: tuple(v.shape) for k, v in checkpoint["state_dict"].items()}
    if expected != saved:
        wrong = sorted(k for k in expected.keys() | saved.keys() if expected.get(k) != saved.get(k))
        raise CheckpointError(
            f"{path} does not fit the current model ({len(wrong)} tensors differ, e.g. {wrong[0]}: "
            f"{saved.get(wrong[0], 'missing')} there, {expected.get(wrong[0], 'missing')} now): use another "
            "run_name, or resume=false to start over"
        )


# writing: atomic, checksummed

TEMP_MARK = ".tmp-"


def atomic_torch_save(obj: Any, path) -> None:
    """``torch.save(obj, path)``, atomically: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a unique name opened with "x" (not mkstemp: its files are 0600, this one follows umask)
    temp = path.with_name(f".{path.name}{TEMP_MARK}{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        with open(temp, "xb") as f:
            try:
                torch.save(obj, f)
            except RuntimeError as err:  # torch's zip writer wraps a failed write (a full disk) in its own error
                if isinstance(err.__context__, OSError):
                    raise err.__context__ from None
                raise
            f.flush()
            os.fsync(f.fileno())
        os.replace(temp, path)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    _fsync_folder(path.parent)


def remove_stale_temp_files(folder) -> list[Path]:
    """Delete the temp files that a save killed half-way left in ``folder``."""
    stale = [p for p in Path(folder).glob(f".*{TEMP_MARK}*") if p.is_file()]
    for p in stale:
        p.unlink(missing_ok=True)
    return stale


def _fsync_folder(folder: Path) -> None:
    if os.name != "posix":  # no directory handles to fsync on Windows
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``TorchCheckpointIO`` whose local saves are atomic and checksummed, and whose loads are
    the safe reader's (see the module docstring). Remote paths (s3://, gs://, ...) keep
    Lightning's own object-store upload, which is all-or-nothing by nature."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        with_checksum(checkpoint)
        if storage_options is not None or not _is_local_file_protocol(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        try:
            atomic_torch_save(checkpoint, path)
        except OSError as err:  # disk full, quota, read-only: the previous file is whole
            raise write_failed(path, err) from err

    def load_checkpoint(
        self, path, map_location: Any | None = None, weights_only: bool | None = None
    ) -> dict[str, Any]:
        if not _is_local_file_protocol(path):
            return verified(super().load_checkpoint(path, map_location=map_location, weights_only=True), path)
        return read_checkpoint(path)


def host_copy(checkpoint: dict) -> dict:
    """``checkpoint`` with its tensors copied to host memory: what it holds now, whatever
    training does to the originals later (a tensor met twice is copied once). A GPU's tensors
    are copied asynchronously into pinned memory (torch's ``non_blocking`` copy to the CPU
    allocates it, from a cache), and each GPU waited for once at the end, not once a tensor."""
    copies: dict[int, torch.Tensor] = {}
    devices = set()

    def copy(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in copies:
            if t.is_cuda:
                devices.add(t.device)
            copies[id(t)] = t.detach().to("cpu", copy=True, non_blocking=t.is_cuda)
        return copies[id(t)]

    copied = _map_tensors(checkpoint, copy)
    for device in devices:  # the copies are done before the writer reads them
        torch.cuda.synchronize(device)
    return copied


LEAVES = (str, bytes, int, float, bool, type(None))


def _map_tensors(data: Any, function):
    """``data`` with ``function`` applied to each tensor in it. A checkpoint is a few hundred
    plain dicts, lists, tuples and numbers around its tensors, even a small network's: walked
    here, in 0.3 ms a save where Lightning's ``apply_to_collection``, which asks every node whether
    it is a dataclass, a namedtuple or another mapping, took 0.8 ms. Anything else (a callback's
    own state) goes to ``apply_to_collection``. A module's ``state_dict`` keeps its ``_metadata``
    (the modules' versions, for ``load_state_dict``), as in a save that is not copied first."""
    kind = type(data)
    if isinstance(data, torch.Tensor):
        return function(data)
    if kind is dict:
        return {key: _map_tensors(value, function) for key, value in data.items()}
    if kind is OrderedDict:
        copied = OrderedDict((key, _map_tensors(value, function)) for key, value in data.items())
        copied.__dict__.update(vars(data))  # a state_dict's _metadata
        return copied
    if kind is list or kind is tuple:
        return kind(_map_tensors(value, function) for value in data)
    if isinstance(data, LEAVES):
        return data
    return apply_to_collection(data, torch.Tensor, function)


class BackgroundCheckpointIO(AtomicCheckpointIO):
    """``AtomicCheckpointIO`` whose local saves are written by one background thread, in the
    order they were made (see the module docstring). ``wait`` returns once every save handed
    over is on disk, and raises the error of the first that failed; loads, removals, the end
    of training (Lightning's ``teardown``) and a pre-emption (``wait_for_saves``) call it."""

    MAX_PENDING = 2  # best.ckpt and last.ckpt of one epoch; a third save waits for the first

    def __init__(self):
        super().__init__()
        self._pending: deque[Future] = deque()
        self._writer: ThreadPoolExecutor | None = None

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None or not _is_local_file_protocol(path):
            self.wait()
            return super().save_checkpoint(checkpoint, path, storage_options)
        while len(self._pending) >= self.MAX_PENDING:
            self._pending.popleft().result()
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="swwae-checkpoint-writer")
        write = super().save_checkpoint  # checksum, atomic write, fsync; a DiskError (one line) if it fails
        self._pending.append(self._writer.submit(write, host_copy(checkpoint), path))

    def wait(self) -> None:
        """Until every save handed over is written; the first failed one's error, raised once."""
        error = None
        while self._pending:
            try:
                self._pending.popleft().result()
            except Exception as err:  # the writer's own error (a DiskError: one line); the rest still land
                error = error or err
        if error is not None:
            raise error

    def load_checkpoint(self, path, map_location: Any | None = None, weights_only: bool | None = None):
        self.wait()
        return super().load_checkpoint(path, map_location=map_location, weights_only=weights_only)

    def remove_checkpoint(self, path) -> None:
        self.wait()
        super().remove_checkpoint(path)

    def teardown(self) -> None:
        """The end of a fit (or its failure): every write lands before the Trainer returns. A
        failed write raises, unless another error is on its way out (Lightning tears down while
        handling it): then it is logged, one line, and that error goes on."""
        handling = sys.exc_info()[1]
        try:
            self.wait()
        except Exception as err:
            if handling is None:
                raise
            log.error("%s", err)
        finally:
            if self._writer is not None:
                self._writer.shutdown(wait=True)
                self._writer = None


def wait_for_saves(trainer: L.Trainer) -> None:
    """Until the checkpoints ``trainer`` saved are on disk (a DiskError if one failed)."""
    io = trainer.strategy.checkpoint_io
    if isinstance(io, BackgroundCheckpointIO):
        io.wait()


# the Trainer that reads and writes them


def build_trainer(settings: TrainerSpec, loggers: list, callbacks: list, verbose: bool = False) -> L.Trainer:
    """The Trainer of the run spec's ``trainer`` section (a ``TrainerSpec``: the keys the config
    set), saving and loading checkpoints through ``BackgroundCheckpointIO`` (atomic, checksummed,
    weights only, written in the background) unless the config names a CheckpointIO plugin of its
    own; ``AtomicCheckpointIO`` (each save written before training goes on) where a logger uploads
    checkpoints (``log_model``): it reads the files as soon as they are saved. The job builds its
    one Trainer here, so that no load of a ``ckpt_path`` bypasses the safe reader. Lightning's
    model summary only when ``verbose`` (with rich installed it prints a table of its own, past
    logging) or where the config asks for it (``trainer.enable_model_summary``). cuDNN's
    autotuning (``trainer.benchmark``) unless the run is to be deterministic. The callbacks'
    empty per-batch hooks are skipped (``swwae.training.callbacks.skip_empty_hooks``)."""
    kwargs = settings.model_dump(by_alias=True, exclude_unset=True)
    check_strategy(kwargs.get("strategy"))
    kwargs.setdefault("enable_model_summary", verbose)
    # cuDNN's autotuning (the fastest convolution for each shape, timed on its first batch),
    # except where a run is to be reproducible: it may pick other kernels run to run
    kwargs.setdefault("benchmark", not kwargs.get("deterministic"))
    given = kwargs.get("plugins") or []
    given = list(given) if isinstance(given, (list, tuple)) else [given]
    plugins = [build(p) if isinstance(p, Mapping) else p for p in given]  # nodes with _target_, or names
    if not any(isinstance(p, CheckpointIO) for p in plugins):
        # MLFlowLogger and WandbLogger keep their log_model setting as _log_model
        uploads = any(getattr(logger, "_log_model", False) for logger in loggers or [])
        plugins.append(AtomicCheckpointIO() if uploads else BackgroundCheckpointIO())
    # plain containers: Lightning tells a mapping ({minutes: 1}) by isinstance(value, dict)
    trainer = build(kwargs, logger=loggers or False, callbacks=callbacks, plugins=plugins, _convert_="all")
    skip_empty_hooks(trainer.callbacks)
    return trainer


def check_strategy(strategy) -> None:
    """``trainer.strategy`` named as the installed Lightning does not know it (``dpp``): one line
    naming the key and the nearest name, instead of Lightning's 'Error in call to target ...
    You selected an invalid strategy name' listing four of its names. An object is Lightning's."""
    if not isinstance(strategy, str) or strategy.lower() == "auto":
        return
    from lightning.pytorch.strategies import StrategyRegistry

    known = StrategyRegistry.available_strategies()
    if strategy.lower() in known:
        return
    near = difflib.get_close_matches(strategy.lower(), known, n=1)
    names = ["auto", *(name for name in known if "find_unused_parameters" not in name)]  # (and ddp's variants)
    hint = f"did you mean {near[0]}? Its" if near else "its"
    raise ConfigError(
        f"trainer.strategy={excerpt(strategy)} is not a strategy of the installed Lightning; {hint} "
        f"strategies: {', '.join(names)}"
    )


def check_sync_batchnorm(trainer: L.Trainer, module) -> None:
    """``trainer.sync_batchnorm`` (``trainer=ddp``'s default) on the CPU, in a network with batch norm
    layers: torch's SyncBatchNorm takes GPUs, and the run stopped in a traceback as training began
    ('SyncBatchNorm layers only work with GPU modules'). One line, before the run's folder is touched."""
    from lightning.pytorch.strategies import ParallelStrategy

    strategy = trainer.strategy
    if not isinstance(strategy, ParallelStrategy) or getattr(strategy, "_layer_sync", None) is None:
        return
    if strategy.root_device.type != "cpu":
        return
    if any(isinstance(layer, torch.nn.modules.batchnorm._BatchNorm) for layer in module.modules()):
        raise ConfigError(
            "trainer.sync_batchnorm=true shares the batch norm statistics across GPUs, and this run trains "
            "on the CPU, where torch's SyncBatchNorm does not run: add trainer.sync_batchnorm=false (each "
            "process then normalises by its own batch), or train on GPUs"
        )


def check_launcher(trainer: L.Trainer, setting=None) -> None:
    """A strategy whose processes torch.multiprocessing starts (``ddp_spawn``, ``ddp_fork``,
    ``ddp_notebook``): Lightning hands their result back to the first process as bare weights in a
    file of its own, which the run's safe reader refused as training ended ('not written by swwae's
    train.py'), the run trained for nothing. One line before the run's folder is touched, naming
    the ``trainer.strategy`` ``setting``."""
    from lightning.pytorch.strategies.launchers import _MultiProcessingLauncher

    launcher = getattr(trainer.strategy, "launcher", None)
    if isinstance(launcher, _MultiProcessingLauncher):
        shown = excerpt(setting) if isinstance(setting, str) else type(trainer.strategy).__name__
        start = getattr(launcher, "_start_method", "spawn")
        raise ConfigError(
            f"trainer.strategy={shown} starts its processes with torch.multiprocessing ({start}), and a run of "
            "swwae's cannot be taken back from them: use trainer=ddp (strategy ddp: Lightning starts each "
            "process by running the command again)"
        )
