"""Ranking metrics over (B, K) score matrices (numpy only; never imports torch).

Every function takes

- ``scores``: (B, K) float, higher = better; candidates are in retrieval order, so a
  column index is a retrieval rank;
- ``labels``: (B, K) relevance; a candidate is *positive* when its label is >= 1
  (graded labels are allowed; nDCG uses them as gains);
- ``mask``: (B, K) bool, True at real candidates. ``None`` means every slot whose score
  is not ``-inf`` is real (NaN scores raise). Padded slots (mask False) never count: their label is taken
  as 0 and they always rank after every real candidate.

Ties in scores are broken by retrieval rank (the lower column first), never by
candidate id or chance, so a constant scorer reproduces retrieval order.

Instance subsets (the denominator of an average):

- ``"answerable"``: at least one positive among the real candidates;
- ``"contested"``: at least one positive and at least one negative real candidate
  (where a selector's choice can matter);
- ``"all"``: every instance (unanswerable ones count as misses / zeros).

Metric values are fractions in [0, 1]; reports print them as percentages. An empty
subset gives ``nan``. Definitions follow the usual IR conventions (trec_eval, ranx):
MRR (Voorhees, TREC-8 QA, 1999), nDCG (Järvelin & Kekäläinen, TOIS 2002) with linear
gains, and rank-1 chunk-selection accuracy as in the chunk-selection paper
(``papers/chunk-selection-mobile-rag.txt``, Table 1).
"""

from __future__ import annotations

from typing import Literal

import numpy as np

from chunksel.errors import DataError

Subset = Literal["answerable", "contested", "all"]
SUBSETS: tuple[str, ...] = ("answerable", "contested", "all")


# --------------------------------------------------------------------- inputs
def _prepare(
    scores: np.ndarray, labels: np.ndarray, mask: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Validate shapes; return float scores (-inf at padding), float labels (0 at
    padding) and the bool mask."""
    s = np.asarray(scores, dtype=np.float64)
    lab = np.asarray(labels, dtype=np.float64)
    if s.ndim != 2:
        raise DataError(f"scores must be a (B, K) array, got shape {s.shape}")
    if lab.shape != s.shape:
        raise DataError(f"labels shape {lab.shape} does not match scores shape {s.shape}")
    if mask is None:
        m = ~np.isneginf(s)
    else:
        m = np.asarray(mask, dtype=bool)
        if m.shape != s.shape:
            raise DataError(f"mask shape {m.shape} does not match scores shape {s.shape}")
    if np.isnan(s[m]).any():
        raise DataError("scores contain NaN at real candidates")
    if np.isnan(lab[m]).any():
        raise DataError("labels contain NaN at real candidates")
    s = np.where(m, s, -np.inf)
    lab = np.where(m, lab, 0.0)
    return s, lab, m


def rank_matrix(scores: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Column order of each row by score, best first.

    ``order[b, r]`` is the column (retrieval rank) of the candidate placed at position
    ``r`` (0-based). Keys, most significant first: real before padded, score descending,
    column ascending (the tie-break by retrieval rank).

    Args:
        scores: (B, K) scores, higher = better.
        mask: (B, K) bool, True at real candidates (default: ``scores > -inf``).

    Returns:
        (B, K) int64 array of column indices.
    """
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 2:
        raise DataError(f"scores must be a (B, K) array, got shape {s.shape}")
    m = ~np.isneginf(s) if mask is None else np.asarray(mask, dtype=bool)
    if m.shape != s.shape:
        raise DataError(f"mask shape {m.shape} does not match scores shape {s.shape}")
    if np.isnan(s[m]).any():
        raise DataError("scores contain NaN at real candidates")
    neg = np.where(m, -s, np.inf)
    cols = np.broadcast_to(np.arange(s.shape[1]), s.shape)
    # np.lexsort: the last key is the primary one; the sort is stable.
    return np.lexsort((cols, neg, ~m), axis=-1).astype(np.int64)


def subset_mask(
    labels: np.ndarray, mask: np.ndarray | None = None, subset: Subset = "answerable"
) -> np.ndarray:
    """(B,) bool: which instances belong to ``subset``.

    answerable_b = any_j (mask_bj and y_bj >= 1);
    contested_b  = answerable_b and any_j (mask_bj and y_bj < 1).

    Args:
        labels: (B, K) labels.
        mask: (B, K) real-candidate mask; ``None`` = every slot is real.
        subset: "answerable", "contested" or "all".
    """
    lab = np.asarray(labels, dtype=np.float64)
    if lab.ndim != 2:
        raise DataError(f"labels must be a (B, K) array, got shape {lab.shape}")
    m = np.ones(lab.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    if m.shape != lab.shape:
        raise DataError(f"mask shape {m.shape} does not match labels shape {lab.shape}")
    pos = m & (lab >= 1)
    neg = m & ~(lab >= 1)
    if subset == "answerable":
        return pos.any(axis=1)
    if subset == "contested":
        return pos.any(axis=1) & neg.any(axis=1)
    if subset == "all":
        return np.ones(lab.shape[0], dtype=bool)
    raise DataError(f"unknown subset {subset!r}; expected one of {', '.join(SUBSETS)}")


def _mean_over(values: np.ndarray, rows: np.ndarray) -> float:
    if not rows.any():
        return float("nan")
    return float(values[rows].mean())


def _check_k(k: int, width: int) -> int:
    if int(k) < 1:
        raise DataError(f"k must be >= 1, got {k}")
    return min(int(k), width)


# -------------------------------------------------------------------- metrics
def per_instance_hits(
    scores: np.ndarray, labels: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    """(B,) bool: whether the top-ranked real candidate is positive (rank-1 hit).

    hit_b = [ y_{b, pi_b(1)} >= 1 ], with pi_b the order of :func:`rank_matrix`.
    An instance with no real candidate is a miss.
    """
    s, lab, m = _prepare(scores, labels, mask)
    if s.shape[1] == 0:
        return np.zeros(s.shape[0], dtype=bool)
    top = rank_matrix(s, m)[:, 0]
    rows = np.arange(s.shape[0])
    return m[rows, top] & (lab[rows, top] >= 1)


def rank1_accuracy(
    scores: np.ndarray,
    labels: np.ndarray,
    mask: np.ndarray | None = None,
    subset: Subset = "answerable",
) -> float:
    """Rank-1 chunk-selection accuracy.

    Acc = (1 / |S|) * sum_{b in S} hit_b, with S the instances of ``subset`` and hit_b
    from :func:`per_instance_hits` (the paper's Table 1 metric, over answerable
    instances by default).
    """
    hits = per_instance_hits(scores, labels, mask)
    rows = subset_mask(labels, mask if mask is not None else _default_mask(scores), subset)
    return _mean_over(hits.astype(np.float64), rows)


def reciprocal_ranks(
    scores: np.ndarray, labels: np.ndarray, mask: np.ndarray | None = None
) -> np.ndarray:
    """(B,) 1 / (1-based position of the first positive), 0 when there is none."""
    s, lab, m = _prepare(scores, labels, mask)
    if s.shape[1] == 0:
        return np.zeros(s.shape[0])
    order = rank_matrix(s, m)
    ranked_pos = np.take_along_axis(lab >= 1, order, axis=1)
    first = ranked_pos.argmax(axis=1)
    return np.where(ranked_pos.any(axis=1), 1.0 / (first + 1.0), 0.0)


def mrr(
    scores: np.ndarray,
    labels: np.ndarray,
    mask: np.ndarray | None = None,
    subset: Subset = "answerable",
) -> float:
    """Mean reciprocal rank: MRR = (1 / |S|) * sum_{b in S} 1 / rank_b, with rank_b the
    1-based position of the first positive candidate of instance b (0 if none)."""
    rr = reciprocal_ranks(scores, labels, mask)
    rows = subset_mask(labels, mask if mask is not None else _default_mask(scores), subset)
    return _mean_over(rr, rows)


def ndcg_values(
    scores: np.ndarray,
    labels: np.ndarray,
    mask: np.ndarray | None = None,
    k: int | None = None,
) -> np.ndarray:
    """(B,) nDCG@k per instance with linear gains (trec_eval / ranx ``ndcg``).

    DCG@k = sum_{r=1..k} g_{pi(r)} / log2(r + 1), with g the (graded, >= 0) label;
    IDCG@k is the DCG@k of the labels sorted in decreasing order;
    nDCG@k = DCG@k / IDCG@k, and 0 where IDCG@k = 0. ``k=None`` means K.
    """
    s, lab, m = _prepare(scores, labels, mask)
    width = s.shape[1]
    if width == 0:
        return np.zeros(s.shape[0])
    k = width if k is None else _check_k(k, width)
    gains = np.clip(lab, 0.0, None)
    order = rank_matrix(s, m)[:, :k]
    discount = 1.0 / np.log2(np.arange(2, k + 2))
    dcg = (np.take_along_axis(gains, order, axis=1) * discount).sum(axis=1)
    ideal = -np.sort(-gains, axis=1)[:, :k]
    idcg = (ideal * discount).sum(axis=1)
    out = np.zeros(s.shape[0])
    ok = idcg > 0
    out[ok] = dcg[ok] / idcg[ok]
    return out


def ndcg_at_k(
    scores: np.ndarray,
    labels: np.ndarray,
    mask: np.ndarray | None = None,
    k: int | None = None,
    subset: Subset = "answerable",
) -> float:
    """Mean nDCG@k over ``subset`` (see :func:`ndcg_values`; ``k=None`` = K)."""
    vals = ndcg_values(scores, labels, mask, k)
    rows = subset_mask(labels, mask if mask is not None else _default_mask(scores), subset)
    return _mean_over(vals, rows)


def recall_at_k(
    scores: np.ndarray,
    labels: np.ndarray,
    mask: np.ndarray | None = None,
    k: int = 1,
    subset: Subset = "answerable",
) -> float:
    """Recall@k: R@k = (1 / |S|) * sum_{b in S} |top-k_b ∩ P_b| / |P_b|, with P_b the
    positive real candidates of b (instances without positives contribute 0 under
    ``subset="all"``)."""
    s, lab, m = _prepare(scores, labels, mask)
    if s.shape[1] == 0:
        return float("nan")
    k = _check_k(k, s.shape[1])
    pos = lab >= 1
    order = rank_matrix(s, m)[:, :k]
    found = np.take_along_axis(pos, order, axis=1).sum(axis=1)
    total = pos.sum(axis=1)
    rec = np.where(total > 0, found / np.maximum(total, 1), 0.0)
    return _mean_over(rec, subset_mask(lab, m, subset))


def evaluate(
    scores: np.ndarray, labels: np.ndarray, mask: np.ndarray | None = None
) -> dict[str, float | int]:
    """Every metric at once.

    Returns a dict with the counts ``n``, ``answerable``, ``contested`` and the metrics
    (fractions): ``accuracy`` (rank-1, answerable), ``accuracy_all`` (rank-1, every
    instance), ``contested_accuracy``, ``mrr``, ``ndcg`` (nDCG@K), ``ndcg@1``,
    ``recall@1`` .. ``recall@K`` — all averaged over answerable instances except where
    the name says otherwise.
    """
    s, lab, m = _prepare(scores, labels, mask)
    width = s.shape[1]
    ans = subset_mask(lab, m, "answerable")
    con = subset_mask(lab, m, "contested")
    out: dict[str, float | int] = {
        "n": int(s.shape[0]),
        "answerable": int(ans.sum()),
        "contested": int(con.sum()),
        "accuracy": rank1_accuracy(s, lab, m, "answerable"),
        "accuracy_all": rank1_accuracy(s, lab, m, "all"),
        "contested_accuracy": rank1_accuracy(s, lab, m, "contested"),
        "mrr": mrr(s, lab, m, "answerable"),
        "ndcg": ndcg_at_k(s, lab, m, None, "answerable"),
    }
    if width:
        out["ndcg@1"] = ndcg_at_k(s, lab, m, 1, "answerable")
    for k in range(1, width + 1):
        out[f"recall@{k}"] = recall_at_k(s, lab, m, k, "answerable")
    return out


def _default_mask(scores: np.ndarray) -> np.ndarray:
    return ~np.isneginf(np.asarray(scores, dtype=np.float64))
