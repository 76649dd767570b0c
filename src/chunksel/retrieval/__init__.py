"""chunksel.retrieval: MiniLM encoder, corpus embeddings, FAISS indexes, retriever.

Exports resolve lazily so ``import chunksel.retrieval`` stays light (no torch, no faiss).
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "Encoder": "chunksel.retrieval.encoder",
    "default_model_dir": "chunksel.retrieval.encoder",
    "decode_precomputed": "chunksel.retrieval.embeddings",
    "corpus_embeddings": "chunksel.retrieval.embeddings",
    "corpus_key": "chunksel.retrieval.embeddings",
    "Index": "chunksel.retrieval.index",
    "build_index": "chunksel.retrieval.index",
    "cached_index": "chunksel.retrieval.index",
    "Retriever": "chunksel.retrieval.retriever",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'chunksel.retrieval' has no attribute {name!r}")
