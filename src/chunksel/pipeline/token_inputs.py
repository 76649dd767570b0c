"""The token vectors of late interaction on the application path (:class:`ChunkSelector`).

A selector that reads ``"token_vectors"`` (``maxsim``, and the rankers and the flagship
built with ``late=True``: :mod:`chunksel.selectors.late_features`) scores each chunk by
MaxSim between the question's MiniLM token vectors and the chunk's. They come from
three places, cheapest first:

1. **The caller** (``question_tokens=``, ``chunk_tokens=``): a retriever that embeds the
   question with :meth:`~chunksel.retrieval.encoder.Encoder.encode_with_tokens` gets its
   token vectors from the same pass, and the chunks' were stored when the corpus was
   encoded (:func:`chunksel.bulk.jobs.encode_tokens`, :class:`~chunksel.retrieval.tokens.TokenShards`).
   Nothing is encoded here.
2. **The token cache** (``token_cache=``, a :class:`~chunksel.retrieval.chunk_cache.TokenCache`):
   a chunk seen before is not encoded again.
3. **The encoder**, from raw text: one MiniLM pass over the question (which also gives
   its embedding) and one over the chunks the cache lacks.

Chunks are always read through the stored int8 codes (:func:`~chunksel.retrieval.tokens.pack`),
so every path gives the scores the selector was trained on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from chunksel.pipeline.select_inputs import encoder_cache_id, field_error, make_cache
from chunksel.retrieval.chunk_cache import TokenCache, cache_key, tokens_cached


def make_token_cache(spec: Any) -> TokenCache | None:
    """``token_cache=`` of :class:`ChunkSelector` -> a TokenCache or None: ``True`` = a
    memory-only one (2,000 chunks, about 100 MB), a path = one backed by that SQLite file
    (the embedding cache's file will do), ``False``/``None`` = none, or a cache object."""
    return make_cache(spec, TokenCache, "token_cache")


def _matrix(arr: Any, field: str, where: str, dim: int) -> np.ndarray:
    try:
        x = np.asarray(arr)
    except (TypeError, ValueError):
        raise field_error(field, f"{where}{field} must be (tokens, {dim}) arrays of numbers") from None
    if x.ndim != 2 or x.shape[0] == 0 or x.shape[1] != dim:
        raise field_error(field, f"{where}{field} has shape {x.shape}, expected (tokens, {dim}): the "
                          "all-MiniLM-L6-v2 token vectors (Encoder.encode_with_tokens, or the bulk job's shards)")
    if x.dtype == np.int8:
        return x
    try:
        x = x.astype(np.float32)
    except (TypeError, ValueError):
        raise field_error(field, f"{where}{field} must be (tokens, {dim}) arrays of numbers") from None
    if not np.isfinite(x).all():
        raise field_error(field, f"{where}{field} contains NaN or infinite values")
    if not np.abs(x).sum(axis=1).all():
        raise field_error(field, f"{where}{field} has an all-zero token vector")
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def check_tokens(qtok_l: list[Any], ctok_l: list[Any], texts: list[list[str]], dim: int) -> None:
    """Check the caller's token vectors in place: a question's ``(tokens, dim)`` floats
    (unit-normalised here), one ``(tokens, dim)`` array per chunk (int8 codes as stored,
    or floats, which are packed to the codes). Each problem is a ``DataError`` naming the
    field."""
    from chunksel.retrieval.tokens import pack, unpack

    b = len(texts)
    for i in range(b):
        where = f"question #{i}: " if b > 1 else ""
        if qtok_l[i] is not None:
            q = _matrix(qtok_l[i], "question_tokens", where, dim)
            qtok_l[i] = unpack(q) if q.dtype == np.int8 else q
        got = ctok_l[i]
        if got is None:
            continue
        if isinstance(got, np.ndarray) and got.ndim == 3:  # equal lengths, stacked
            got = list(got)
        if isinstance(got, (str, bytes, np.ndarray)) or not hasattr(got, "__len__"):
            raise field_error("chunk_tokens", f"{where}chunk_tokens must be a list with one (tokens, {dim}) "
                              "array per chunk")
        if len(got) != len(texts[i]):
            raise field_error("chunk_tokens", f"{where}{len(texts[i])} chunks but {len(got)} chunk_tokens")
        out = []
        for j, c in enumerate(got):
            x = None if c is None else _matrix(c, "chunk_tokens", f"{where}[{j}] ", dim)
            out.append(x if x is None or x.dtype == np.int8 else pack(x))
        ctok_l[i] = out


def fill_tokens(encoder: Callable[[], Any], cache: TokenCache | None, questions: list[str],
                texts: list[list[str]], titles: list[Any], n_scored: list[int], qtok_l: list[Any],
                ctok_l: list[Any], qemb_l: list[Any], emb_cache: Any = None) -> dict[str, int]:
    """Fill in what the caller did not give: each question's token vectors (with its
    embedding from the same pass when that is missing too) and each scored chunk's codes
    (``title + " " + text``, through ``cache``). A chunk encoded here gives its embedding
    from the same pass to ``emb_cache`` (the embedding cache), so the embedding fill that
    follows finds it there instead of encoding the chunk again. ``encoder`` returns the
    retriever encoder; it is called only when something is encoded. Returns
    ``{"questions", "chunks"}`` encoded (chunks: those the cache did not hold)."""
    todo_q = [i for i, t in enumerate(qtok_l) if t is None]
    todo_c = [(i, j) for i in range(len(texts)) for j in range(n_scored[i])
              if ctok_l[i] is None or ctok_l[i][j] is None]
    if not todo_q and not todo_c:
        return {"questions": 0, "chunks": 0}
    given = encoder()
    enc = _token_encoder(given)
    if todo_q:
        emb, toks = enc.encode_with_tokens([questions[i] for i in todo_q])
        for n, i in enumerate(todo_q):
            qtok_l[i] = toks[n].astype(np.float32)
            if qemb_l[i] is None and enc is given:  # the embedding of the same pass
                qemb_l[i] = emb[n]
    n_before = cache.misses if cache is not None else 0
    flat = [((titles[i][j] + " " if titles[i] is not None and titles[i][j] else "") + texts[i][j]).strip()
            for i, j in todo_c]
    sink = None
    if emb_cache is not None and enc is given:  # the embeddings of the same pass, kept for the embedding fill
        enc_id = encoder_cache_id(given)
        sink = lambda batch, vecs: emb_cache.put_many([cache_key(t, enc_id) for t in batch], vecs)  # noqa: E731
    codes = tokens_cached(enc, flat, cache, sink) if flat else []
    for (i, j), c in zip(todo_c, codes, strict=True):
        if ctok_l[i] is None:
            ctok_l[i] = [None] * len(texts[i])
        ctok_l[i][j] = c
    n_chunks = (cache.misses - n_before) if cache is not None else len(flat)
    return {"questions": len(todo_q), "chunks": n_chunks}


@functools.lru_cache(maxsize=1)
def _torch_minilm() -> Any:
    from chunksel.retrieval.encoder import Encoder

    return Encoder()


def _token_encoder(encoder: Any) -> Any:
    """``encoder`` when it gives token vectors (the sentence-transformers one), else the
    packaged MiniLM on torch, loaded once (an ONNX encoder returns pooled embeddings only)."""
    return encoder if hasattr(encoder, "encode_with_tokens") else _torch_minilm()
