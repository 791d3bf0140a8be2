"""Counting host-device synchronisations: the ops that need a tensor's value on the host
(``.item()``, ``bool(t)``, ``.tolist()``: ``aten._local_scalar_dense``; ``nonzero``, ``unique``
and boolean-mask indexing, whose output size depends on the values) and, on a GPU, blocking copies
between host and device. On the CPU they cost nothing, so the tests count them with a
``TorchDispatchMode``: what would wait for a GPU, wherever the tensors are."""

from __future__ import annotations

import collections
import traceback
import warnings

import lightning as L
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from helpers.config import ROOT

aten = torch.ops.aten
# reads, and ops whose output size depends on the values (the host waits to learn it)
READS = (aten._local_scalar_dense.default, aten.nonzero.default, aten._unique2.default, aten.masked_select.default)
COPIES = (aten._to_copy.default, aten.copy_.default)
REPO = str(ROOT)
SYNC_WARNING = "called a synchronizing CUDA operation"  # c10::cuda::warn_or_error_on_sync


def _device(value) -> str | None:
    return torch.device(value).type if value is not None else None


class CountSyncs(TorchDispatchMode):
    """Counts syncs by the line of code (in this repository, Lightning or torch.optim) that asked
    for them. ``device_type``: only those touching a tensor there, blocking copies to and from
    it included ("cuda"); None: every read, on any device (on the CPU: what a GPU would wait for)."""

    def __init__(self, device_type: str | None = None):
        super().__init__()
        self.device_type, self.by_origin = device_type, collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self.is_sync(func, args, kwargs):
            self.by_origin[self.origin()] += 1
        return func(*args, **kwargs)

    def is_sync(self, func, args, kwargs) -> bool:
        tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        there = self.device_type is None or any(t.device.type == self.device_type for t in tensors)
        masked = func is aten.index.Tensor and any(t is not None and t.dtype == torch.bool for t in args[1])
        if func in READS or masked:
            return there
        if self.device_type is None or func not in COPIES or kwargs.get("non_blocking") or args[-1] is True:
            return False
        if func is aten._to_copy.default:  # x.to(device)
            ends = {args[0].device.type, _device(kwargs.get("device")) or args[0].device.type}
        else:  # dst.copy_(src)
            ends = {args[0].device.type, args[1].device.type}
        return self.device_type in ends and len(ends) == 2

    @staticmethod
    def origin() -> str:
        frames = [f for f in traceback.extract_stack() if f.filename != __file__]
        ours = [
            f
            for f in frames
            if (f.filename.startswith(REPO) and "site-packages" not in f.filename)  # a venv inside the checkout
            or "/lightning/" in f.filename
            or "/torch/optim/" in f.filename
        ]
        frame = (ours or frames)[-1]
        return f"{frame.filename.split('site-packages/')[-1].removeprefix(REPO + '/')}:{frame.lineno}"


class SyncsPerBatch(L.Callback):
    """The syncs of each training loop iteration, from one batch's start to the next's (the
    step, the hooks and Lightning's bookkeeping after it), leaving out those of ``ignore``
    origins (path prefixes). On CUDA, torch's own sync warnings count too
    (``torch.cuda.set_sync_debug_mode``: blocking copies that no dispatch mode sees, such as
    ``torch.tensor(..., device="cuda")``)."""

    def __init__(self, device_type: str | None = None, ignore: tuple[str, ...] = ()):
        self.device_type, self.ignore = device_type, ignore
        self.mode, self.warnings, self._caught, self.batches = None, None, [], []

    def _stop(self) -> None:
        if self.mode is None:
            return
        self.mode.__exit__(None, None, None)
        counts = {k: v for k, v in self.mode.by_origin.items() if not k.startswith(self.ignore)}
        if self.warnings is not None:
            torch.cuda.set_sync_debug_mode(0)
            self.warnings.__exit__(None, None, None)
            for key in self._caught:
                counts[key] = counts.get(key, 0) + 1
            self.warnings = None
        self.batches.append(counts)
        self.mode = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self._start()

    def _start(self) -> None:
        """Close the open window and open the next one."""
        self._stop()
        if self.device_type == "cuda":
            self.warnings, self._caught = warnings.catch_warnings(), []
            self.warnings.__enter__()
            warnings.simplefilter("always")
            warnings.showwarning = self._note_sync
            torch.cuda.set_sync_debug_mode("warn")
        self.mode = self.new_mode()
        self.mode.__enter__()

    def new_mode(self) -> TorchDispatchMode:
        return CountSyncs(self.device_type)

    def _note_sync(self, message, category, filename, lineno, file=None, line=None) -> None:
        """A sync warning, keyed by the first line of this repository, Lightning or torch.optim
        that led to it (where the warning itself points, torch's own wrapper, says little).
        Only torch's own sync message counts: ``set_sync_debug_mode`` also warns, once a
        process, that the mode "does not yet detect all synchronizing operations", which the
        first batch of a process's first GPU run once counted as a sync of its own."""
        if SYNC_WARNING in str(message):
            where = f"{filename.split('site-packages/')[-1]}:{lineno}"
            self._caught.append(f"cuda sync warning at {where} from {CountSyncs.origin()}")

    def on_train_epoch_end(self, trainer, module):
        self._stop()

    def on_exception(self, trainer, module, exception):
        self._stop()


class SyncsPerValidationBatch(SyncsPerBatch):
    """The same for the validation batches of training (the sanity check's left out), each from
    its start to the next's; the last one's runs to the callbacks' ``on_validation_epoch_end``."""

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        pass

    def on_train_epoch_end(self, trainer, module):
        pass

    def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
        if not trainer.sanity_checking:
            self._start()

    def on_validation_epoch_end(self, trainer, module):
        self._stop()


# ops that make no device work besides views: allocations, metadata and profiler records
NO_LAUNCH = {
    "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "promote_types",
    "detach", "lift_fresh", "t", "broadcast_tensors", "_record_function_enter_new", "_record_function_exit",
}  # fmt: skip


class CountLaunches(TorchDispatchMode):
    """Counts the ops that make device work, each one kernel launch or more on a GPU, keyed by the
    op's name in ``by_origin``: every op but views, allocations, metadata (``NO_LAUNCH``) and the host reads
    that ``CountSyncs`` counts. For a small network on a GPU a step's time is its launches."""

    def __init__(self):
        super().__init__()
        self.by_origin = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func.overloadpacket.__name__
        if not (func.is_view or name in NO_LAUNCH or func in READS):
            self.by_origin[name] += 1
        return func(*args, **(kwargs or {}))


class LaunchesPerBatch(SyncsPerBatch):
    """The device ops (``CountLaunches``) of each training loop iteration, from one batch's start
    to the next's, by op name; with the run's module and data kept for a hand-written twin."""

    def new_mode(self) -> TorchDispatchMode:
        return CountLaunches()

    def on_fit_end(self, trainer, module):
        self.module, self.data = module, trainer.datamodule
