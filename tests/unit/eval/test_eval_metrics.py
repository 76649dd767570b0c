"""Ranking metrics on hand-written fixtures with exact values, plus a trec_eval cross-check."""

from __future__ import annotations

import math

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.eval.metrics import (
    evaluate,
    mrr,
    ndcg_at_k,
    ndcg_values,
    per_instance_hits,
    rank1_accuracy,
    rank_matrix,
    recall_at_k,
    reciprocal_ranks,
    subset_mask,
)

NEG = -np.inf

# row 0: plain miss, first positive at position 3
# row 1: all scores tied -> retrieval order -> column 0 (negative) first
# row 2: two real candidates, a padded slot carrying a stray label and score
# row 3: unanswerable
# row 4: every real candidate positive (answerable, not contested), tie between cols 1, 2
SCORES = np.array(
    [
        [0.1, 0.9, 0.5, 0.3],
        [0.5, 0.5, 0.5, 0.5],
        [0.2, 0.8, 5.0, NEG],
        [0.3, 0.2, 0.1, 0.0],
        [0.1, 0.7, 0.7, NEG],
    ]
)
LABELS = np.array(
    [
        [1, 0, 0, 1],
        [0, 1, 0, 0],
        [0, 1, 1, 0],
        [0, 0, 0, 0],
        [1, 1, 1, 0],
    ]
)
MASK = np.array(
    [
        [1, 1, 1, 1],
        [1, 1, 1, 1],
        [1, 1, 0, 0],
        [1, 1, 1, 1],
        [1, 1, 1, 0],
    ],
    dtype=bool,
)

ROW0_NDCG = (1 / math.log2(4) + 1 / math.log2(5)) / (1 + 1 / math.log2(3))
ROW1_NDCG = 1 / math.log2(3)


def test_rank_matrix_ties_go_to_retrieval_rank_and_padding_last():
    order = rank_matrix(SCORES, MASK)
    assert order.tolist() == [
        [1, 2, 3, 0],
        [0, 1, 2, 3],
        [1, 0, 2, 3],
        [0, 1, 2, 3],
        [1, 2, 0, 3],
    ]
    # a real candidate scored -inf still ranks before padding
    assert rank_matrix(np.array([[NEG, 2.0, NEG]]), np.array([[1, 1, 0]], bool)).tolist() == [[1, 0, 2]]
    # default mask: -inf slots are padding
    assert rank_matrix(np.array([[1.0, 3.0, 3.0, NEG]])).tolist() == [[1, 2, 0, 3]]


def test_hits_and_subsets():
    assert per_instance_hits(SCORES, LABELS, MASK).tolist() == [False, False, True, False, True]
    assert subset_mask(LABELS, MASK, "answerable").tolist() == [True, True, True, False, True]
    assert subset_mask(LABELS, MASK, "contested").tolist() == [True, True, True, False, False]
    assert subset_mask(LABELS, MASK, "all").all()


def test_rank1_accuracy_exact():
    assert rank1_accuracy(SCORES, LABELS, MASK) == pytest.approx(2 / 4)
    assert rank1_accuracy(SCORES, LABELS, MASK, "contested") == pytest.approx(1 / 3)
    assert rank1_accuracy(SCORES, LABELS, MASK, "all") == pytest.approx(2 / 5)


def test_padded_slot_never_counts():
    # the padded slot has the top score and a stray positive label
    scores = np.array([[0.5, 0.1, 9.0]])
    labels = np.array([[0, 1, 1]])
    mask = np.array([[1, 1, 0]], dtype=bool)
    assert not per_instance_hits(scores, labels, mask)[0]
    assert per_instance_hits(scores, labels, None)[0]  # without the mask it would count
    assert reciprocal_ranks(scores, labels, mask)[0] == pytest.approx(1 / 2)
    assert recall_at_k(scores, labels, mask, 1) == 0.0  # one positive, not two
    lab = LABELS.copy()
    lab[2] = [0, 0, 1, 0]  # the only positive sits in a padded slot -> unanswerable
    assert not subset_mask(lab, MASK)[2]
    assert rank1_accuracy(SCORES, lab, MASK) == pytest.approx(1 / 3)


def test_mrr_exact():
    assert reciprocal_ranks(SCORES, LABELS, MASK).tolist() == pytest.approx([1 / 3, 1 / 2, 1, 0, 1])
    assert mrr(SCORES, LABELS, MASK) == pytest.approx((1 / 3 + 1 / 2 + 1 + 1) / 4)
    assert mrr(SCORES, LABELS, MASK, "all") == pytest.approx((1 / 3 + 1 / 2 + 1 + 1) / 5)


def test_recall_exact():
    expected = {1: (0 + 0 + 1 + 1 / 3) / 4, 2: (0 + 1 + 1 + 2 / 3) / 4, 3: (0.5 + 1 + 1 + 1) / 4, 4: 1.0}
    for k, v in expected.items():
        assert recall_at_k(SCORES, LABELS, MASK, k) == pytest.approx(v), k
    assert recall_at_k(SCORES, LABELS, MASK, 10) == pytest.approx(1.0)  # k capped at K


def test_ndcg_binary_and_graded_exact():
    vals = ndcg_values(SCORES, LABELS, MASK)
    assert vals.tolist() == pytest.approx([ROW0_NDCG, ROW1_NDCG, 1.0, 0.0, 1.0])
    assert ndcg_at_k(SCORES, LABELS, MASK) == pytest.approx((ROW0_NDCG + ROW1_NDCG + 2) / 4)
    # nDCG@1 equals rank-1 accuracy for binary labels
    assert ndcg_at_k(SCORES, LABELS, MASK, k=1) == pytest.approx(0.5)
    graded = ndcg_values(np.array([[0.9, 0.8, 0.7]]), np.array([[0, 3, 1]]))
    assert graded[0] == pytest.approx((3 / math.log2(3) + 1 / 2) / (3 + 1 / math.log2(3)))
    at2 = ndcg_values(np.array([[0.9, 0.8, 0.7]]), np.array([[0, 3, 1]]), k=2)
    assert at2[0] == pytest.approx((3 / math.log2(3)) / (3 + 1 / math.log2(3)))


def test_constant_scores_reproduce_retrieval_order():
    rng = np.random.default_rng(3)
    labels = (rng.random((50, 5)) < 0.3).astype(int)
    labels[:, 0] = rng.random(50) < 0.5
    flat = np.zeros((50, 5))
    hits = per_instance_hits(flat, labels)
    assert hits.tolist() == (labels[:, 0] == 1).tolist()


def test_evaluate_collects_everything():
    out = evaluate(SCORES, LABELS, MASK)
    assert (out["n"], out["answerable"], out["contested"]) == (5, 4, 3)
    assert out["accuracy"] == pytest.approx(0.5)
    assert out["accuracy_all"] == pytest.approx(0.4)
    assert out["contested_accuracy"] == pytest.approx(1 / 3)
    assert out["mrr"] == pytest.approx((1 / 3 + 1 / 2 + 2) / 4)
    assert out["ndcg"] == pytest.approx((ROW0_NDCG + ROW1_NDCG + 2) / 4)
    assert [k for k in out if k.startswith("recall@")] == ["recall@1", "recall@2", "recall@3", "recall@4"]
    assert out["recall@2"] == pytest.approx(2 / 3)


def test_empty_subset_is_nan():
    assert math.isnan(rank1_accuracy(np.zeros((2, 3)), np.zeros((2, 3))))


@pytest.mark.parametrize(
    "call",
    [
        lambda: rank1_accuracy(np.zeros((2, 3)), np.zeros((2, 4))),
        lambda: rank1_accuracy(np.zeros(3), np.zeros(3)),
        lambda: rank1_accuracy(np.array([[np.nan, 1.0]]), np.array([[1, 0]])),
        lambda: rank1_accuracy(np.zeros((1, 2)), np.zeros((1, 2)), subset="some"),
        lambda: recall_at_k(np.zeros((1, 2)), np.ones((1, 2)), k=0),
        lambda: rank1_accuracy(np.zeros((1, 2)), np.zeros((1, 2)), np.ones((1, 3), bool)),
    ],
)
def test_bad_input_raises(call):
    with pytest.raises(DataError):
        call()


def test_cross_check_against_trec_eval():
    """MRR, nDCG@K and recall@k agree with trec_eval (through ir-measures) per query."""
    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import RR, R, nDCG

    rng = np.random.default_rng(7)
    b, k = 80, 5
    scores = rng.normal(size=(b, k))  # continuous: no ties, so the tie rule never matters
    lengths = rng.integers(3, k + 1, size=b)
    mask = np.arange(k)[None, :] < lengths[:, None]
    labels = rng.integers(0, 3, size=(b, k)) * (rng.random((b, k)) < 0.5)
    labels[np.arange(b), rng.integers(0, 3, size=b)] = 1 + rng.integers(0, 2, size=b)  # answerable
    labels = np.where(mask, labels, 0)
    scores = np.where(mask, scores, NEG)

    qrels = {f"q{i}": {f"d{j}": int(labels[i, j]) for j in range(lengths[i])} for i in range(b)}
    run = {f"q{i}": {f"d{j}": float(scores[i, j]) for j in range(lengths[i])} for i in range(b)}
    measures = [RR, nDCG @ k, R @ 1, R @ 3]
    ref = {m: np.zeros(b) for m in measures}
    for row in ir_measures.iter_calc(measures, qrels, run):
        ref[row.measure][int(row.query_id[1:])] = row.value

    np.testing.assert_allclose(reciprocal_ranks(scores, labels, mask), ref[RR], atol=1e-9)
    np.testing.assert_allclose(ndcg_values(scores, labels, mask, k), ref[nDCG @ k], atol=1e-9)
    assert mrr(scores, labels, mask) == pytest.approx(ref[RR].mean())
    assert ndcg_at_k(scores, labels, mask, k) == pytest.approx(ref[nDCG @ k].mean())
    assert recall_at_k(scores, labels, mask, 1) == pytest.approx(ref[R @ 1].mean())
    assert recall_at_k(scores, labels, mask, 3) == pytest.approx(ref[R @ 3].mean())


def test_metrics_module_never_imports_torch():
    import subprocess
    import sys

    code = "import sys, chunksel.eval.metrics; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
