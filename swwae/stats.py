"""Comparing arms of a study that share their seeds: a mean with its 95% interval (or with its
sample std, ``mean_std``), the paired difference by seed with its interval and Wilcoxon's
signed-rank test, and McNemar's exact test on image-by-image outcomes. Plain Python and scipy;
no torch.

Why paired: two arms trained with one seed see the same labelled images, the same
initial-weight draws where their networks agree, and are tested on the same images, so most of
the seed-to-seed spread cancels in their difference. A difference is judged by its own spread,
not by the spread of either arm.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

# classes


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided 95% t interval over ``n`` values (no interval for one value)."""

    mean: float
    low: float
    high: float
    n: int

    def text(self, digits: int = 2, sign: bool = False) -> str:
        mean = f"{self.mean:{'+' if sign else ''}.{digits}f}"
        if self.n < 2:
            return mean
        return f"{mean} [{self.low:{'+' if sign else ''}.{digits}f}, {self.high:{'+' if sign else ''}.{digits}f}]"


@dataclass(frozen=True)
class PairedDifference:
    """``a - b`` by seed: the differences, their interval and Wilcoxon's two-sided p-value."""

    seeds: tuple
    differences: tuple[float, ...]
    interval: Interval
    wilcoxon_p: float

    @property
    def favours(self) -> tuple[int, int, int]:
        """How many seeds have a > b, a == b, a < b."""
        d = self.differences
        return sum(x > 0 for x in d), sum(x == 0 for x in d), sum(x < 0 for x in d)


@dataclass(frozen=True)
class McNemar:
    """Image-by-image outcomes of two classifiers on the same images: ``only_a`` right where b
    is wrong, ``only_b`` the other way; exact two-sided binomial p-value on the discordant pairs."""

    only_a: int
    only_b: int
    p: float


# functions


def mean_std(values: Iterable[float | None]) -> tuple[float, float | None]:
    """Mean and sample std (n - 1) of the finite values, None, NaN and infinities dropped:
    ``(nan, None)`` for no value left, a std of None for one. The "mean ± std over seeds" of
    the sweep table and the study reports."""
    values = [float(v) for v in values if v is not None and math.isfinite(v)]
    if not values:
        return math.nan, None
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None


def mean_std_text(values: Iterable[float | None], digits: int = 2, *, scale: float = 1.0, sign: bool = False) -> str:
    """A report's table cell: "mean ± std" (``mean_std``) of ``values`` times ``scale``, "-"
    where no finite value is left; ``sign`` writes "+" before a positive mean (a gain)."""
    mean, std = mean_std(None if v is None else v * scale for v in values)
    if math.isnan(mean):
        return "-"
    return f"{mean:{'+' if sign else ''}.{digits}f}" + (f" ± {std:.{digits}f}" if std is not None else "")


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Mean and Student-t interval: the spread of the mean of a few seeds, honestly wide."""
    from scipy import stats

    values = [float(v) for v in values]
    if not values:
        raise ValueError("no values")
    mean = statistics.fmean(values)
    if len(values) < 2:
        return Interval(mean, math.nan, math.nan, len(values))
    half = float(stats.t.ppf(0.5 + level / 2, len(values) - 1)) * statistics.stdev(values) / math.sqrt(len(values))
    return Interval(mean, mean - half, mean + half, len(values))


def wilcoxon_p(differences: Sequence[float]) -> float:
    """Two-sided Wilcoxon signed-rank p-value, exact, zeros dropped: the share of the 2^n sign
    patterns of the ranks of ``|d|`` (tied ones sharing their mean rank) whose sum of positive
    ranks lies at least as far from its mean as the observed one. Counted here rather than asked
    of scipy, whose answer for tied ranks changed between releases (for one study's seeds 0.0547,
    0.0742 and 0.0625 in scipy 1.13, 1.14 and 1.15+; the last is this count). 1.0 when every
    difference is zero (no evidence either way), NaN for no difference at all."""
    if not differences:
        return math.nan
    nonzero = [d for d in differences if d != 0]
    if not nonzero:
        return 1.0
    from scipy.stats import rankdata

    ranks = [round(2 * r) for r in rankdata([abs(d) for d in nonzero])]  # ties: mean ranks; doubled, whole
    patterns = [1] + [0] * sum(ranks)  # patterns[s]: sign patterns whose positive ranks sum to s
    for rank in ranks:
        patterns = [p + (patterns[s - rank] if s >= rank else 0) for s, p in enumerate(patterns)]
    total = sum(ranks)
    observed = abs(2 * sum(r for r, d in zip(ranks, nonzero) if d > 0) - total)
    return sum(p for s, p in enumerate(patterns) if abs(2 * s - total) >= observed) / 2 ** len(ranks)


def paired_difference(a: dict, b: dict) -> PairedDifference:
    """``a[seed] - b[seed]`` over the seeds both arms have."""
    seeds = tuple(sorted(set(a) & set(b)))
    if not seeds:
        raise ValueError("the two arms share no seed")
    differences = tuple(float(a[s]) - float(b[s]) for s in seeds)
    return PairedDifference(seeds, differences, t_interval(differences), wilcoxon_p(differences))


def mcnemar(correct_a: Sequence[bool], correct_b: Sequence[bool]) -> McNemar:
    """McNemar's exact test: only the images where exactly one of the two is right count."""
    from scipy import stats

    if len(correct_a) != len(correct_b):
        raise ValueError(f"{len(correct_a)} outcomes against {len(correct_b)}")
    only_a = sum(1 for x, y in zip(correct_a, correct_b) if x and not y)
    only_b = sum(1 for x, y in zip(correct_a, correct_b) if y and not x)
    n = only_a + only_b
    p = 1.0 if n == 0 else float(stats.binomtest(min(only_a, only_b), n, 0.5).pvalue)
    return McNemar(only_a, only_b, p)


def verdict(difference: PairedDifference, level: float = 0.05) -> str:
    """The finding in words, as strong as the numbers allow and no stronger."""
    interval = difference.interval
    if difference.interval.n < 2:
        return "one seed: no test"
    if interval.low > 0 or interval.high < 0:
        side = "higher" if interval.mean > 0 else "lower"
        strength = (
            f"(Wilcoxon p = {difference.wilcoxon_p:.3g})"
            if difference.wilcoxon_p < level
            else f"by the t interval, though Wilcoxon p = {difference.wilcoxon_p:.3g}"
        )
        return f"{side}, the 95% interval excludes 0 {strength}"
    return f"no difference detected: the 95% interval holds 0 (Wilcoxon p = {difference.wilcoxon_p:.3g})"
