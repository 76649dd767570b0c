"""Paired significance tests between two selectors on the same instances.

Both tests take per-instance outcomes of systems A and B on the *same* instances, in
the same order (e.g. :func:`chunksel.eval.metrics.per_instance_hits` restricted to the
answerable instances).

- :func:`paired_bootstrap`: the percentile bootstrap (Efron & Tibshirani, 1993; for
  IR/NLP evaluation see Koehn, EMNLP 2004 and Sakai, SIGIR 2006) of the mean paired
  difference d_i = a_i - b_i. Each resample draws n instances with replacement and
  records mean(d*); the interval is the (alpha/2, 1 - alpha/2) quantiles of those means.
- :func:`mcnemar_exact`: McNemar's test (McNemar, Psychometrika 1947) in its exact form:
  with n01 = #{a wrong, b right} and n10 = #{a right, b wrong}, under H0 the discordant
  count n10 ~ Binomial(n10 + n01, 1/2); the p-value is the two-sided binomial test
  (``scipy.stats.binomtest``), 1.0 when there is no discordant pair.

Differences are fractions (multiply by 100 for percentage points).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from chunksel.errors import DataError

#: resamples drawn per block in the index bootstrap (bounds memory to ~block * n ints)
_MAX_BLOCK_ELEMENTS = 4_000_000


def _paired(a: Any, b: Any) -> tuple[np.ndarray, np.ndarray]:
    xa = np.asarray(a)
    xb = np.asarray(b)
    if xa.ndim != 1 or xb.ndim != 1:
        raise DataError(f"expected two 1-D outcome vectors, got shapes {xa.shape} and {xb.shape}")
    if xa.shape != xb.shape:
        raise DataError(f"paired outcomes differ in length: {xa.shape[0]} vs {xb.shape[0]}")
    if xa.shape[0] == 0:
        raise DataError("paired outcomes are empty")
    return xa.astype(np.float64), xb.astype(np.float64)


def _is_binary(x: np.ndarray) -> bool:
    return bool(np.isin(x, (0.0, 1.0)).all())


def bootstrap_means(
    a: Any,
    b: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    method: str = "auto",
) -> np.ndarray:
    """(n_resamples,) bootstrap distribution of mean(a* - b*) over paired resamples.

    Args:
        a, b: (n,) per-instance outcomes (bool hits, or any float scores).
        n_resamples: number of bootstrap resamples.
        seed: seed of ``numpy.random.default_rng``.
        method: ``"index"`` resamples instance indices (blocks of resamples at once);
            ``"multinomial"`` (0/1 outcomes only) draws the counts of the three paired
            differences d in {-1, 0, +1} from Multinomial(n, observed proportions), which
            is the same distribution as index resampling at O(n_resamples) cost;
            ``"auto"`` picks ``"multinomial"`` for 0/1 outcomes, else ``"index"``.
    """
    xa, xb = _paired(a, b)
    if n_resamples < 1:
        raise DataError(f"n_resamples must be >= 1, got {n_resamples}")
    if method == "auto":
        method = "multinomial" if _is_binary(xa) and _is_binary(xb) else "index"
    rng = np.random.default_rng(seed)
    d = xa - xb
    n = d.shape[0]
    if method == "multinomial":
        if not (_is_binary(xa) and _is_binary(xb)):
            raise DataError("the multinomial bootstrap needs 0/1 outcomes; use method='index'")
        p = np.array([(d == 1).mean(), (d == -1).mean(), (d == 0).mean()])
        counts = rng.multinomial(n, p / p.sum(), size=n_resamples)
        return (counts[:, 0] - counts[:, 1]) / n
    if method != "index":
        raise DataError(f"unknown bootstrap method {method!r}; expected auto, index, multinomial")
    out = np.empty(n_resamples)
    block = max(1, _MAX_BLOCK_ELEMENTS // n)
    for start in range(0, n_resamples, block):
        stop = min(n_resamples, start + block)
        idx = rng.integers(0, n, size=(stop - start, n))
        out[start:stop] = d[idx].mean(axis=1)
    return out


def paired_bootstrap(
    hits_a: Any,
    hits_b: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    method: str = "auto",
) -> tuple[float, float, float]:
    """Observed mean difference and its percentile bootstrap interval.

    diff = (1/n) * sum_i (a_i - b_i); [lo, hi] = the alpha/2 and 1 - alpha/2 quantiles of
    the bootstrap means (:func:`bootstrap_means`). Seeded, so repeatable.

    Returns:
        ``(diff, lo, hi)`` as fractions.
    """
    if not 0.0 < alpha < 1.0:
        raise DataError(f"alpha must be in (0, 1), got {alpha}")
    xa, xb = _paired(hits_a, hits_b)
    diff = float((xa - xb).mean())
    boot = bootstrap_means(xa, xb, n_resamples=n_resamples, seed=seed, method=method)
    lo, hi = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return diff, float(lo), float(hi)


def bootstrap_interval(
    values: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> tuple[float, float, float]:
    """One system's mean (e.g. rank-1 accuracy from its hits) and its percentile
    bootstrap interval: ``(mean, lo, hi)`` as fractions (the report's per-dataset
    ``ci``, after x 100)."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise DataError(f"expected a 1-D outcome vector, got shape {x.shape}")
    return paired_bootstrap(x, np.zeros_like(x), n_resamples=n_resamples, seed=seed, alpha=alpha)


def discordant_counts(hits_a: Any, hits_b: Any) -> tuple[int, int]:
    """``(n10, n01)``: #{a right, b wrong} and #{a wrong, b right}."""
    xa, xb = _paired(hits_a, hits_b)
    if not (_is_binary(xa) and _is_binary(xb)):
        raise DataError("McNemar's test needs 0/1 (bool) outcomes")
    a = xa.astype(bool)
    b = xb.astype(bool)
    return int((a & ~b).sum()), int((~a & b).sum())


def mcnemar_exact(hits_a: Any, hits_b: Any) -> float:
    """Exact (binomial) two-sided McNemar p-value.

    p = binomtest(n10, n10 + n01, 1/2, two-sided); 1.0 when n10 + n01 = 0. For
    n10 <= n01 this equals min(1, 2 * sum_{i <= n10} C(m, i) / 2^m), m = n10 + n01.
    """
    from chunksel.errors import require

    stats = require("scipy.stats", "eval")
    n10, n01 = discordant_counts(hits_a, hits_b)
    m = n10 + n01
    if m == 0:
        return 1.0
    return float(stats.binomtest(n10, m, 0.5, alternative="two-sided").pvalue)


def compare(
    hits_a: Any,
    hits_b: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
) -> dict[str, float | int]:
    """Both tests at once, as the report's significance entry (fractions).

    Returns:
        ``{"diff", "lo", "hi", "p", "n", "n10", "n01", "acc_a", "acc_b"}``.
    """
    xa, xb = _paired(hits_a, hits_b)
    diff, lo, hi = paired_bootstrap(xa, xb, n_resamples=n_resamples, seed=seed, alpha=alpha)
    n10, n01 = discordant_counts(xa, xb)
    return {
        "diff": diff,
        "lo": lo,
        "hi": hi,
        "p": mcnemar_exact(xa, xb),
        "n": int(xa.shape[0]),
        "n10": n10,
        "n01": n01,
        "acc_a": float(xa.mean()),
        "acc_b": float(xb.mean()),
    }


def verdict(lo: float | None, hi: float | None, p: float | None, alpha: float = 0.05) -> str:
    """The project's rule for calling A significantly different from B: ``"better"`` /
    ``"worse"`` only when both tests agree, the paired bootstrap interval ``[lo, hi]``
    excluding 0 on that side *and* McNemar's ``p < alpha``; else ``"tie"``."""
    if p is None or not p < alpha:
        return "tie"
    if lo is not None and lo > 0:
        return "better"
    if hi is not None and hi < 0:
        return "worse"
    return "tie"


def significant(c: Any, alpha: float = 0.05) -> bool:
    """Whether a comparison mapping (``lo``, ``hi``, ``p``, as :func:`compare` or
    :func:`significance_entry` return) differs by :func:`verdict`'s rule, either way."""
    return verdict(c["lo"], c["hi"], c.get("p"), alpha) != "tie"


def significance_entry(
    a: str,
    b: str,
    hits_a: Any,
    hits_b: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    majority: tuple[Any, Any] | None = None,
) -> dict[str, Any]:
    """A ``results["significance"][dataset]`` entry (percent / percentage points) from
    the paired rank-1 outcomes of selectors ``a`` and ``b`` on the same instances.

    ``hits_a`` / ``hits_b`` may be hit rates averaged over seeds (the bootstrap interval
    is then over instances of the seed-averaged accuracy); McNemar's test then reads the
    0/1 ``majority`` outcomes (e.g. the seeds' majority vote)."""
    if majority is None:
        c = compare(hits_a, hits_b, n_resamples=n_resamples, seed=seed, alpha=alpha)
    else:
        diff, lo, hi = paired_bootstrap(hits_a, hits_b, n_resamples=n_resamples, seed=seed, alpha=alpha)
        ma, mb = (np.asarray(m, dtype=bool) for m in majority)
        c = {"diff": diff, "lo": lo, "hi": hi, "p": mcnemar_exact(ma, mb), "n": int(len(ma)),
             "n10": int((ma & ~mb).sum()), "n01": int((~ma & mb).sum()),
             "acc_a": float(np.mean(hits_a)), "acc_b": float(np.mean(hits_b))}
    return {
        "a": a,
        "b": b,
        "diff": 100.0 * c["diff"],
        "lo": 100.0 * c["lo"],
        "hi": 100.0 * c["hi"],
        "p": c["p"],
        "n": c["n"],
        "n10": c["n10"],
        "n01": c["n01"],
        "acc_a": 100.0 * c["acc_a"],
        "acc_b": 100.0 * c["acc_b"],
    }
