"""Token vectors of the retriever's own encoder, and MaxSim over them (late interaction).

all-MiniLM-L6-v2 pools its token vectors into the sentence embedding the retriever
searches with; the token vectors themselves match a question's words against a chunk's,
ColBERT-style, with no training: MaxSim(q, c) = mean over the question's tokens of the
best cosine with any of the chunk's tokens. [CLS] and [SEP] are dropped and every token
vector is L2-normalised, stored as float16 (768 bytes a token: 384 dimensions x 2 bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from chunksel.errors import DataError

#: bytes of one stored token vector (384 float16 values)
BYTES_PER_TOKEN = 384 * 2


def token_vectors(encoder: Any, texts: Sequence[str], batch_size: int | None = None) -> list[np.ndarray]:
    """Per text: its ``(tokens, dim)`` float16 unit token vectors (special tokens dropped;
    at most the encoder's ``max_seq_length`` tokens).

    Args:
        encoder: a :class:`chunksel.retrieval.encoder.Encoder`.
        texts: the texts; an empty or blank one is a :class:`DataError`.
    """
    texts = list(texts)
    for n, t in enumerate(texts):
        if not isinstance(t, str) or not t.strip():
            raise DataError(f"text #{n} is empty: MaxSim needs a question and chunks with words")
    if not texts:
        return []
    out = encoder.model.encode(texts, output_value="token_embeddings", batch_size=batch_size or encoder.batch_size,
                               show_progress_bar=False, convert_to_numpy=False)
    vecs = []
    for t in out:
        x = t.detach().float().cpu().numpy()
        x = x[1:-1] if len(x) > 2 else x  # drop [CLS] and [SEP]
        x /= np.maximum(np.linalg.norm(x, axis=1, keepdims=True), 1e-12)
        vecs.append(x.astype(np.float16))
    encoder.n_encoded += len(texts)
    return vecs


def maxsim(question: np.ndarray, chunk: np.ndarray) -> float:
    """Mean over the question's token vectors of the best cosine with the chunk's."""
    if question.ndim != 2 or chunk.ndim != 2 or question.shape[1] != chunk.shape[1]:
        raise DataError(f"MaxSim needs (tokens, dim) arrays of one dim, got {question.shape} and {chunk.shape}")
    sims = question.astype(np.float32) @ chunk.astype(np.float32).T
    return float(sims.max(axis=1).mean())
