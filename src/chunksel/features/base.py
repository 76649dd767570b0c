"""Question-feature lookups without torch: an in-memory table keyed by question id.

The on-disk :class:`~chunksel.features.store.FeatureStore` offers the same ``lookup``;
selectors only rely on the :class:`~chunksel.selectors.base.QuestionFeatures` protocol.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksel.errors import DataError


class InMemoryFeatures:
    """``{"h": (N, d_h), "r": (N, d_r)}`` arrays with a question-id index."""

    def __init__(self, ids: Sequence[str], **arrays: np.ndarray) -> None:
        self.ids = list(ids)
        self.index = {q: i for i, q in enumerate(self.ids)}
        if len(self.index) != len(self.ids):
            raise DataError("duplicate question ids in features")
        for name, arr in arrays.items():
            if arr.shape[0] != len(self.ids):
                raise DataError(f"feature {name!r} has {arr.shape[0]} rows for {len(self.ids)} ids")
        self.arrays = {k: np.asarray(v, dtype=np.float32) for k, v in arrays.items()}

    @property
    def dims(self) -> dict[str, int]:
        return {k: int(v.shape[1]) for k, v in self.arrays.items()}

    def lookup(self, ids: Sequence[str]) -> dict[str, np.ndarray]:
        missing = [q for q in ids if q not in self.index]
        if missing:
            raise DataError(
                f"no generator features for {len(missing)} question(s), e.g. {missing[0]!r}: run `chunksel features`"
            )
        rows = np.fromiter((self.index[q] for q in ids), dtype=np.int64, count=len(ids))
        return {k: v[rows] for k, v in self.arrays.items()}
