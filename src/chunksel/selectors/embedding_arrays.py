"""The retriever-embedding arrays of a batch, for the selectors that score embeddings
directly (the anchored prototype, SRAS): the questions' and the candidates' vectors.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksel.errors import DataError
from chunksel.types import Instance


def embedding_arrays(
    batch: Sequence[Instance], k: int, dim: int | None = None, who: str = "this selector"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``q`` (B, d), ``e`` (B, k, d) (zeros at padding) and the (B, k) real-candidate mask.

    Every question needs its retriever embedding: a missing one is an error that names the
    fix (nothing is encoded behind the caller's back with an encoder it did not choose).

    Args:
        batch: the instances; every candidate among the first ``k`` needs an embedding.
        k: candidates per instance.
        dim: the selector's embedding dimension (None: the first candidate's).
        who: names the selector in error messages.

    Raises:
        DataError: a candidate without an embedding, or a dimension that differs.
    """
    d = dim
    for inst in batch:
        for c in inst.candidates[:k]:
            if c.embedding is None:
                raise DataError(f"instance {inst.id!r}: candidate {c.id!r} has no embedding ({who} needs E)")
            if d is None:
                d = int(c.embedding.shape[-1])
    if d is None:
        raise DataError(f"no candidate has an embedding: {who} needs E")
    missing = [inst.id for inst in batch if inst.question.embedding is None]
    if missing:
        raise DataError(
            f"{len(missing)} question(s) without an embedding (first: {missing[0]!r}): {who} reads the "
            "retriever's query vector; pass question_embedding= to ChunkSelector.select (or give it the texts "
            "only and it encodes both sides), or build instances with chunksel.build.build_instances, which "
            "embeds them")
    q = np.zeros((len(batch), d), dtype=np.float32)
    e = np.zeros((len(batch), k, d), dtype=np.float32)
    m = np.zeros((len(batch), k), dtype=bool)
    for i, inst in enumerate(batch):
        qv = np.asarray(inst.question.embedding, dtype=np.float32).reshape(-1)
        if qv.shape[0] != d:
            raise DataError(
                f"instance {inst.id!r}: question embedding dimension {qv.shape[0]} != {d} "
                "(the candidates' / the selector's)"
            )
        q[i] = qv
        for j, c in enumerate(inst.candidates[:k]):
            if c.embedding.shape[-1] != d:
                raise DataError(
                    f"instance {inst.id!r}: candidate embedding dimension {c.embedding.shape[-1]} != {d}"
                )
            e[i, j] = c.embedding
            m[i, j] = True
    return q, e, m


def unit_rows(v: np.ndarray) -> np.ndarray:
    """Each vector of ``v`` (last axis) scaled to unit length, float32; zero rows stay zero."""
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.where(n > 0, v / np.maximum(n, 1e-12), 0.0).astype(np.float32)
