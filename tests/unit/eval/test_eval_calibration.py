"""Calibration and abstention metrics: hand-computed values and a scikit-learn cross-check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chunksel.eval.calibration import (
    abstention_at_coverage,
    auroc,
    auto_k_summary,
    brier,
    ece,
    equal_mass_bins,
    reliability,
    risk_coverage,
)

Y = np.array([0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 1, 0])
P = np.array([0.1, 0.8, 0.55, 0.4, 0.9, 0.55, 0.2, 0.3, 0.7, 0.05, 0.55, 0.6])


def test_auroc_and_brier_match_scikit_learn_on_fixed_arrays():
    sk = pytest.importorskip("sklearn.metrics")
    assert auroc(Y, P) == pytest.approx(sk.roc_auc_score(Y, P), abs=1e-12)
    assert brier(Y, P) == pytest.approx(sk.brier_score_loss(Y, P), abs=1e-12)
    rng = np.random.default_rng(3)
    for _ in range(20):
        y = rng.integers(0, 2, 200)
        p = np.round(rng.random(200), 2)  # rounding makes ties
        if 0 < y.sum() < len(y):
            assert auroc(y, p) == pytest.approx(sk.roc_auc_score(y, p), abs=1e-12)
            assert brier(y, p) == pytest.approx(sk.brier_score_loss(y, p), abs=1e-12)


def test_auroc_hand_values():
    assert auroc([0, 0, 1, 1], [0.1, 0.2, 0.3, 0.4]) == 1.0
    assert auroc([1, 1, 0, 0], [0.1, 0.2, 0.3, 0.4]) == 0.0
    assert auroc([0, 1], [0.5, 0.5]) == 0.5  # a tie counts one half
    assert math.isnan(auroc([1, 1], [0.1, 0.2]))


def test_ece_hand_computed_with_equal_mass_bins():
    # 6 values, 3 bins of 2 by sorted probability:
    # {0.1 (y0), 0.2 (y0)}: |0 - 0.15| = 0.15; {0.4 (y1), 0.6 (y0)}: |0.5 - 0.5| = 0
    # {0.8 (y1), 0.9 (y0)}: |0.5 - 0.85| = 0.35  ->  ECE = (0.15 + 0 + 0.35) / 3
    y = [0, 1, 0, 0, 1, 0]
    p = [0.1, 0.4, 0.9, 0.2, 0.8, 0.6]
    assert ece(y, p, n_bins=3) == pytest.approx(0.5 / 3)
    assert ece([1, 0], [1.0, 0.0]) == 0.0
    # perfectly calibrated within each bin
    assert ece([0, 1, 0, 1], [0.5, 0.5, 0.5, 0.5], n_bins=1) == 0.0


def test_equal_mass_bins_have_near_equal_counts_and_cover_every_value():
    bins = equal_mass_bins(np.linspace(0, 1, 100), 15)
    sizes = [len(b) for b in bins]
    assert len(bins) == 15 and max(sizes) - min(sizes) <= 1
    assert sorted(np.concatenate(bins).tolist()) == list(range(100))
    rel = reliability(Y, P, n_bins=4)
    assert rel["count"] == [3, 3, 3, 3]
    assert rel["mean_probability"] == sorted(rel["mean_probability"])


def test_abstention_at_80_percent_coverage():
    answerable = [1, 1, 1, 1, 1, 0, 0, 0, 0]
    p = [0.9, 0.8, 0.7, 0.6, 0.1, 0.65, 0.5, 0.2, 0.05]
    out = abstention_at_coverage(answerable, p, keep=0.8)
    # 4 of 5 answerable kept at t = 0.6; unanswerable below 0.6: 0.5, 0.2, 0.05 (0.65 answered)
    assert out["threshold"] == 0.6
    assert out["answerable_kept"] == pytest.approx(0.8)
    assert out["unanswerable_abstained"] == pytest.approx(0.75)
    with pytest.raises(ValueError, match="keep"):
        abstention_at_coverage(answerable, p, keep=0.0)


def test_risk_coverage_answers_most_confident_first():
    out = risk_coverage([0.2, 0.9, 0.5], [False, True, False])
    assert out["coverage"] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert out["accuracy"] == pytest.approx([1.0, 0.5, 1 / 3])
    assert out["aurc"] == pytest.approx(np.mean([0.0, 0.5, 2 / 3]))


def test_auto_k_summary():
    kept = [[0], [], [1, 2], []]
    labels = [[1, 0, 0], [0, 1, 0], [0, 0, 0], [0, 0, 0]]
    out = auto_k_summary(kept, labels)
    assert out["mean_kept"] == pytest.approx(0.75)
    assert out["evidence_recall"] == pytest.approx(0.5)
    assert out["empty_unanswerable"] == pytest.approx(0.5)
    assert out["empty_answerable"] == pytest.approx(0.5)


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="labels"):
        brier([0, 2], [0.1, 0.2])
    with pytest.raises(ValueError, match="finite"):
        ece([0, 1], [0.1, float("nan")])
    with pytest.raises(ValueError, match="2 labels but 3"):
        auroc([0, 1], [0.1, 0.2, 0.3])


def test_abstention_summary_on_a_small_fixed_case():
    from chunksel.eval.calibration import abstention_summary

    ninf = -np.inf
    scores = np.array([[0.9, 0.1, 0.0], [0.2, 0.8, ninf], [0.3, 0.2, 0.1], [0.1, 0.85, 0.2]])
    labels = np.array([[1, 0, 0], [1, 0, 0], [0, 0, 0], [0, 0, 0]])
    chunk_p = np.array([[0.9, 0.1, 0.05], [0.3, 0.6, np.nan], [0.2, 0.1, 0.05], [0.1, 0.3, 0.1]])
    set_p = np.array([0.9, 0.7, 0.2, 0.4])
    out = abstention_summary(scores, labels, chunk_p, set_p, auto_threshold=0.25, n_bins=2)
    assert out["n_sets"] == 4 and out["answerable_rate"] == 0.5
    assert out["auroc"] == 1.0 and out["auroc_top_score"] == pytest.approx(0.75)
    assert out["rank1_answerable"] == 0.5  # set 1's top chunk (0.8) is not the positive
    # k=auto keeps p >= 0.25: set 0 {0}, set 1 {1, 0}, set 2 {}, set 3 {1}
    assert out["auto"]["mean_kept"] == pytest.approx(1.0) and out["auto"]["evidence_recall"] == 1.0
    assert out["k2"]["mean_kept"] == pytest.approx(2.0) and out["k2"]["evidence_recall"] == 1.0
    assert out["abstention"]["unanswerable_abstained"] == 1.0
    assert out["chunk_brier"] == pytest.approx(brier(labels[np.isfinite(scores)], chunk_p[np.isfinite(scores)]))
