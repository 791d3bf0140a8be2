"""Timing and peak memory for the benchmark scripts (``scripts/bench_*.py``): one harness,
so that every benchmark measures the same way and reports the same statistics.

Pure Python and torch (no Lightning, no Hydra): it times and measures callables.

Timing: ``time_interleaved`` runs the variants of a benchmark round-robin in one process, so
machine noise hits them alike, and records the seconds of every call (and the page faults
it took: memory fetched afresh from the OS). ``Timings`` reads them: medians, quartiles,
and ratios to a baseline: the ratio of the medians, the paired ratio (the median over
rounds of each round's ratio: a load that drifts between rounds cancels out) and the
best-round ratio (the best rounds are the closest to an idle machine).

Peak memory: ``peak_memory(fn, device)`` is the most memory allocated at once while ``fn``
runs, beyond what was allocated before it: ``torch.cuda.max_memory_allocated`` on a GPU;
on the CPU the high-water mark of the blocks ``fn`` took from torch's allocator, allocation
by allocation, from the profiler's allocation events (tracemalloc does not see torch's buffers;
per-op totals would count nested ops twice). Kernels' own scratch buffers count, as they do on a GPU.
"""

from __future__ import annotations

import contextlib
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import torch

# timing


def synchronize(device) -> None:
    """Wait for ``device``'s queued work (nothing to wait for on the CPU): that GPU's, not the
    current one's (``--device cuda:1`` while cuda:0 is current)."""
    if device is not None and torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def median(values: Iterable[float]) -> float:
    """The median, or nan when there is nothing to take it of."""
    values = list(values)
    return statistics.median(values) if values else float("nan")


def paired_ratio(times: Sequence[float], baseline: Sequence[float]) -> float:
    """The median over rounds of each round's ratio to the baseline run beside it."""
    return median(a / b for a, b in zip(times, baseline))


def timed(fn: Callable[[], object], device=None) -> tuple[float, int]:
    """Seconds of one call of ``fn`` (its GPU work included), and the page faults it took."""
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    start = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - start, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults


@dataclass
class Timings:
    """Seconds and page faults of every timed call, per variant, in round order."""

    seconds: dict[str, list[float]]
    faults: dict[str, list[int]]

    def median(self, name: str) -> float:
        return median(self.seconds[name])

    def quartiles(self, name: str) -> list[float]:
        """First quartile, median, third quartile of the seconds."""
        times = self.seconds[name]
        return statistics.quantiles(times, n=4) if len(times) > 1 else [self.median(name)] * 3

    def ratio_of_medians(self, name: str, baseline: str) -> float:
        return self.median(name) / self.median(baseline)

    def paired_ratio(self, name: str, baseline: str) -> float:
        return paired_ratio(self.seconds[name], self.seconds[baseline])

    def best_ratio(self, name: str, baseline: str) -> float:
        return min(self.seconds[name]) / min(self.seconds[baseline])

    def median_faults(self, name: str) -> float:
        return median(self.faults[name])


def time_interleaved(steps: Mapping[str, Callable[[], object]], repeats: int, warmup: int = 0, device=None) -> Timings:
    """``warmup`` untimed rounds, then ``repeats`` timed ones; a round calls every step once,
    in order (round-robin), so machine noise hits the variants alike."""
    for _ in range(warmup):
        for step in steps.values():
            step()
    synchronize(device)
    timings = Timings({name: [] for name in steps}, {name: [] for name in steps})
    for _ in range(repeats):
        for name, step in steps.items():
            seconds, faults = timed(step, device)
            timings.seconds[name].append(seconds)
            timings.faults[name].append(faults)
    return timings


class Stopwatch:
    """Sums the time spent in calls of wrapped functions."""

    def __init__(self):
        self.total = 0.0

    def wrap(self, fn):
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total += time.perf_counter() - start

        return timed


def _pci_bus(bus_id: str) -> tuple[int, int, int] | None:
    """(domain, bus, device) of an nvidia-smi PCI bus id such as ``00000000:3B:00.0``."""
    try:
        domain, bus, rest = bus_id.strip().split(":")
        return int(domain, 16), int(bus, 16), int(rest.split(".")[0], 16)
    except ValueError:
        return None


class BusySampler:
    """How busy a GPU is: its utilisation (the share of time a kernel ran, NVML's counter, read
    through ``torch.cuda.utilization`` or ``nvidia-smi``), sampled every ``interval`` seconds by
    a thread while the block runs; ``between(start, end)`` is the mean of the samples taken in a
    span of ``time.perf_counter``. The share of an epoch the GPU works, data loading included."""

    def __init__(self, device, interval: float = 0.1):
        self.device, self.interval = torch.device(device), interval
        self.samples: list[tuple[float, float]] = []
        self._stop, self._thread = None, None

    def read(self) -> float | None:
        try:
            return float(torch.cuda.utilization(self.device))
        except Exception:  # no NVML bindings (the GPU image has none): ask nvidia-smi
            return self._nvidia_smi()

    def _nvidia_smi(self) -> float | None:
        """The GPU's utilisation from ``nvidia-smi``, found by its PCI bus: nvidia-smi's indices are
        not CUDA's (it ignores CUDA_VISIBLE_DEVICES and orders GPUs by bus, CUDA fastest first: cuda:0
        may be its GPU 3). Where the bus ids do not match, a machine showing one GPU has it."""
        import subprocess

        query = ["nvidia-smi", "--query-gpu=pci.bus_id,utilization.gpu", "--format=csv,noheader,nounits"]
        try:
            props = torch.cuda.get_device_properties(self.device)
            bus = (props.pci_domain_id, props.pci_bus_id, props.pci_device_id)
            rows = subprocess.run(query, capture_output=True, text=True, timeout=5).stdout.strip().splitlines()
            gpus = dict(row.rsplit(",", 1) for row in rows)
            ours = [value for bus_id, value in gpus.items() if _pci_bus(bus_id) == bus]
            if len(ours) != 1:
                ours = list(gpus.values()) if len(gpus) == 1 else []
            return float(ours[0]) if ours else None  # "[N/A]" (a MIG slice): a ValueError, no sample
        except (AttributeError, OSError, ValueError, subprocess.SubprocessError):
            return None

    def __enter__(self):
        import threading

        self._stop = threading.Event()

        def sample():
            while not self._stop.is_set():
                value = self.read()
                if value is not None:
                    self.samples.append((time.perf_counter(), value))
                self._stop.wait(self.interval)

        self._thread = threading.Thread(target=sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def between(self, start: float, end: float) -> float:
        """The mean utilisation (0-100) sampled in [start, end]; nan without samples there."""
        values = [v for t, v in self.samples if start <= t <= end]
        return statistics.fmean(values) if values else float("nan")


def set_threads(threads: int | None) -> int:
    """``--threads``: torch's CPU threads (None or 0: torch's own choice); the number in use."""
    if threads:
        torch.set_num_threads(threads)
    return torch.get_num_threads()


# memory


def peak_memory(fn: Callable[[], object], device) -> int:
    """Peak bytes allocated during one call of ``fn``, beyond what was live before it."""
    if torch.device(device).type == "cuda":  # that GPU's counters, not the current one's
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    # CPU: every allocation and free of torch's allocator, in order, from the profiler
    from torch.profiler import ProfilerActivity, profile

    with quiet_stderr():  # the profiler's C++ side logs its start and stop there
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            fn()
        events = sorted(_cpu_allocations(prof.profiler.kineto_results.experimental_event_tree()))
    # only the memory fn allocated: a block an earlier profiled call made (torch knows its size)
    # and fn's run freed (the garbage collector may run inside it) is not fn's to count
    live = peak = 0
    sizes = {}
    for _, ptr, nbytes in events:
        if nbytes > 0:
            sizes[ptr] = nbytes
            live += nbytes
        elif ptr in sizes:
            live -= sizes.pop(ptr)
        peak = max(peak, live)
    return peak


def _cpu_allocations(roots) -> Iterable[tuple[int, int, int]]:
    """(time, address, bytes: negative for a free) of each allocation and free of torch's CPU
    allocator in the profiler's event tree ``roots``."""
    nodes = list(roots)
    while nodes:
        node = nodes.pop()
        nodes.extend(node.children)
        if node.tag == torch._C._profiler._EventType.Allocation and node.extra_fields.device.type == "cpu":
            yield node.start_time_ns, node.extra_fields.ptr, node.extra_fields.alloc_size


@contextlib.contextmanager
def quiet_stderr():
    """File descriptor 2 to /dev/null for the block (C++ logging bypasses ``sys.stderr``)."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
            yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
