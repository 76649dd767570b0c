"""The calibrator's parts (:mod:`chunksel.selectors.calibration`): the per-chunk maps and
the per-set models, each fitted on validation scores and stored as thresholds and
coefficients, so predicting needs numpy only.

- :class:`ScoreMap`: P(evidence) of a chunk, ``isotonic`` or ``platt`` over its score
  alone, ``set_rank`` (the set's probability times a per-rank rate) or ``chunk_logistic``
  (a logistic model of the chunk's place in its set, :func:`chunk_features`);
- :class:`SetModel`: P(some chunk holds the evidence) of a set, ``logistic`` over
  :func:`set_features` (``logistic+retrieval`` with the retrieval scores), ``top``, or the
  ``max`` / ``noisy_or`` of the chunk probabilities.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunksel.errors import DataError

#: chunk maps that read the whole set (its other scores and the set model), not one score
WHOLE_SET = ("set_rank", "chunk_logistic")


def sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(z, -500, 500)))


@dataclass
class ScoreMap:
    """A monotone map from a score to a probability (isotonic or Platt)."""

    method: str
    x: list[float] = field(default_factory=list)  # isotonic thresholds
    y: list[float] = field(default_factory=list)
    coef: float = 0.0  # Platt: sigmoid(coef * (s - mean) / scale + intercept)
    intercept: float = 0.0
    mean: float = 0.0
    scale: float = 1.0
    # chunk_logistic: sigmoid(coefs . (chunk_features - means) / scales + intercept)
    coefs: list[float] = field(default_factory=list)
    means: list[float] = field(default_factory=list)
    scales: list[float] = field(default_factory=list)

    def __call__(self, s: np.ndarray) -> np.ndarray:
        s = np.asarray(s, dtype=np.float64)
        if self.method in WHOLE_SET:
            raise ValueError(f"a {self.method} map needs the whole set: use Calibrator.chunk_probabilities")
        if self.method == "isotonic":
            return np.interp(s, self.x, self.y)
        return sigmoid(self.coef * (s - self.mean) / self.scale + self.intercept)

    def to_dict(self) -> dict[str, Any]:
        out = {"method": self.method, "x": self.x, "y": self.y, "coef": self.coef,
               "intercept": self.intercept, "mean": self.mean, "scale": self.scale}
        if self.method == "chunk_logistic":
            out.update(coefs=self.coefs, means=self.means, scales=self.scales)
        return out

    def of_sets(self, scores: np.ndarray, set_p: np.ndarray) -> np.ndarray:
        """(B, K) a ``chunk_logistic`` map's probabilities (NaN at padding), ``set_p``
        the set model's P(some chunk holds the evidence) per set."""
        f, real = chunk_features(scores, set_p)
        z = (f[real] - np.asarray(self.means)) / np.asarray(self.scales)
        out = np.full(scores.shape, np.nan)
        out[real] = sigmoid(z @ np.asarray(self.coefs) + self.intercept)
        return out


def fit_score_map(s: np.ndarray, y: np.ndarray, method: str) -> ScoreMap:
    """Fit an ``"isotonic"`` or ``"platt"`` map of scores ``s`` to 0/1 outcomes ``y``."""
    s = np.asarray(s, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if method == "isotonic":
        from sklearn.isotonic import IsotonicRegression

        iso = IsotonicRegression(y_min=0.0, y_max=1.0, out_of_bounds="clip").fit(s, y)
        return ScoreMap("isotonic", x=[float(v) for v in iso.X_thresholds_], y=[float(v) for v in iso.y_thresholds_])
    if method == "platt":
        from sklearn.linear_model import LogisticRegression

        mean, scale = float(s.mean()), float(s.std()) or 1.0
        lr = LogisticRegression(C=1e4).fit(((s - mean) / scale)[:, None], y)
        return ScoreMap("platt", coef=float(lr.coef_[0, 0]), intercept=float(lr.intercept_[0]), mean=mean, scale=scale)
    raise ValueError(f"unknown calibration method {method!r}")


def score_ranks(scores: np.ndarray) -> np.ndarray:
    """(B, K) each slot's 0-based rank in its set by score (ties: column order)."""
    order = np.argsort(-np.where(np.isfinite(scores), scores, -np.inf), axis=1, kind="stable")
    ranks = np.empty_like(order)
    np.put_along_axis(ranks, order, np.arange(scores.shape[1])[None, :].repeat(len(scores), 0), axis=1)
    return ranks


def rank_rates(scores: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """(K,) P(evidence at rank r | the set is answerable), smoothed towards the mean rate
    (one pseudo-set) and made non-increasing in r."""
    real = np.isfinite(scores)
    ans = (labels.astype(bool) & real).any(axis=1)
    ranks = score_ranks(scores)
    prior = float(labels[ans][real[ans]].mean()) if ans.any() else 0.0
    q = np.empty(scores.shape[1])
    for r in range(scores.shape[1]):
        at = (ranks == r) & real & ans[:, None]
        q[r] = (labels[at].sum() + prior) / (at.sum() + 1.0)
    return np.minimum.accumulate(q)


def chunk_features(scores: np.ndarray, set_p: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(B, K, 5) per chunk: its score, its gaps to the set's top and mean score, its
    reciprocal rank in the set, and the set's log-odds ``set_p``; and the (B, K) mask of
    real (finite-score) chunks."""
    real = np.isfinite(scores)
    s = np.where(real, scores, np.nan)
    top = np.nanmax(np.where(real, scores, -np.inf), axis=1, keepdims=True)
    mean = np.nansum(np.where(real, s, 0.0), axis=1, keepdims=True) / np.maximum(real.sum(axis=1, keepdims=True), 1)
    q = np.clip(np.asarray(set_p, dtype=np.float64), 1e-6, 1 - 1e-6)
    logit = np.broadcast_to(np.log(q / (1 - q))[:, None], scores.shape)
    return np.stack([s, s - top, s - mean, 1.0 / (1.0 + score_ranks(scores)), logit], axis=2), real


def fit_chunk_logistic(scores: np.ndarray, labels: np.ndarray, set_p: np.ndarray) -> ScoreMap:
    """A ``chunk_logistic`` map fitted on sets ``(B, K)`` with their set probabilities."""
    from sklearn.linear_model import LogisticRegression

    f, real = chunk_features(scores, set_p)
    x, y = f[real], labels[real]
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    lr = LogisticRegression(C=1.0, max_iter=1000).fit((x - mean) / scale, y)
    return ScoreMap("chunk_logistic", coefs=[float(v) for v in lr.coef_[0]], intercept=float(lr.intercept_[0]),
                    means=[float(v) for v in mean], scales=[float(v) for v in scale])


def set_features(scores: np.ndarray, retrieval: np.ndarray | None = None) -> np.ndarray:
    """(B, 4) per set: top score, second score (the top again if alone), gap, mean score;
    with ``retrieval`` (the candidates' retrieval scores), (B, 6): also the top retrieval
    score and its gap to the second."""
    out = np.zeros((scores.shape[0], 4 if retrieval is None else 6))
    for b, row in enumerate(scores):
        r = np.sort(row[np.isfinite(row)])[::-1]
        second = r[1] if len(r) > 1 else r[0]
        out[b, :4] = (r[0], second, r[0] - second, r.mean())
        if retrieval is not None:
            c = np.sort(retrieval[b][np.isfinite(retrieval[b])])[::-1]
            out[b, 4:] = (c[0], c[0] - (c[1] if len(c) > 1 else c[0]))
    return out


@dataclass
class SetModel:
    """P(some chunk holds the evidence) of a set: ``"logistic"``, ``"top"``, ``"max"`` or
    ``"noisy_or"`` (:func:`fit_set_model`)."""

    method: str
    coef: list[float] = field(default_factory=list)
    intercept: float = 0.0
    mean: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    retrieval: bool = False  # reads the candidates' retrieval scores too

    def __call__(self, scores: np.ndarray, chunk_p: np.ndarray, retrieval: np.ndarray | None = None) -> np.ndarray:
        if self.method == "max":
            return np.nanmax(chunk_p, axis=1)
        if self.method == "noisy_or":
            return 1.0 - np.prod(np.where(np.isnan(chunk_p), 1.0, 1.0 - chunk_p), axis=1)
        if self.retrieval and retrieval is None:
            raise DataError("this set-level calibrator reads the chunks' retrieval scores: none were given")
        x = set_features(scores, retrieval if self.retrieval else None)
        z = (x - np.asarray(self.mean)) / np.asarray(self.scale)
        return sigmoid(z @ np.asarray(self.coef) + self.intercept)

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, "coef": self.coef, "intercept": self.intercept,
                "mean": self.mean, "scale": self.scale, "retrieval": self.retrieval}


def fit_set_model(
    scores: np.ndarray, answerable: np.ndarray, method: str, retrieval: np.ndarray | None = None
) -> SetModel:
    """``"logistic"`` over the four :func:`set_features`, ``"logistic+retrieval"`` over
    the six (with the retrieval scores), ``"top"`` (Platt scaling of the top score alone:
    the same model with the other coefficients 0), or ``"max"`` / ``"noisy_or"`` of the
    chunk probabilities (nothing to fit)."""
    if method not in ("logistic", "logistic+retrieval", "top"):
        return SetModel(method)
    from sklearn.linear_model import LogisticRegression

    with_retrieval = method == "logistic+retrieval"
    x = set_features(scores, retrieval if with_retrieval else None)
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale == 0] = 1.0
    z = (x - mean) / scale
    cols = 1 if method == "top" else z.shape[1]
    lr = LogisticRegression(C=1.0).fit(z[:, :cols], answerable)
    coef = [float(v) for v in lr.coef_[0]] + [0.0] * (z.shape[1] - cols)
    return SetModel(method, coef=coef, intercept=float(lr.intercept_[0]),
                    mean=[float(v) for v in mean], scale=[float(v) for v in scale], retrieval=with_retrieval)
