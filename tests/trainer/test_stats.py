"""trainer.stats: intervals and paired tests against known values and scipy."""

from __future__ import annotations

import math
import random

import pytest

from trainer.stats import (bootstrap_interval, cell, compare, mcnemar_exact, mcnemar_midp, paired_bootstrap,
                           paired_pass_rates, wilson_interval)


def test_wilson_known_values():
    assert wilson_interval(5, 10) == pytest.approx((0.2365931, 0.7634069), abs=1e-6)
    lo, hi = wilson_interval(0, 10)
    assert lo == pytest.approx(0.0, abs=1e-12) and hi == pytest.approx(0.2775328, abs=1e-6)
    lo, hi = wilson_interval(100, 100)
    assert hi == 1.0 and lo == pytest.approx(0.9630065, abs=1e-6)


def test_mcnemar_known_values():
    # b=1, c=9: X ~ Bin(10, 1/2); P(X<1) = 1/1024, P(X=1) = 10/1024.
    assert mcnemar_midp(1, 9) == pytest.approx(2 * (1 + 5) / 1024)
    assert mcnemar_exact(1, 9) == pytest.approx(2 * 11 / 1024)
    assert mcnemar_midp(9, 1) == mcnemar_midp(1, 9)
    assert mcnemar_midp(0, 0) == 1.0 and mcnemar_midp(5, 5) == 1.0
    assert mcnemar_midp(3, 5) < mcnemar_exact(3, 5)


def test_mcnemar_exact_matches_scipy():
    stats = pytest.importorskip("scipy.stats")
    for b, c in [(1, 9), (3, 12), (7, 7), (0, 6), (20, 35)]:
        assert mcnemar_exact(b, c) == pytest.approx(stats.binomtest(min(b, c), b + c, 0.5).pvalue)


def test_cell_picks_wilson_for_pass_rates_and_bootstrap_otherwise():
    c = cell([1.0] * 5 + [0.0] * 5, scale=100)
    assert (c.method, c.n, c.score) == ("wilson", 10, 50.0)
    assert (c.lo, c.hi) == pytest.approx((23.65931, 76.34069), abs=1e-4)
    rng = random.Random(1)
    values = [rng.gauss(3.0, 1.0) for _ in range(200)]
    c = cell(values)
    assert c.method == "bootstrap" and c.lo < sum(values) / 200 < c.hi
    se = math.sqrt(sum((v - 3.0) ** 2 for v in values) / 200 / 200)
    assert c.hi - c.lo == pytest.approx(2 * 1.96 * se, rel=0.15)  # the bootstrap agrees with the normal interval
    assert cell([]).method == "none"


def test_bootstrap_interval_close_to_scipy_and_deterministic():
    stats = pytest.importorskip("scipy.stats")
    rng = random.Random(7)
    values = [rng.expovariate(1.0) for _ in range(150)]
    ours = bootstrap_interval(values, samples=4000)
    ref = stats.bootstrap((values,), lambda x: sum(x) / len(x), vectorized=False, method="percentile",
                          n_resamples=4000, random_state=0).confidence_interval
    assert ours[0] == pytest.approx(ref.low, abs=0.04) and ours[1] == pytest.approx(ref.high, abs=0.04)
    assert bootstrap_interval(values) == bootstrap_interval(values)
    assert bootstrap_interval([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_paired_pass_rates_uses_discordant_pairs():
    old = [1, 1, 0, 0, 1, 0, 0, 0, 1, 0, 0, 0]
    new = [1, 0, 1, 1, 1, 1, 1, 0, 1, 1, 1, 0]  # b = 1 (only old), c = 6 (only new)
    r = paired_pass_rates(old, new)
    assert r.test == "mcnemar_midp" and r.n == 12
    assert r.diff == pytest.approx(5 / 12)
    assert r.p_value == pytest.approx(mcnemar_midp(1, 6))
    assert r.lo < r.diff < r.hi


def test_paired_bootstrap_detects_shift_and_not_noise():
    rng = random.Random(3)
    old = [rng.gauss(0, 1) for _ in range(100)]
    shifted = paired_bootstrap(old, [x + 0.5 + rng.gauss(0, 0.1) for x in old])
    assert shifted.p_value < 0.01 and shifted.lo > 0.4
    noise = paired_bootstrap(old, [x + rng.gauss(0, 0.1) for x in old])
    assert noise.p_value > 0.05 and noise.lo < 0 < noise.hi
    same = paired_bootstrap(old, old)
    assert (same.diff, same.p_value) == (0.0, 1.0)


def test_compare_dispatches_and_scales():
    assert compare([1, 0, 0], [1, 1, 1], scale=100).test == "mcnemar_midp"
    r = compare([0.2, 0.4, 0.1], [0.3, 0.5, 0.15], scale=100)
    assert r.test == "paired_bootstrap" and r.diff == pytest.approx(100 * (0.1 + 0.1 + 0.05) / 3)
