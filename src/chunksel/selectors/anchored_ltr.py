"""The anchored selector's internal LambdaMART (block ``lambdamart``): trained on the
training split, early-stopped on validation, and the training split's cross-fitted scores."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chunksel.errors import DataError
from chunksel.types import Instance


def fit_internal_lambdamart(sel: Any, train: Sequence[Instance], val: Sequence[Instance] | None) -> np.ndarray:
    """Train the internal LambdaMART on ``train`` (early-stopped on ``val``) into
    ``sel.ltr_``; return the cross-fitted (B, K) scores of ``train``: each fold's
    by a ranker trained on the other folds' contested instances."""
    from chunksel.selectors.ltr import LambdaMARTSelector, train_lambdarank

    defaults = LambdaMARTSelector()

    def rows(batch: Sequence[Instance]):
        kept = [i for i in batch if i.contested(sel.label)]
        if not kept:
            return None
        lf = sel._letor(kept)
        _, _, m = sel._embeddings(kept)
        y = np.concatenate([np.asarray(i.labels(sel.label))[: sel.k] for i in kept]).astype(np.int32)
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
            early_stopping_rounds=defaults.early_stopping_rounds, seed=sel.seed, n_jobs=1,
        )

    train = list(train)
    sel.ltr_ = fit(train)
    lf = sel._letor(train)
    _, _, m = sel._embeddings(train)
    folds = np.random.default_rng(sel.seed).permutation(len(train)) % sel.ltr_folds
    out = np.zeros(m.shape, dtype=np.float64)
    for f in range(sel.ltr_folds):
        rest = [train[i] for i in np.flatnonzero(folds != f)]
        held = np.flatnonzero(folds == f)
        if not len(held):
            continue
        fold_model = fit(rest) if any(i.contested(sel.label) for i in rest) else sel.ltr_
        sub, mh = np.zeros((len(held), sel.k)), m[held]
        if mh.any():
            sub[mh] = fold_model.predict(lf[held][mh])
        out[held] = sub
    return out
