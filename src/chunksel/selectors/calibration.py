"""Calibrated evidence probabilities for any selector, fitted on the validation split only.

A :class:`Calibrator` turns a selector's scores into two probabilities, leaving the scores
themselves (and so every ranking) untouched:

- per chunk, P(the chunk holds the evidence): a monotone map of the chunk's score,
  isotonic regression or Platt scaling (scikit-learn), the rank-aware
  P(set answerable) x P(evidence at the chunk's rank | answerable) (``set_rank``: the
  set model below times per-rank rates), or a logistic model of the chunk's own place in
  its set (``chunk_logistic``: its score, its gaps to the set's top and mean score, its
  reciprocal rank, and the set model's log-odds), whichever has the lowest Brier score out
  of fold on the validation sets (5-fold, grouped by set). Under ``set_rank`` every chunk
  at a rank gets the same share of its set's probability, so a threshold acts as a rank
  cutoff; ``chunk_logistic`` lets a chunk far below its set's top score fall on its own;
- per set, P(some chunk of the set holds the evidence), calibrated as its own quantity:
  a logistic model over the set's sorted scores (top score, second score, their gap, the
  mean; plus, when the candidates carry retrieval scores, the top retrieval score and its
  gap), compared out of fold with Platt scaling of the top score alone and with the
  maximum and the noisy-or of the chunk probabilities; the lowest Brier score is kept
  and the choice is recorded (a set model reading retrieval scores makes
  :class:`~chunksel.pipeline.chunk_selector.ChunkSelector` compute them).

The default operating point of ``k="auto"`` is chosen on the same out-of-fold
probabilities: the highest chunk-probability threshold whose evidence recall reaches
that of a fixed ``k=2``, capped so that it keeps no more chunks per set than k=2 does
(:func:`_auto_threshold`).

The retrieval-order selector scores ``-rank``; its calibrator reads the candidates'
retrieval scores instead (``source="retrieval_score"``: the retriever's cosine).

The maps and set models themselves live in :mod:`chunksel.selectors.calibration_maps`;
this module chooses among them out of fold and keeps the record.

Fitting refuses any instance of the test split (:class:`~chunksel.errors.DataError`).
Predicting needs numpy only (the maps are stored as thresholds and coefficients), so a
saved and reloaded calibrator gives bit-identical probabilities. The record is saved as
``calibration.json`` beside the selector (checksummed like its other state files).
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError, NotFittedError
from chunksel.selectors.calibration_maps import (
    ScoreMap,
    SetModel,
    fit_chunk_logistic,
    fit_score_map,
    fit_set_model,
    rank_rates,
    score_ranks,
)
from chunksel.types import Instance, label_matrix

CALIBRATION_FILE = "calibration.json"
CALIBRATION_VERSION = 1
N_FOLDS = 5


@dataclass
class Calibrator:
    """The fitted chunk map, set model and ``k="auto"`` operating point of one selector."""

    chunk: ScoreMap
    set: SetModel
    auto_threshold: float
    source: str = "score"
    label_source: str = ""
    info: dict[str, Any] = field(default_factory=dict)

    def chunk_probabilities(self, scores: np.ndarray, retrieval: np.ndarray | None = None) -> np.ndarray:
        """(B, K) P(evidence), NaN at padded (non-finite) slots (``retrieval``: the
        candidates' retrieval scores, when the set model reads them)."""
        scores = np.asarray(scores, dtype=np.float64)
        real = np.isfinite(scores)
        if self.chunk.method == "set_rank":  # P(set answerable) x P(evidence at this rank | answerable)
            q = np.asarray(self.chunk.y)
            ranks = np.minimum(score_ranks(scores), len(q) - 1)
            p = self.set(scores, None, retrieval)[:, None] * q[ranks]
        elif self.chunk.method == "chunk_logistic":
            p = self.chunk.of_sets(scores, self.set(scores, None, retrieval))
        else:
            p = self.chunk(np.where(real, scores, 0.0))
        return np.where(real, np.clip(p, 0.0, 1.0), np.nan)

    @property
    def reads_retrieval(self) -> bool:
        """Whether it needs the candidates' retrieval scores."""
        return self.source == "retrieval_score" or self.set.retrieval

    def set_probabilities(
        self, scores: np.ndarray, chunk_p: np.ndarray | None = None, retrieval: np.ndarray | None = None
    ) -> np.ndarray:
        """(B,) P(some chunk holds the evidence) (``retrieval``: the candidates' retrieval
        scores, when the set model reads them)."""
        scores = np.asarray(scores, dtype=np.float64)
        if chunk_p is None and self.set.method in ("max", "noisy_or"):
            chunk_p = self.chunk_probabilities(scores, retrieval)
        return np.clip(self.set(scores, chunk_p, retrieval), 0.0, 1.0)

    def to_dict(self) -> dict[str, Any]:
        return {"version": CALIBRATION_VERSION, "source": self.source, "label_source": self.label_source,
                "split": "val", "chunk": self.chunk.to_dict(), "set": self.set.to_dict(),
                "auto_threshold": self.auto_threshold, "info": self.info}

    @classmethod
    def from_dict(cls, d: dict[str, Any], where: str = CALIBRATION_FILE) -> Calibrator:
        try:
            if d.get("version") != CALIBRATION_VERSION:
                raise DataError(f"{where}: calibration version {d.get('version')!r} is not supported")
            return cls(chunk=ScoreMap(**d["chunk"]), set=SetModel(**d["set"]),
                       auto_threshold=float(d["auto_threshold"]), source=d.get("source", "score"),
                       label_source=d.get("label_source", ""), info=dict(d.get("info") or {}))
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"corrupt checkpoint {where}: malformed calibration ({err})") from None


# ------------------------------------------------------------------ fitting
def calibration_scores(selector: Any, batch: Sequence[Instance], features: Any = None) -> np.ndarray:
    """(B, K) the scores a selector's calibrator reads: its own, or the retrieval scores."""
    if getattr(selector, "calibration_source", "score") != "retrieval_score":
        return selector.score(batch, features)
    return retrieval_score_matrix(batch)


def retrieval_score_matrix(batch: Sequence[Instance]) -> np.ndarray:
    """(B, K) the candidates' retrieval scores, ``-inf`` at padded slots."""
    k = max((len(i.candidates) for i in batch), default=0)
    out = np.full((len(batch), k), -np.inf)
    for b, inst in enumerate(batch):
        s = np.array([c.score for c in inst.candidates], dtype=np.float64)
        if not np.isfinite(s).all():
            raise DataError(f"instance {inst.id!r}: candidates without retrieval scores (this calibrator reads them)")
        out[b, : len(s)] = s
    return out


def check_split(instances: Sequence[Instance]) -> None:
    """Raise unless no instance belongs to the test split (calibration sees validation only)."""
    bad = [i.id for i in instances if i.split == "test"]
    if bad:
        raise DataError(f"calibration must not see the test split: {len(bad)} test instances given "
                        f"(first {bad[0]!r}); fit the calibrator on the validation split")


def _folds(n: int, n_folds: int) -> np.ndarray:
    return np.arange(n) % max(2, min(n_folds, n))


def _brier(y: np.ndarray, p: np.ndarray) -> float:
    return float(np.mean((p - y) ** 2))


def _auto_threshold(chunk_p: np.ndarray, labels: np.ndarray, scores: np.ndarray) -> tuple[float, dict[str, float]]:
    """The ``k="auto"`` operating point on these (validation) sets, out of fold.

    The highest chunk-probability threshold whose evidence recall (answerable sets with a
    kept positive) reaches that of a fixed k=2, unless that keeps more chunks per set than
    k=2 does: then the threshold that keeps at most as many (k=2's budget, spent where the
    probabilities are highest).
    """
    real = np.isfinite(chunk_p)
    order = np.argsort(-np.where(np.isfinite(scores), scores, -np.inf), axis=1, kind="stable")
    top2 = np.zeros_like(real)
    np.put_along_axis(top2, order[:, :2], True, axis=1)
    top2 &= real
    ans = labels.any(axis=1)

    def recall(kept: np.ndarray) -> float:
        return float((kept & (labels > 0)).any(axis=1)[ans].mean()) if ans.any() else 1.0

    target, budget = recall(top2), float(top2.sum(axis=1).mean())
    cands = np.unique(chunk_p[real])[::-1]
    t_recall = next((float(t) for t in cands if recall(real & (chunk_p >= t)) >= target - 1e-12), float(cands[-1]))
    t_budget = next((float(t) for t in cands[::-1] if (real & (chunk_p >= t)).sum(axis=1).mean() <= budget + 1e-12),
                    float(cands[0]))
    t = max(t_recall, t_budget)
    kept = real & (chunk_p >= t)
    return t, {"k2_recall": target, "k2_mean_kept": budget, "auto_recall": recall(kept),
               "auto_mean_kept": float(kept.sum(axis=1).mean()), "capped_at_k2_budget": t_budget > t_recall}


def fit_calibrator(
    scores: np.ndarray, labels: np.ndarray, *, source: str = "score", label_source: str = "", seed: int = 0,
    retrieval: np.ndarray | None = None,
) -> Calibrator:
    """Fit a :class:`Calibrator` on validation scores ``(B, K)`` (``-inf`` padded) and labels
    (``retrieval``: the candidates' retrieval scores, offered to the set model).

    Raises:
        DataError: no positive or no negative chunk (nothing to calibrate against).
    """
    scores = np.asarray(scores, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.int8)
    real = np.isfinite(scores)
    y = labels[real].astype(np.float64)
    if y.min(initial=1) == y.max(initial=0):
        raise DataError("calibration needs validation chunks with and without evidence")
    perm = np.random.default_rng(seed).permutation(len(scores))
    fold_of = np.empty(len(scores), dtype=int)
    fold_of[perm] = _folds(len(scores), N_FOLDS)
    info: dict[str, Any] = {"n_sets": int(len(scores)), "n_chunks": int(real.sum()),
                            "answerable": float(labels.any(axis=1).mean())}
    ans = labels.any(axis=1).astype(np.float64)

    oof = {m: np.full(scores.shape, np.nan) for m in ("isotonic", "platt")}
    for f in np.unique(fold_of):
        tr, te = fold_of != f, fold_of == f
        y_tr = labels[tr][real[tr]]
        if y_tr.size == 0 or y_tr.min() == y_tr.max():  # empty, or one class: nothing to fit
            continue
        for m in oof:
            mp = fit_score_map(scores[tr][real[tr]], labels[tr][real[tr]], m)
            oof[m][te] = np.where(real[te], mp(np.where(real[te], scores[te], 0.0)), np.nan)
    ok = np.isfinite(oof["isotonic"]) & real
    briers = {m: _brier(labels[ok], oof[m][ok]) for m in oof}
    chunk_method = min(briers, key=briers.get)
    info["chunk_brier_oof"] = briers
    chunk_oof = np.where(real, oof[chunk_method], np.nan)

    methods = ["logistic", "top", "max", "noisy_or"] + (["logistic+retrieval"] if retrieval is not None else [])
    set_oof = {m: np.full(len(scores), np.nan) for m in methods}
    have = np.isfinite(chunk_oof).any(axis=1)
    for f in np.unique(fold_of):
        tr, te = (fold_of != f) & have, (fold_of == f) & have
        if not te.any() or not tr.any() or ans[tr].min() == ans[tr].max():
            continue
        for m in set_oof:
            rt = None if retrieval is None else (retrieval[tr], retrieval[te])
            set_oof[m][te] = fit_set_model(scores[tr], ans[tr], m, None if rt is None else rt[0])(
                scores[te], chunk_oof[te], None if rt is None else rt[1])
    okb = np.isfinite(set_oof["logistic"])
    set_briers = {m: _brier(ans[okb], set_oof[m][okb]) if okb.any() else float("inf") for m in set_oof}
    set_method = min(set_briers, key=set_briers.get)
    if ans.min() == ans.max():  # every validation set answerable (or none): nothing to learn per set
        set_method = "max"
    info["set_brier_oof"] = set_briers
    info["set_method_chosen_over"] = sorted(m for m in set_briers if m != set_method)

    # a rank-aware alternative: P(set answerable) x P(evidence at this rank | answerable)
    if set_method in ("logistic", "logistic+retrieval", "top"):
        ranks = score_ranks(scores)
        sr_oof = np.full(scores.shape, np.nan)
        for f in np.unique(fold_of):
            tr, te = fold_of != f, fold_of == f
            q = rank_rates(scores[tr], labels[tr])
            sr_oof[te] = set_oof[set_method][te][:, None] * q[ranks[te]]
        # and the chunk's own place in its set, beside the set's log-odds
        cl_oof = np.full(scores.shape, np.nan)
        for f in np.unique(fold_of):
            tr, te = (fold_of != f) & okb, (fold_of == f) & okb
            y_tr = labels[tr][real[tr]]
            if te.any() and y_tr.size and y_tr.min() != y_tr.max():
                cl_oof[te] = fit_chunk_logistic(scores[tr], labels[tr], set_oof[set_method][tr]).of_sets(
                    scores[te], set_oof[set_method][te])
        for name, cand in (("set_rank", sr_oof), ("chunk_logistic", cl_oof)):
            both = np.isfinite(cand) & np.isfinite(chunk_oof) & real
            info["chunk_brier_oof"][name] = _brier(labels[both], cand[both]) if both.any() else float("inf")
        # one comparison on the chunks every candidate scored out of fold
        every = np.isfinite(sr_oof) & np.isfinite(cl_oof) & np.isfinite(chunk_oof) & real
        if every.any():
            cands = {chunk_method: chunk_oof, "set_rank": sr_oof, "chunk_logistic": cl_oof}
            on_every = {m: _brier(labels[every], p[every]) for m, p in cands.items()}
            info["chunk_brier_oof_common"] = on_every
            best = min(on_every, key=on_every.get)
            if best != chunk_method:
                chunk_method, chunk_oof = best, np.where(real, cands[best], np.nan)
        else:  # no fold fitted the chunk logistic: set_rank against the score map alone
            both = np.isfinite(sr_oof) & np.isfinite(chunk_oof) & real
            if both.any() and info["chunk_brier_oof"]["set_rank"] < _brier(labels[both], chunk_oof[both]):
                chunk_method, chunk_oof = "set_rank", np.where(real, sr_oof, np.nan)
    set_model = fit_set_model(scores, ans, set_method, retrieval)
    if chunk_method == "set_rank":
        chunk = ScoreMap("set_rank", y=[float(v) for v in rank_rates(scores, labels)])
    elif chunk_method == "chunk_logistic":
        chunk = fit_chunk_logistic(scores, labels, set_model(scores, None, retrieval))
    else:
        chunk = fit_score_map(scores[real], labels[real], chunk_method)
    pick = np.isfinite(chunk_oof).any(axis=1)
    if pick.any():
        t, op = _auto_threshold(chunk_oof[pick], labels[pick], scores[pick])
    else:  # too few sets for any fold to hold both classes: the operating point in sample
        t, op = _auto_threshold(np.where(real, chunk(np.where(real, scores, 0.0)), np.nan), labels, scores)
        op["in_sample"] = True
    info["auto_operating_point"] = op
    return Calibrator(chunk=chunk, set=set_model, auto_threshold=t, source=source,
                      label_source=label_source, info=info)


def calibrate_selector(selector: Any, val: Sequence[Instance], features: Any = None) -> Calibrator:
    """Fit ``selector``'s calibrator on validation instances ``val`` (never the test split)."""
    val = list(val)
    check_split(val)
    if not val:
        raise DataError("calibration needs validation instances")
    spec = getattr(selector, "label", None) or None
    scores = calibration_scores(selector, val, features)
    labels = label_matrix(val, spec, scores.shape[1])
    label_source = spec or ",".join(sorted({i.label_source for i in val}))
    source = getattr(selector, "calibration_source", "score")
    have_scores = all(np.isfinite(c.score) for i in val for c in i.candidates)
    return fit_calibrator(scores, labels, source=source, label_source=label_source,
                          seed=int(getattr(selector, "seed", 0) or 0),
                          retrieval=retrieval_score_matrix(val) if source == "score" and have_scores else None)


# ------------------------------------------------------- the selector's hooks
def calibrate_after_fit(selector: Any, val: Sequence[Instance] | None, features: Any = None) -> None:
    """Set ``selector.calibrator_`` from ``val`` after a fit (None without ``val``; never for
    the LLM selectors, whose scoring calls an LLM). A validation split it cannot calibrate
    on (one class only, no retrieval scores, no scikit-learn, or instances of the test
    split, which :func:`calibrate_selector` refuses) leaves None with a warning. The
    provenance records the calibration."""
    selector.calibrator_ = None
    if not val or getattr(selector, "query_cost", "none") == "llm":
        return
    try:
        cal = calibrate_selector(selector, val, features)
    except DataError as err:  # e.g. instances marked split="test" (Instance's default) passed as val
        warnings.warn(f"{selector.name}: not calibrated: {err}", stacklevel=4)
        return
    except ImportError as err:
        warnings.warn(f"{selector.name}: not calibrated: {err} (calibration needs scikit-learn)", stacklevel=4)
        return
    selector.calibrator_ = cal
    prov = dict(getattr(selector, "provenance_", None) or {})
    prov["calibration"] = {"split": "val", "label_source": cal.label_source, "source": cal.source,
                           "n_sets": cal.info.get("n_sets"), "chunk_method": cal.chunk.method,
                           "set_method": cal.set.method}
    selector.provenance_ = prov


def selector_probabilities(
    selector: Any, batch: Sequence[Instance], features: Any = None, scores: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """:meth:`chunksel.selectors.base.Selector.probabilities`."""
    cal = selector.calibrator_
    if cal is None:
        raise NotFittedError(f"selector {selector.name!r} is not calibrated: fit it with a validation split (val=)")
    if cal.source != "score" or scores is None:
        scores = calibration_scores(selector, batch, features)
    retrieval = retrieval_score_matrix(batch) if cal.set.retrieval else None
    chunk_p = cal.chunk_probabilities(scores, retrieval)
    return chunk_p, cal.set_probabilities(scores, chunk_p, retrieval)


def write_calibration(cal: Calibrator, folder: str | Path) -> None:
    """Write ``calibration.json`` into a saved selector's (staging) folder."""
    (Path(folder) / CALIBRATION_FILE).write_text(json.dumps(cal.to_dict(), indent=1))


def read_calibration(folder: str | Path) -> Calibrator | None:
    """The calibrator saved in ``folder`` (None when it has none)."""
    file = Path(folder) / CALIBRATION_FILE
    if not file.is_file():
        return None
    try:
        d = json.loads(file.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"corrupt checkpoint {file}: {err.msg}") from None
    if not isinstance(d, dict):
        raise DataError(f"corrupt checkpoint {file}: not a JSON object")
    return Calibrator.from_dict(d, str(file))
