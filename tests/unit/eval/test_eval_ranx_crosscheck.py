"""MRR and nDCG@K against ranx on a random fixture without ties (ranx's qrels/run dicts).

ranx compiles its metrics with numba on first use (tens of seconds on a cold cache), so
this check is marked slow; the trec_eval cross-check in test_eval_metrics.py is the fast
one.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from chunksel.eval.metrics import mrr, ndcg_at_k, reciprocal_ranks

pytestmark = pytest.mark.slow


def test_mrr_and_ndcg_match_ranx():
    ranx = pytest.importorskip("ranx")
    rng = np.random.default_rng(11)
    b, k = 60, 5
    scores = rng.normal(size=(b, k))
    lengths = rng.integers(2, k + 1, size=b)
    mask = np.arange(k)[None, :] < lengths[:, None]
    labels = rng.integers(0, 3, size=(b, k)) * (rng.random((b, k)) < 0.4)
    labels[np.arange(b), 0] = np.maximum(labels[:, 0], 1)  # answerable
    labels = np.where(mask, labels, 0)
    scores = np.where(mask, scores, -np.inf)
    qrels = ranx.Qrels(
        {f"q{i}": {f"d{j}": int(labels[i, j]) for j in range(lengths[i]) if labels[i, j] > 0}
         for i in range(b)}
    )
    run = ranx.Run({f"q{i}": {f"d{j}": float(scores[i, j]) for j in range(lengths[i])} for i in range(b)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = ranx.evaluate(qrels, run, ["mrr", f"ndcg@{k}"], return_mean=False)
    order = [int(q[1:]) for q in run.keys()]
    np.testing.assert_allclose(reciprocal_ranks(scores, labels, mask)[order], ref["mrr"], atol=1e-9)
    assert mrr(scores, labels, mask) == pytest.approx(float(np.mean(ref["mrr"])))
    assert ndcg_at_k(scores, labels, mask, k) == pytest.approx(float(np.mean(ref[f"ndcg@{k}"])))
