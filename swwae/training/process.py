"""The training process's settings: CPU speed (glibc keeps freed memory, denormals flush to
zero), torch.compile, torch's and Lightning's defaults, and a quiet console. They are
process-wide, so they are the job's call (``swwae.training.run``), never the library's:
``swwae.pooling`` and ``swwae.model`` change none of them. The CPU threads are chosen earlier,
before torch loads (``swwae.threads``, the first line of train.py's entry)."""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
import warnings

import torch

from swwae import threads
from swwae.errors import ConfigError
from swwae.pooling.modes import POOL_MODES

log = logging.getLogger(__name__)


def set_process_defaults(keep_freed: bool, flush_denormal: bool) -> None:
    """Process-wide CPU speed settings: the job's call, not the library's (README "Performance")."""
    if keep_freed and keep_freed_memory():
        log.debug("glibc keeps freed memory for reuse (keep_freed_memory=true)")
    if flush_denormal and torch.set_flush_denormal(True):  # False where the CPU cannot
        log.debug("denormal floats flush to zero (flush_denormal=true)")
    log.debug(threads.describe(torch.get_num_threads()))  # chosen before torch loaded (swwae.threads)


# keep freed host memory for reuse, instead of handing it back to the OS after every step.
#
# glibc returns large freed blocks to the OS: mmap-ed ones at once, and the top of the heap once
# more than a trim threshold of it is free. A training step on CPU frees its activations at the
# end and allocates them again in the next, so every step then faults them back in, page by page,
# each page zeroed by the kernel: for a cheap element-wise op that costs more than its arithmetic
# (soft pooling runs many of them: its training step went from 1.54x to 1.24x native with this,
# scripts/bench_training.py). jemalloc and tcmalloc keep freed memory by default; this asks glibc
# to do the same. It is process-wide, so it is the application's call, never the library's: the
# training job makes it (the run setting keep_freed_memory: true), swwae.pooling does not.

_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3  # mallopt parameters, <malloc.h>
TRIM_THRESHOLD = 1 << 30  # free memory kept at the top of the heap before glibc trims it
MMAP_THRESHOLD = 1 << 25  # 32 MiB, glibc's maximum: smaller blocks come from the heap


def keep_freed_memory() -> bool:
    """Ask glibc (``mallopt``) to keep up to 1 GiB of freed memory and to serve blocks up to
    32 MiB from its heap. True if applied; False elsewhere (macOS, Windows, musl), where
    nothing changes."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD) and mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def end_distributed_job(environment_before: dict[str, str | None]) -> None:
    """After a job of a multirun: the DDP run it trained leaves the process as the job found it, its
    process group destroyed and the launcher's variables as they were (``environment_before``, the
    values of ``swwae.commands.train.DDP_LAUNCH_VARIABLES`` before the job).
    Lightning keeps both until the process exits, so the next job took LOCAL_RANK for a sign that
    its processes were started for it, started none, and joined the last job's group, whose other
    processes had ended."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()
    for name, value in environment_before.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


# compile=true: the network trains through torch.compile. nn.Module.compile compiles the network
# in place: its state-dict keys stay as they are (no _orig_mod. prefix), so the checkpoints of a
# compiled run are those of an eager one, and either kind resumes the other. Every pooling mode
# compiles without a graph break (tests/test_compile.py). Compiling costs time once per graph
# (training, evaluation, a smaller last batch); whether it pays depends on the machine
# (docs/performance.md).

DEFAULT_BACKEND = "inductor"


def compile_backend(setting) -> str | None:
    """The torch.compile backend that ``compile`` asks for: ``false`` none, ``true`` the
    default (inductor), or a backend's name (``aot_eager``: traced, not code-generated)."""
    if setting is None or setting is False:
        return None
    if setting is True:
        return DEFAULT_BACKEND
    backends = torch._dynamo.list_backends(exclude_tags=())
    if not isinstance(setting, str) or setting not in backends:
        raise ConfigError(
            f"compile={setting!r}: write true, false, or a torch.compile backend "
            f"({', '.join(b for b in backends if 'TESTING' not in b)})"
        )
    return setting


def compile_network(module: torch.nn.Module, setting) -> bool:
    """Compile ``module.net`` in place when ``setting`` (the config's ``compile``) asks for it;
    whether it did."""
    backend = compile_backend(setting)
    if backend is None:
        return False
    compile_in_place(module.net, backend)
    module.compile_backend = backend  # the benchmarks' hand-written twins compile theirs alike
    log.info("torch.compile: the network compiles (backend %s) on its first batches", backend)
    return True


def compile_in_place(net: torch.nn.Module, backend: str) -> None:
    """``net`` compiled in place as the job compiles its network: a graph a batch shape (a run's
    batches share one but the last), not one graph for every shape."""
    net.compile(backend=backend, dynamic=False)


def use_channels_last(module, setting: bool | str, device) -> bool:
    """The config's ``channels_last``: the network's weights and every batch in (N, H, W, C)
    memory (channels contiguous: what oneDNN's and tensor cores' convolutions read); whether it
    is. ``auto``: on the CPU for a network whose pooling runs in that layout as it is (the mode
    table's ``channels_last``: hard, upsample, avg, strided), where it was measured faster
    (``scripts/bench_training.py --channels-last``: docs/performance.md); not for the soft where
    and the wavelet (no faster), nor on a GPU until it is measured there (the device check). A
    memory layout only: the same values, the same checkpoints."""
    if setting == "auto":  # a model class of a lab's own may have no SWWAE, or no mode of the table
        mode = POOL_MODES.get(getattr(getattr(module, "net", None), "pool_mode", None))
        on = mode is not None and mode.channels_last and torch.device(device).type == "cpu"
    else:
        on = setting is True
    if on:
        module.net.to(memory_format=torch.channels_last)
        module.channels_last = True
    return on


# Lightning's lines that say nothing a user of swwae needs (the job says what happens in its own
# lines: one per epoch, the done: line): its banner (devices, tips), model summary, restore lines
LIGHTNING_LOGGERS = ("lightning.pytorch", "lightning.fabric")
# where Lightning's profilers log their reports (at INFO) when no file is named for them
PROFILER_LOGGER = "lightning.pytorch.profilers"
# warnings about state swwae itself made: a run's own checkpoint folder (resumed runs write into
# it), the safe reader's weights_only (swwae.checkpoint_file sets it), a few batches per epoch, a
# finished run evaluated again from its checkpoint without the callbacks that trained it
OWN_STATE_WARNINGS = (
    ".*Checkpoint directory .* exists and is not empty.*",
    ".*callbacks used to create the checkpoint need to be provided.*",
    ".*`weights_only` was not set.*",
    ".*is smaller than the logging interval.*",
    ".*was configured so validation will run at the end of the training epoch.*",
)


def quiet_lightning(verbose: bool = False) -> None:
    """Lightning's device lines and tips (``GPU available: ...``, ``Tip: ...``) only when
    ``verbose``, on stderr, plain, as when it is imported before Hydra sets up logging (train.py
    imports it after its checks: it would log them through Hydra's handler). Every command that
    builds a Trainer (train, evaluate) asks it: the console shows the command's own lines."""
    for name in LIGHTNING_LOGGERS:
        logger = logging.getLogger(name)
        if logger.propagate and not logger.handlers:
            logger.addHandler(logging.StreamHandler())
            logger.propagate = False
        logger.setLevel(logging.INFO if verbose else logging.WARNING)


def set_torch_defaults(verbose: bool = False) -> None:
    """Quieter, faster defaults for in-memory tensors on CPU; Lightning's info lines (banner,
    tips, summary, restore lines) only when ``verbose``."""
    for message in OWN_STATE_WARNINGS:
        warnings.filterwarnings("ignore", message)
    warnings.filterwarnings("ignore", ".*does not have many workers.*")
    warnings.filterwarnings("ignore", ".*LeafSpec.*")
    # a pre-empted epoch resumes exactly (the batch samplers skip what was trained: swwae.training.preemption)
    warnings.filterwarnings("ignore", ".*resuming from a checkpoint that ended before the epoch ended.*")
    # on Ctrl-C train.py says what is kept and how to continue, instead of Lightning's line
    logging.getLogger("lightning.pytorch.utilities.rank_zero").addFilter(
        lambda record: "Detected KeyboardInterrupt" not in record.getMessage()
    )
    quiet_lightning(verbose)
    # the report of a profiler the config names (+trainer.profiler=simple): asked for, so printed
    logging.getLogger(PROFILER_LOGGER).setLevel(logging.INFO)
    torch.set_float32_matmul_precision("high")
