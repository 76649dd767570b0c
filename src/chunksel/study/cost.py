"""The cost columns of Table 1: trainable parameters, saved size and two batch-1 latencies
on one thread (:func:`chunksel.eval.cost.selector_cost`), each over the whole query path,
cold:

- ``p50_ms`` / ``p95_ms``: from the question and its K chunks as a retriever hands them
  over (texts, embeddings, retrieval scores, and for late interaction the question's and
  the chunks' stored token vectors, :func:`with_tokens`) to the scores (:func:`cold_path`);
- ``text_p50_ms`` / ``text_p95_ms``: from raw text (:func:`text_path`): the question and
  the chunk texts encoded with the packaged MiniLM encoder in one call, no embedding
  cache, the retrieval scores their cosines, then the same path. Only what the selector
  reads is encoded (:func:`~chunksel.selectors.provenance.selector_inputs`, as
  ``ChunkSelector`` does), so the selectors that read neither embeddings nor retrieval
  scores time the same path twice; a late selector that reads embeddings gets its token
  vectors from the same encoder pass (``encode_with_tokens``), and ``maxsim`` alone
  encodes them inside its scoring.

Cold: every feature is computed per call. Evaluation has just filled the in-process
LETOR memo with these very test instances, so the stage turns it off
(:func:`~chunksel.selectors.letor.memo_off`): reports before it timed the memo's hits
for the LETOR-based selectors (LambdaMART 0.08 ms against about 1.1 ms cold). What a
loaded selector holds stays loaded: its weights, the corpus statistics, the encoder. The
generator's ``h`` and ``r`` (query cost ``warmup``) come from the feature store on both
paths: generation runs that pass anyway.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np

from chunksel.types import Instance

#: what a selector reads that the retriever encoder gives
ENCODED = frozenset({"chunk_embedding", "question_embedding", "retrieval_score"})


def cold_path(selector, features) -> Callable[[Instance], np.ndarray]:
    """One query, embeddings and retrieval scores given: the instance to its scores.
    Call it inside :func:`~chunksel.selectors.letor.memo_off` (as :func:`measure_cost`
    does) for a cold figure."""
    return lambda inst: selector.score([inst], features)


def raw(inst: Instance) -> Instance:
    """``inst`` as raw text gives it: no embeddings, no retrieval scores, no token vectors."""
    return replace(inst, question=replace(inst.question, embedding=None, tokens=None),
                   candidates=[replace(c, embedding=None, score=math.nan, tokens=None) for c in inst.candidates])


def with_tokens(selector, queries: list[Instance]) -> list[Instance]:
    """``queries`` as a retriever that stores token vectors hands them over (late
    interaction, a selector that reads ``"token_vectors"``): the question's from its own
    encoder pass, each chunk's int8 codes, computed here before any timing."""
    from chunksel.retrieval.tokens import chunk_codes, token_vectors
    from chunksel.selectors.late_features import scorer

    sc = scorer(getattr(selector, "tokens", None))
    out = []
    for inst in queries:
        (q,) = token_vectors(sc.encoder(), [inst.question.text])
        codes = chunk_codes(sc.encoder(), [sc.chunk_text(c) for c in inst.candidates])
        out.append(replace(inst, question=replace(inst.question, tokens=q),
                           candidates=[replace(c, tokens=t) for c, t in zip(inst.candidates, codes, strict=True)]))
    return out


@functools.cache
def default_encoder() -> Any:
    """The packaged all-MiniLM-L6-v2 (sentence-transformers), loaded once per process."""
    from chunksel.retrieval.encoder import Encoder

    return Encoder()


def text_path(selector, features, encoder: Any) -> Callable[[Instance], np.ndarray]:
    """One query from raw text (an instance from :func:`raw`) to its scores: what the
    selector reads of the encoder (:data:`ENCODED`) encoded in one call, then scored."""
    from chunksel.selectors.bm25_stats import passage_text
    from chunksel.selectors.provenance import selector_inputs

    inputs = selector_inputs(selector)
    if not inputs & ENCODED:
        return cold_path(selector, features)
    late = "token_vectors" in inputs

    def run(inst: Instance) -> np.ndarray:
        from chunksel.retrieval.tokens import pack

        texts = [passage_text(c.title, c.text) for c in inst.candidates] + [inst.question.text]
        if late:  # one pass gives the embeddings and the token vectors (as ChunkSelector does)
            vecs, toks = encoder.encode_with_tokens(texts)
        else:
            vecs, toks = np.asarray(encoder.encode(texts, progress=False), dtype=np.float32), None
        e, q = vecs[:-1], vecs[-1]
        cos = (e @ q).tolist()
        enc = replace(inst, question=replace(inst.question, embedding=q,
                                             tokens=None if toks is None else toks[-1].astype(np.float32)),
                      candidates=[replace(c, embedding=e[j], score=cos[j], tokens=None if toks is None else pack(toks[j]))
                                  for j, c in enumerate(inst.candidates)])
        return selector.score([enc], features)

    return run


def _encoder_fits(batch, encoder: Any) -> bool:
    """Whether ``encoder`` gives the vectors the instances carry (their dimension): a
    selector reads one encoder's space, and raw text needs that encoder."""
    dims = {len(c.embedding) for i in batch for c in i.candidates if c.embedding is not None}
    return dims == {int(encoder.dim)}


def measure_cost(selector, batch, features, n: int, encoder: Any = None) -> dict:
    """Parameters, saved size and both cold batch-1 latencies of the first ``n`` of
    ``batch``, all on one thread. ``encoder`` defaults to the packaged MiniLM; the
    text-path figures are left out where the selector needs it and it does not give the
    instances' vectors (or is not installed)."""
    from chunksel.errors import ChunkselError
    from chunksel.eval.cost import selector_cost
    from chunksel.selectors.letor import memo_off
    from chunksel.selectors.provenance import selector_inputs
    from chunksel.threads import limit_threads

    queries = list(batch[:n])
    if "token_vectors" in selector_inputs(selector):
        queries = with_tokens(selector, queries)  # the given path has them; raw() strips them
    fits = True
    if selector_inputs(selector) & ENCODED:
        try:
            encoder = encoder if encoder is not None else default_encoder()
            fits = _encoder_fits(queries, encoder)
        except (ChunkselError, ImportError, OSError, ValueError, KeyError):  # no packaged encoder
            fits = False
    with limit_threads(1), memo_off():
        return selector_cost(
            selector, queries, features, repeats=3, warmup=3,
            text_path=text_path(selector, features, encoder) if fits else None,
            text_inputs=[raw(i) for i in queries],
        ).to_dict()
