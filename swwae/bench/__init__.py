"""The benchmark harness of ``scripts/bench_*.py``: interleaved timing, medians and ratios,
peak memory (``harness``, pure torch), one training step at a Lightning precision (``steps``,
pure torch), and the epoch clock of train.py's own code path
(``epoch_clock``, which needs Lightning, Hydra and the shipped configs).

The harness's names (``swwae.bench.Stopwatch``, ...) import it, and so torch, when first used
(PEP 562): ``python -m swwae.bench.device_summary``, which the device check runs as each step
begins and when it is stopped, imports the standard library alone."""

from __future__ import annotations

__all__ = ["Stopwatch", "Timings", "median", "paired_ratio", "peak_memory", "set_threads", "time_interleaved", "timed"]


def __getattr__(name: str):
    if name in __all__:
        from swwae.bench import harness

        return getattr(harness, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*(name for name in globals() if name.startswith("__")), *__all__})
