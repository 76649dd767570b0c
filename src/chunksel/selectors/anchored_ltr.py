"""The anchored selector's interaction features (blocks ``letor`` and ``lambdamart``,
:mod:`chunksel.selectors.anchored`): the LETOR features padded to K, the internal
LambdaMART (trained on the training split, early-stopped on validation) with the training
split's cross-fitted scores, and their assembly into ``phi``. Functions of arrays and
settings: the selector passes what they read."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from chunksel.errors import DataError
from chunksel.types import Instance


def letor_block(batch: Sequence[Instance], corpus: str | None, k1: float, b: float, k: int,
                late: bool = False, tokens: str | None = None) -> np.ndarray:
    """(B, K, 12) LETOR features, with ``late`` (B, K, 15): the late-interaction columns
    after them (:mod:`.late_features`; the chunks' token vectors from ``tokens``); 0 at
    padding."""
    from chunksel.selectors.late_features import LATE_NAMES, late_features
    from chunksel.selectors.letor import FEATURE_NAMES, letor_features

    lf, _ = letor_features(batch, corpus, k1, b)
    if late:
        lf = np.concatenate([lf, late_features(batch, tokens)], axis=2)
    out = np.zeros((len(batch), k, len(FEATURE_NAMES) + (len(LATE_NAMES) if late else 0)), dtype=np.float64)
    out[:, : min(lf.shape[1], k)] = lf[:, :k]
    return out


def ltr_scores(ltr: Any, lf: np.ndarray, m: np.ndarray) -> np.ndarray:
    """(B, K) scores of the internal LambdaMART ``ltr`` (0 at padding)."""
    out = np.zeros(m.shape, dtype=np.float64)
    if m.any():
        out[m] = ltr.predict(lf[m], num_threads=1)  # a few rows: thread start-up would dominate
    return out


def interaction_features(blocks: Sequence[str], q: np.ndarray, e: np.ndarray, m: np.ndarray, lf: np.ndarray,
                         ltr: np.ndarray | None) -> np.ndarray:
    """(B, K, F) interaction features (0 at padding) from unit ``q`` (B, d) and ``e``
    (B, K, d), the real mask ``m``, the LETOR features ``lf`` and, with the ``lambdamart``
    block, the internal LambdaMART's scores ``ltr`` (the cross-fitted ones on the training
    split): the block's columns, then each minus its mean over the instance's candidates."""
    cols = []
    if "letor" in blocks:
        cos = np.einsum("bd,bkd->bk", q, e)
        best = np.where(m, cos, -np.inf).max(axis=1, keepdims=True)
        cols += [lf, cos[:, :, None], np.where(m, cos - best, 0.0)[:, :, None]]
    if "lambdamart" in blocks:
        cols.append(ltr[:, :, None])
    raw = np.concatenate(cols, axis=2) * m[:, :, None]
    n = np.maximum(m.sum(axis=1, keepdims=True), 1)[:, :, None]
    mean = raw.sum(axis=1, keepdims=True) / n
    centred = (raw - mean) * m[:, :, None]
    return (np.concatenate([raw, centred], axis=2) * m[:, :, None]).astype(np.float32)


def fit_internal_lambdamart(
    train: Sequence[Instance],
    val: Sequence[Instance] | None,
    rows_of: Callable[[Sequence[Instance]], tuple[np.ndarray, np.ndarray]],
    *,
    label: str | None,
    k: int,
    seed: int,
    folds: int,
) -> tuple[Any, np.ndarray]:
    """Train the internal LambdaMART on ``train`` (early-stopped on ``val``); return it and
    the cross-fitted (B, K) scores of ``train``: each of ``folds`` folds' by a ranker trained
    on the other folds' contested instances. ``rows_of(batch)`` gives a batch's (B, K, 12)
    LETOR features and (B, K) real-candidate mask; ``label`` is the label spec, ``k`` the
    candidates per instance, ``seed`` seeds the rankers and the folds."""
    from chunksel.selectors.late_features import LATE_NAMES
    from chunksel.selectors.letor import FEATURE_NAMES
    from chunksel.selectors.ltr import LambdaMARTSelector, train_lambdarank

    defaults = LambdaMARTSelector()

    def rows(batch: Sequence[Instance]):
        kept = [i for i in batch if i.contested(label)]
        if not kept:
            return None
        lf, m = rows_of(kept)
        y = np.concatenate([np.asarray(i.labels(label))[:k] for i in kept]).astype(np.int32)
        return lf[m], y, [int(r.sum()) for r in m]

    valid = rows(val or [])  # early stopping: the same validation rows for every ranker

    def fit(batch: Sequence[Instance]):
        data = rows(batch)
        if data is None:
            raise DataError("the anchored selector's lambdamart block: no training instance has both a "
                            "positive and a negative candidate")
        return train_lambdarank(
            *data, valid, n_estimators=defaults.n_estimators, learning_rate=defaults.learning_rate,
            num_leaves=defaults.num_leaves, min_child_samples=defaults.min_child_samples,
            early_stopping_rounds=defaults.early_stopping_rounds, seed=seed, n_jobs=1,
            feature_names=[*FEATURE_NAMES, *LATE_NAMES][: data[0].shape[1]],  # 12, or 15 with late
        )

    train = list(train)
    ltr = fit(train)
    lf, m = rows_of(train)
    fold_of = np.random.default_rng(seed).permutation(len(train)) % folds
    out = np.zeros(m.shape, dtype=np.float64)
    for f in range(folds):
        rest = [train[i] for i in np.flatnonzero(fold_of != f)]
        held = np.flatnonzero(fold_of == f)
        if not len(held):
            continue
        fold_model = fit(rest) if any(i.contested(label) for i in rest) else ltr
        sub, mh = np.zeros((len(held), k)), m[held]
        if mh.any():
            sub[mh] = fold_model.predict(lf[held][mh])
        out[held] = sub
    return ltr, out
