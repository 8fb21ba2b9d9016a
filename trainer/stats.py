"""Statistics for eval scores: intervals for one cell, paired tests for two checkpoints.

What: a 95% interval for every eval cell (Wilson for pass rates, a percentile bootstrap for
continuous scores such as the reward model's or SWE similarity), and a paired comparison of two
checkpoints on the same rows (McNemar's exact mid-p test for pass rates, a paired bootstrap for
continuous scores) giving the mean difference, its interval and a two-sided p-value.

Why paired: both checkpoints answer the same held-out rows, so the per-row differences carry
far less noise than two independent means; an unpaired standard error would call real drops
noise (and real gains luck). Why mid-p: the exact McNemar test is conservative on the small
discordant counts a 100-row eval produces; the mid-p variant keeps close to the nominal level.

Pure Python (math + random, seeded), so gates and reports are reproducible and need no numpy
or scipy; the tests check the numbers against scipy.
"""

from __future__ import annotations

import math
import random
from dataclasses import asdict, dataclass
from statistics import NormalDist
from typing import Any, Sequence

LEVEL = 0.95
BOOTSTRAP_SAMPLES = 2000


def z_value(level: float = LEVEL) -> float:
    """The two-sided normal quantile of a confidence level (1.96 for 0.95)."""
    return NormalDist().inv_cdf(0.5 + level / 2)


def is_binary(values: Sequence[float]) -> bool:
    """Whether every value is 0 or 1 (a pass rate); scores are compared raw, before scaling to points."""
    return all(v in (0.0, 1.0) for v in values)


def wilson_interval(successes: float, n: int, level: float = LEVEL) -> tuple[float, float]:
    """Wilson score interval of a pass rate (successes / n) as fractions in [0, 1]."""
    if n <= 0:
        return (0.0, 1.0)
    z = z_value(level)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


def _quantile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolation quantile (numpy's default) of already sorted values."""
    pos = q * (len(sorted_values) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def bootstrap_means(values: Sequence[float], samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> list[float]:
    """Sorted means of `samples` resamples (with replacement) of `values`."""
    rng = random.Random(seed)
    n = len(values)
    return sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(samples))


def bootstrap_interval(values: Sequence[float], level: float = LEVEL, samples: int = BOOTSTRAP_SAMPLES,
                       seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean of `values`."""
    if not values:
        return (0.0, 0.0)
    means = bootstrap_means(values, samples, seed)
    return (_quantile(means, (1 - level) / 2), _quantile(means, (1 + level) / 2))


@dataclass(frozen=True)
class Cell:
    """One eval cell: the mean score and its interval, in the unit of the scores."""

    score: float
    """Mean over scored rows."""
    lo: float
    """Lower end of the interval."""
    hi: float
    """Upper end of the interval."""
    n: int
    """Scored rows."""
    method: str
    """`wilson` (pass rates) or `bootstrap` (continuous scores); `none` when n is 0."""


def cell(values: Sequence[float], scale: float = 1.0, level: float = LEVEL, seed: int = 0) -> Cell:
    """Mean and interval of raw scores, multiplied by `scale` (100 gives points).

    Pass rates (every value 0 or 1) get the Wilson interval, anything else a bootstrap.
    """
    n = len(values)
    if n == 0:
        return Cell(0.0, 0.0, 0.0, 0, "none")
    mean = sum(values) / n
    if is_binary(values):
        lo, hi = wilson_interval(sum(values), n, level)
        method = "wilson"
    else:
        lo, hi = bootstrap_interval(values, level, seed=seed)
        method = "bootstrap"
    return Cell(mean * scale, lo * scale, hi * scale, n, method)


def mcnemar_midp(b: int, c: int) -> float:
    """Two-sided mid-p McNemar test of b (only the first passes) vs c (only the second passes).

    Under the null each discordant pair is a fair coin: p = 2·(P(X < k) + ½·P(X = k)) with
    X ~ Binomial(b + c, ½) and k = min(b, c), capped at 1.
    """
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    below = sum(math.comb(n, i) for i in range(k)) / 2 ** n
    at = math.comb(n, k) / 2 ** n
    return min(1.0, 2 * (below + 0.5 * at))


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar (binomial) p-value: 2·P(X ≤ min(b, c)), capped at 1."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    return min(1.0, 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n)


@dataclass(frozen=True)
class Comparison:
    """A paired comparison of `new` against `old` on the same rows."""

    diff: float
    """Mean of new − old over paired rows (in the scores' unit)."""
    lo: float
    """Lower end of the interval of `diff`."""
    hi: float
    """Upper end of the interval of `diff`."""
    p_value: float
    """Two-sided p-value of "no difference"."""
    n: int
    """Paired rows."""
    test: str
    """`mcnemar_midp` (pass rates) or `paired_bootstrap` (continuous); `none` without pairs."""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def paired_bootstrap(old: Sequence[float], new: Sequence[float], level: float = LEVEL,
                     samples: int = BOOTSTRAP_SAMPLES, seed: int = 0) -> Comparison:
    """Paired bootstrap of mean(new − old): percentile interval, and a two-sided p-value from
    how often the resampled mean difference falls on the other side of 0."""
    diffs = [b - a for a, b in zip(old, new, strict=True)]
    n = len(diffs)
    if n == 0:
        return Comparison(0.0, 0.0, 0.0, 1.0, 0, "none")
    mean = sum(diffs) / n
    if all(d == diffs[0] for d in diffs):  # no spread: the difference is exact
        return Comparison(mean, mean, mean, 1.0 if mean == 0 else 0.0, n, "paired_bootstrap")
    means = bootstrap_means(diffs, samples, seed)
    below = sum(m <= 0 for m in means) / samples
    above = sum(m >= 0 for m in means) / samples
    p = min(1.0, 2 * min(below, above))
    p = max(p, 1 / samples) if mean != 0 else 1.0  # a bootstrap cannot show p below 1/samples
    return Comparison(mean, _quantile(means, (1 - level) / 2), _quantile(means, (1 + level) / 2), p, n,
                      "paired_bootstrap")


def paired_pass_rates(old: Sequence[float], new: Sequence[float], level: float = LEVEL) -> Comparison:
    """McNemar mid-p test of two pass-rate vectors on the same rows, with a Wald interval of
    the paired difference (b and c: rows only old / only new passes)."""
    pairs = list(zip(old, new, strict=True))
    n = len(pairs)
    if n == 0:
        return Comparison(0.0, 0.0, 0.0, 1.0, 0, "none")
    b = sum(1 for a, x in pairs if a == 1 and x == 0)
    c = sum(1 for a, x in pairs if a == 0 and x == 1)
    diff = (c - b) / n
    se = math.sqrt(max(0.0, (b + c) / n - diff * diff) / n)
    z = z_value(level)
    return Comparison(diff, max(-1.0, diff - z * se), min(1.0, diff + z * se), mcnemar_midp(b, c), n, "mcnemar_midp")


def compare(old: Sequence[float], new: Sequence[float], scale: float = 1.0, level: float = LEVEL,
            seed: int = 0) -> Comparison:
    """Paired comparison on aligned rows: McNemar for pass rates, paired bootstrap otherwise;
    the difference and interval are multiplied by `scale`."""
    if is_binary(old) and is_binary(new):
        r = paired_pass_rates(old, new, level)
    else:
        r = paired_bootstrap(old, new, level, seed=seed)
    return Comparison(r.diff * scale, r.lo * scale, r.hi * scale, r.p_value, r.n, r.test)


def align(old: dict[str, float | None], new: dict[str, float | None]) -> tuple[list[float], list[float]]:
    """The scores of rows both sides scored (same key, neither None), in a stable order."""
    keys = sorted(k for k in old.keys() & new.keys() if old[k] is not None and new[k] is not None)
    return [float(old[k]) for k in keys], [float(new[k]) for k in keys]  # type: ignore[arg-type]
