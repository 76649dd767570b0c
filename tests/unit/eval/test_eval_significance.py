"""Paired bootstrap and exact McNemar against known values."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.eval.significance import (
    bootstrap_interval,
    bootstrap_means,
    compare,
    discordant_counts,
    mcnemar_exact,
    paired_bootstrap,
    significant,
    verdict,
)


def _pairs(n10: int, n01: int, n11: int = 4, n00: int = 3) -> tuple[np.ndarray, np.ndarray]:
    a = np.array([1] * n10 + [0] * n01 + [1] * n11 + [0] * n00, dtype=bool)
    b = np.array([0] * n10 + [1] * n01 + [1] * n11 + [0] * n00, dtype=bool)
    return a, b


@pytest.mark.parametrize(
    ("n10", "n01", "expected"),
    [
        (1, 5, 2 * (1 + 6) / 2**6),  # 2 * P(X <= 1), X ~ Bin(6, 1/2) = 14/64
        (0, 10, 2 / 2**10),
        (2, 8, 2 * (1 + 10 + 45) / 2**10),
        (3, 3, 1.0),
        (0, 0, 1.0),  # no discordant pair
    ],
)
def test_mcnemar_hand_computed(n10, n01, expected):
    a, b = _pairs(n10, n01)
    assert discordant_counts(a, b) == (n10, n01)
    assert mcnemar_exact(a, b) == pytest.approx(expected, rel=1e-12)
    assert mcnemar_exact(b, a) == pytest.approx(expected, rel=1e-12)  # symmetric


def test_bootstrap_identical_systems_give_zero_interval():
    rng = np.random.default_rng(0)
    a = rng.random(500) < 0.6
    assert paired_bootstrap(a, a.copy()) == (0.0, 0.0, 0.0)
    assert paired_bootstrap(a.astype(float), a.astype(float), method="index") == (0.0, 0.0, 0.0)


def test_bootstrap_constant_difference():
    a = np.ones(40, dtype=bool)
    b = np.zeros(40, dtype=bool)
    assert paired_bootstrap(a, b) == pytest.approx((1.0, 1.0, 1.0))


@pytest.mark.parametrize("method", ["multinomial", "index"])
def test_bootstrap_matches_normal_interval_at_large_n(method):
    rng = np.random.default_rng(1)
    n = 20_000 if method == "multinomial" else 4_000
    a = rng.random(n) < 0.6
    b = np.where(rng.random(n) < 0.2, ~a, a)  # 20% of pairs discordant
    d = a.astype(float) - b.astype(float)
    se = d.std(ddof=1) / np.sqrt(n)
    diff, lo, hi = paired_bootstrap(a, b, n_resamples=10_000, seed=0, method=method)
    assert diff == pytest.approx(d.mean())
    assert lo == pytest.approx(d.mean() - 1.959964 * se, abs=0.1 * se)
    assert hi == pytest.approx(d.mean() + 1.959964 * se, abs=0.1 * se)


def test_bootstrap_is_seeded():
    rng = np.random.default_rng(2)
    a, b = rng.random(300) < 0.5, rng.random(300) < 0.4
    assert paired_bootstrap(a, b, seed=5) == paired_bootstrap(a, b, seed=5)
    assert not np.array_equal(bootstrap_means(a, b, 200, seed=5), bootstrap_means(a, b, 200, seed=6))


def test_bootstrap_float_outcomes_use_index_resampling():
    rng = np.random.default_rng(4)
    a, b = rng.random(200), rng.random(200)
    boot = bootstrap_means(a, b, n_resamples=300, seed=0)
    assert boot.shape == (300,)
    with pytest.raises(DataError):
        bootstrap_means(a, b, method="multinomial")


def test_compare_entry():
    a, b = _pairs(1, 5)
    out = compare(a, b, n_resamples=2000)
    assert out["n"] == 13 and (out["n10"], out["n01"]) == (1, 5)
    assert out["diff"] == pytest.approx(-4 / 13)
    assert out["lo"] <= out["diff"] <= out["hi"]
    assert out["p"] == pytest.approx(14 / 64)
    assert out["acc_a"] == pytest.approx(5 / 13) and out["acc_b"] == pytest.approx(9 / 13)


def test_both_tests_must_agree():
    assert verdict(0.5, 3.0, 0.01) == "better" and verdict(-3.0, -0.5, 0.01) == "worse"
    assert verdict(0.5, 3.0, 0.08) == "tie"  # the interval alone
    assert verdict(-0.5, 3.0, 0.01) == "tie"  # McNemar alone
    assert verdict(0.5, 3.0, None) == "tie"
    a, b = _pairs(0, 12, n11=20, n00=20)  # b right on 12 discordant pairs, a on none
    c = compare(a, b, n_resamples=2000)
    assert c["hi"] < 0 and c["p"] < 0.05 and significant(c)
    c = compare(*_pairs(1, 5), n_resamples=2000)  # p = 0.22: not significant whatever the interval says
    assert not significant(c)


@pytest.mark.parametrize(
    "call",
    [
        lambda: paired_bootstrap([1, 0], [1]),
        lambda: paired_bootstrap([], []),
        lambda: paired_bootstrap([1, 0], [1, 0], alpha=1.5),
        lambda: mcnemar_exact([0.5, 1.0], [1, 0]),
        lambda: bootstrap_means([1, 0], [0, 1], method="jackknife"),
    ],
)
def test_bad_input_raises(call):
    with pytest.raises(DataError):
        call()


def test_bootstrap_interval_of_one_system():
    assert bootstrap_interval(np.ones(30)) == (1.0, 1.0, 1.0)
    rng = np.random.default_rng(9)
    x = rng.random(20_000) < 0.3
    se = x.std(ddof=1) / np.sqrt(x.size)
    mean, lo, hi = bootstrap_interval(x)
    assert mean == pytest.approx(x.mean())
    assert lo == pytest.approx(mean - 1.959964 * se, abs=0.1 * se)
    assert hi == pytest.approx(mean + 1.959964 * se, abs=0.1 * se)
