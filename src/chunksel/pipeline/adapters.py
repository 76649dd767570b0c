"""What the framework adapters share: turn the framework's documents into a
:meth:`ChunkSelector.select` call that reuses what the framework already computed.

- Chunk embeddings: reused when every document carries one and the selector reads
  embeddings. They must come from the selector's encoder (all-MiniLM-L6-v2 unless it was
  trained with another); a vector of another dimension is a
  :class:`~chunksel.errors.DataError`, never silently replaced.
- Retrieval scores: reused when every document carries one and the selector reads them.
- The query embedding: reused when the framework has it (LlamaIndex's ``QueryBundle``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError


def as_chunk_selector(selector: Any, **load_kwargs: Any) -> Any:
    """A :class:`ChunkSelector`: given one, or loaded from a saved selector's path."""
    from chunksel.pipeline.chunk_selector import ChunkSelector

    if isinstance(selector, ChunkSelector):
        return selector
    if isinstance(selector, (str, Path)):
        return ChunkSelector.load(selector, **load_kwargs)
    raise TypeError(f"expected a ChunkSelector or a saved selector's path, got {type(selector).__name__}")


def select_reusing(
    cs: Any,
    query: str,
    texts: Sequence[str],
    k: int | str,
    embeddings: Sequence[Any] | None,
    scores: Sequence[Any] | None,
    query_embedding: Any = None,
    titles: Sequence[str] | None = None,
    threshold: float | None = None,
    min_p: float | None = None,
) -> Any:
    """``cs.select`` with the framework's vectors and scores where complete and useful
    (``k`` may be ``"auto"``; ``threshold`` and ``min_p`` pass through, so the selection
    may be empty)."""
    kw: dict[str, Any] = {}
    if embeddings is not None and all(e is not None for e in embeddings) and cs.inputs & {
        "chunk_embedding", "retrieval_score"
    }:
        emb = np.asarray([np.asarray(e, dtype=np.float32).reshape(-1) for e in embeddings], dtype=np.float32)
        want = int(cs.provenance.get("embedding_dim") or 0)
        if want and emb.shape[1] != want:
            raise DataError(
                f"the documents carry {emb.shape[1]}-dim embeddings, but the {cs.name} selector was trained on "
                f"{want}-dim ones ({cs.provenance.get('encoder_id') or 'its encoder'}): embed the documents with "
                "the selector's encoder, or turn embedding reuse off"
            )
        kw["chunk_embeddings"] = emb
    if query_embedding is not None and cs.inputs & {"question_embedding", "retrieval_score"}:
        kw["question_embedding"] = np.asarray(query_embedding, dtype=np.float32)
    if scores is not None and all(s is not None for s in scores) and "retrieval_score" in cs.inputs:
        kw["chunk_scores"] = [float(s) for s in scores]
    if titles is not None:
        kw["titles"] = list(titles)
    if not isinstance(k, str):
        k = min(k, len(texts))
    return cs.select(query, list(texts), k=k, threshold=threshold, min_p=min_p, **kw)
