"""Metrics of calibrated evidence probabilities and of abstention (numpy only).

A selector with a calibrator gives each chunk a probability P(evidence) and each
retrieved set a probability P(some chunk holds the evidence); these functions measure
how good those numbers are:

- :func:`auroc`: how well the set-level probability separates answerable sets from the
  rest (ties count one half, as the Mann-Whitney statistic does).
- :func:`ece`: expected calibration error over equal-mass bins (15 by default).
- :func:`brier`: mean squared error of the probabilities.
- :func:`abstention_at_coverage`: the share of unanswerable sets abstained on at the
  threshold that keeps a given share (80%) of answerable sets.
- :func:`risk_coverage`: selective rank-1 accuracy against coverage, answering the most
  confident sets first.
- :func:`auto_k_summary`: chunks kept per set against evidence recall for a rule that
  keeps a variable number of chunks (k="auto", a threshold) or a fixed k.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def _pair(y_true: Sequence[float], prob: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(y_true, dtype=np.float64).reshape(-1)
    p = np.asarray(prob, dtype=np.float64).reshape(-1)
    if y.shape != p.shape:
        raise ValueError(f"{y.size} labels but {p.size} probabilities")
    if not np.isfinite(p).all():
        raise ValueError("probabilities must be finite")
    if not np.isin(y, (0.0, 1.0)).all():
        raise ValueError("labels must be 0 or 1")
    return y, p


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    xs = x[order]
    ranks = np.empty(len(x), dtype=np.float64)
    starts = np.r_[0, np.flatnonzero(np.diff(xs)) + 1]
    ends = np.r_[starts[1:], len(x)]
    for s, e in zip(starts, ends):
        ranks[order[s:e]] = (s + e + 1) / 2.0
    return ranks


def auroc(y_true: Sequence[float], score: Sequence[float]) -> float:
    """Area under the ROC curve of ``score`` for the positives of ``y_true``.

    Returns NaN when only one class is present.
    """
    y, s = _pair(y_true, score)
    n_pos = int(y.sum())
    n_neg = len(y) - n_pos
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    ranks = _average_ranks(s)
    return float((ranks[y == 1].sum() - n_pos * (n_pos + 1) / 2.0) / (n_pos * n_neg))


def brier(y_true: Sequence[float], prob: Sequence[float]) -> float:
    """Mean squared difference between the probabilities and the 0/1 outcomes."""
    y, p = _pair(y_true, prob)
    return float(np.mean((p - y) ** 2)) if len(y) else float("nan")


def equal_mass_bins(prob: Sequence[float], n_bins: int = 15) -> list[np.ndarray]:
    """Indices of ``prob`` in ``n_bins`` bins of (near) equal count, lowest first.

    The probabilities are sorted stably and cut into consecutive runs whose sizes differ
    by at most one (``numpy.array_split``); fewer values than bins give one value a bin.
    """
    p = np.asarray(prob, dtype=np.float64).reshape(-1)
    order = np.argsort(p, kind="mergesort")
    return [b for b in np.array_split(order, min(n_bins, len(p))) if len(b)]


def ece(y_true: Sequence[float], prob: Sequence[float], n_bins: int = 15) -> float:
    """Expected calibration error over ``n_bins`` equal-mass bins.

    ``sum_b (n_b / n) * |mean(y in b) - mean(p in b)|``.
    """
    y, p = _pair(y_true, prob)
    if not len(y):
        return float("nan")
    return float(sum(len(b) / len(y) * abs(y[b].mean() - p[b].mean()) for b in equal_mass_bins(p, n_bins)))


def reliability(y_true: Sequence[float], prob: Sequence[float], n_bins: int = 15) -> dict[str, list[float]]:
    """Per equal-mass bin: mean probability, observed frequency and count (a reliability diagram)."""
    y, p = _pair(y_true, prob)
    bins = equal_mass_bins(p, n_bins)
    return {
        "mean_probability": [float(p[b].mean()) for b in bins],
        "frequency": [float(y[b].mean()) for b in bins],
        "count": [int(len(b)) for b in bins],
    }


def abstention_at_coverage(
    answerable: Sequence[bool], p_set: Sequence[float], keep: float = 0.8
) -> dict[str, float]:
    """Abstention on unanswerable sets at the threshold keeping ``keep`` of answerable ones.

    The threshold is the largest value ``t`` with at least ``keep`` of the answerable
    sets at ``p >= t``; a set is answered when ``p >= t``.

    Returns:
        ``{"threshold", "answerable_kept", "unanswerable_abstained"}`` (NaN rates when a
        class is absent).
    """
    y, p = _pair(answerable, p_set)
    if not 0.0 < keep <= 1.0:
        raise ValueError(f"keep must be in (0, 1], got {keep}")
    pos = np.sort(p[y == 1])[::-1]
    neg = p[y == 0]
    if not len(pos):
        return {"threshold": float("nan"), "answerable_kept": float("nan"), "unanswerable_abstained": float("nan")}
    t = float(pos[int(np.ceil(keep * len(pos))) - 1])
    return {
        "threshold": t,
        "answerable_kept": float(np.mean(pos >= t)),
        "unanswerable_abstained": float(np.mean(neg < t)) if len(neg) else float("nan"),
    }


def risk_coverage(p_set: Sequence[float], correct: Sequence[bool]) -> dict[str, list[float] | float]:
    """Selective accuracy against coverage, answering the most confident sets first.

    Args:
        p_set: one confidence per set (the set-level probability).
        correct: whether the set's top-ranked chunk holds the evidence (False for an
            unanswerable set).

    Returns:
        ``{"coverage": [...], "accuracy": [...], "aurc": float}``: after answering the
        ``n`` most confident sets (ties by input order), coverage ``n / N`` and the share
        of them answered correctly; ``aurc`` is the mean selective risk (1 - accuracy)
        over the N coverage points.
    """
    c, p = _pair(correct, p_set)
    if not len(p):
        return {"coverage": [], "accuracy": [], "aurc": float("nan")}
    order = np.argsort(-p, kind="mergesort")
    hits = np.cumsum(c[order])
    n = np.arange(1, len(p) + 1)
    acc = hits / n
    return {"coverage": (n / len(p)).tolist(), "accuracy": acc.tolist(), "aurc": float(np.mean(1.0 - acc))}


def auto_k_summary(kept: Sequence[Sequence[int]], labels: Sequence[Sequence[int]]) -> dict[str, float]:
    """Chunks kept against evidence recall for one selection per set.

    Args:
        kept: per set, the indices of the chunks kept (possibly none).
        labels: per set, the 0/1 evidence labels of its chunks.

    Returns:
        ``mean_kept`` (chunks per set over all sets), ``mean_kept_answerable`` and
        ``mean_kept_unanswerable``, ``evidence_recall`` (share of answerable sets with a
        positive chunk kept), ``empty_unanswerable`` (share of unanswerable sets given no
        chunk) and ``empty_answerable``.
    """
    if len(kept) != len(labels):
        raise ValueError(f"{len(kept)} selections but {len(labels)} label rows")
    n_kept = np.array([len(k) for k in kept], dtype=np.float64)
    ans = np.array([bool(np.any(lab)) for lab in labels])
    hit = np.array([any(lab[j] for j in k) for k, lab in zip(kept, labels)])

    def mean(x: np.ndarray) -> float:
        return float(x.mean()) if len(x) else float("nan")

    return {
        "mean_kept": mean(n_kept),
        "mean_kept_answerable": mean(n_kept[ans]),
        "mean_kept_unanswerable": mean(n_kept[~ans]),
        "evidence_recall": mean(hit[ans].astype(float)),
        "empty_answerable": mean((n_kept[ans] == 0).astype(float)),
        "empty_unanswerable": mean((n_kept[~ans] == 0).astype(float)),
    }


def _top_order(scores: np.ndarray) -> np.ndarray:
    """(B, K) column order by score desc, ties by column (retrieval rank); -inf last."""
    cols = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    return np.lexsort((cols, -scores), axis=-1)


def abstention_summary(
    scores: np.ndarray,
    labels: np.ndarray,
    chunk_p: np.ndarray,
    set_p: np.ndarray,
    auto_threshold: float,
    keep: float = 0.8,
    n_bins: int = 15,
    curve_points: int = 101,
    raw_scores: np.ndarray | None = None,
) -> dict[str, object]:
    """Every abstention figure of one selector on one test split (answerable and not).

    Args:
        scores: (B, K) the selector's scores, non-finite at padded slots.
        labels: (B, K) 0/1 evidence labels.
        chunk_p: (B, K) calibrated P(evidence) (NaN at padded slots).
        set_p: (B,) calibrated P(some chunk holds the evidence).
        auto_threshold: the ``k="auto"`` operating point (a chunk probability).
        keep: the share of answerable sets kept by the abstention threshold.
        raw_scores: (B, K) the scores the calibrator read, when not ``scores`` (retrieval
            order's calibrator reads the retrieval scores); their top per set gives
            ``auroc_top_score``.

    Returns:
        ``n_sets``, ``answerable_rate``; ``auroc`` (set probability, answerable vs not) and
        ``auroc_top_score`` (the raw top score, uncalibrated); ``chunk_ece``,
        ``chunk_brier``, ``set_ece``, ``set_brier``; ``abstention`` (at ``keep``);
        ``rank1_answerable`` and ``aurc``; ``risk_coverage`` (``curve_points`` points);
        ``reliability`` (chunk level); ``auto``, ``k1``, ``k2`` (:func:`auto_k_summary`).
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels).astype(np.int8)
    chunk_p = np.asarray(chunk_p, dtype=np.float64)
    set_p = np.asarray(set_p, dtype=np.float64)
    real = np.isfinite(scores)
    labels = np.where(real, labels, 0)
    answerable = labels.any(axis=1)
    order = _top_order(np.where(real, scores, -np.inf))
    n_real = real.sum(axis=1)
    top = order[:, 0]
    correct = labels[np.arange(len(top)), top].astype(bool)
    y, p = labels[real], chunk_p[real]
    rc = risk_coverage(set_p, correct)
    idx = np.unique(np.linspace(0, len(set_p) - 1, min(curve_points, len(set_p))).round().astype(int))

    def fixed(k: int) -> list[list[int]]:
        return [[int(j) for j in order[b, : min(k, n_real[b])]] for b in range(len(order))]

    auto = [[int(j) for j in order[b, : n_real[b]] if chunk_p[b, j] >= auto_threshold] for b in range(len(order))]
    rows = [list(r) for r in labels]
    raw = scores if raw_scores is None else np.asarray(raw_scores, dtype=np.float64)
    top_score = np.array([row[m].max() for row, m in zip(raw, real)])
    return {
        "n_sets": int(len(scores)),
        "answerable_rate": float(answerable.mean()),
        "auroc": auroc(answerable, set_p),
        "auroc_top_score": auroc(answerable, top_score),
        "chunk_ece": ece(y, p, n_bins),
        "chunk_brier": brier(y, p),
        "set_ece": ece(answerable, set_p, n_bins),
        "set_brier": brier(answerable, set_p),
        "abstention": abstention_at_coverage(answerable, set_p, keep),
        "rank1_answerable": float(correct[answerable].mean()) if answerable.any() else float("nan"),
        "aurc": rc["aurc"],
        "risk_coverage": {"coverage": [rc["coverage"][i] for i in idx], "accuracy": [rc["accuracy"][i] for i in idx]},
        "reliability": reliability(y, p, n_bins),
        "auto_threshold": float(auto_threshold),
        "auto": auto_k_summary(auto, rows),
        "k1": auto_k_summary(fixed(1), rows),
        "k2": auto_k_summary(fixed(2), rows),
    }
