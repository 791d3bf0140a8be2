"""The benchmark harness of ``scripts/bench_*.py``: interleaved timing, medians and ratios,
peak memory (``harness``, pure torch), one training step at a Lightning precision (``steps``,
pure torch), and the epoch clock of train.py's own code path
(``epoch_clock``, which needs Lightning, Hydra and the shipped configs)."""

from swwae.bench.harness import (
    Stopwatch,
    Timings,
    median,
    paired_ratio,
    peak_memory,
    set_threads,
    time_interleaved,
    timed,
)

__all__ = ["Stopwatch", "Timings", "median", "paired_ratio", "peak_memory", "set_threads", "time_interleaved", "timed"]
