"""The real-world path: question text and chunk texts in, the chosen chunk(s) out.

``ChunkSelector.load(path).select(question, chunks)`` runs what the trained prototype
selector needs by itself — the retriever encoder for the chunks (MiniLM) and the
generator's question-only warm-up pass for ``h`` and ``r`` — or takes them from the
caller: ``chunk_embeddings=`` (the retriever's own vectors) and ``features=`` (``{"h",
"r"}`` from the caller's own LLM pass). The warm-up result is kept on the returned
selection, so the caller can continue generation from its KV cache
(:func:`chunksel.features.kv.generate_with_reuse`).

The model scores the first K chunks it is given (K: the selector's ``k``); chunks past
K get a ``null`` score, are never selected, and a warning says how many were left out.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError, UnscoredChunksWarning
from chunksel.features.base import InMemoryFeatures
from chunksel.selectors.base import selection_from_scores
from chunksel.types import Candidate, Instance, Question


@dataclass
class ChunkSelection:
    """The chosen chunk(s) of one question, best first, with every chunk's score.

    ``all_scores`` has one entry per given chunk: ``None`` for a chunk the model did not
    score (past its K; see :meth:`ChunkSelector.select`). ``n_scored`` counts the scored
    ones. :meth:`to_dict` is valid JSON (no NaN or infinities).
    """

    question: str
    indices: list[int]
    chunks: list[str]
    scores: list[float]
    all_scores: list[float | None]
    warm_up: Any = field(default=None, repr=False)
    n_scored: int = -1

    def to_dict(self) -> dict[str, Any]:
        return {
            "question": self.question,
            "indices": self.indices,
            "chunks": self.chunks,
            "scores": [_json_score(s) for s in self.scores],
            "all_scores": [_json_score(s) for s in self.all_scores],
        }


def _json_score(s: float | None) -> float | None:
    """A score as JSON allows it: a finite float, else None (null)."""
    return float(s) if s is not None and np.isfinite(s) else None


class ChunkSelector:
    """A trained prototype selector with its encoder and generator, ready to use.

    Args:
        selector: a fitted :class:`~chunksel.selectors.prototype.PrototypeSelector`.
        encoder: the retriever encoder (default: the one the selector was trained with,
            else the packaged all-MiniLM-L6-v2); loaded on first use.
        generator: a generator path (default: the one recorded in the selector, else
            SmolLM2-135M-Instruct); loaded on first use, only when features are not given.
    """

    def __init__(self, selector: Any, encoder: Any = None, generator: str | None = None) -> None:
        if getattr(selector, "name", "") != "prototype":
            raise ConfigError("ChunkSelector needs a trained prototype selector")
        self.selector = selector
        self._encoder = encoder
        self._generator_path = generator
        self._generator: tuple[Any, Any, str] | None = None

    @classmethod
    def load(
        cls, path: str | Path, quantize: str | None = None, engine: str | None = None, **kwargs: Any
    ) -> ChunkSelector:
        """Load a saved prototype selector; ``quantize`` / ``engine`` override its inference settings."""
        from chunksel.selectors.prototype import PrototypeSelector

        return cls(PrototypeSelector.load(path, quantize=quantize, engine=engine), **kwargs)

    # ------------------------------------------------------------------ parts
    @property
    def encoder(self) -> Any:
        if self._encoder is None:
            from chunksel.retrieval.encoder import Encoder

            self._encoder = Encoder()
        return self._encoder

    def generator(self) -> tuple[Any, Any, str]:
        """(model, tokenizer, generator id), loaded once."""
        if self._generator is None:
            from chunksel.llm.models import load_generator

            self._generator = load_generator(self._generator_path)
            want = getattr(self.selector, "generator_id", "")
            if want and self._generator[2] != want:
                raise DataError(
                    f"the selector was trained on generator {want!r}, but {self._generator[2]!r} is loaded"
                )
        return self._generator

    # ----------------------------------------------------------------- select
    def select(
        self,
        question: str,
        chunks: Sequence[str] | None = None,
        chunk_embeddings: np.ndarray | None = None,
        features: dict[str, np.ndarray] | None = None,
        k: int = 1,
    ) -> ChunkSelection:
        """Choose the top ``k`` chunks for ``question``.

        Args:
            question: the question text (non-empty).
            chunks: candidate chunk texts in retrieval order (optional when
                ``chunk_embeddings`` is given).
            chunk_embeddings: (n, d) retriever embeddings of the chunks (L2-normalised
                here); encoded from ``chunks`` when absent.
            features: ``{"h": (d_h,), "r": (d_r,)}`` from the caller's warm-up pass;
                computed with the generator when absent.
            k: how many chunks to return (at most the number of scored chunks).

        Only the first K chunks in the given order (K: the ``k`` the selector was
        trained with) are scored; any further chunk gets a ``None`` score, is never
        selected, and an :class:`~chunksel.errors.UnscoredChunksWarning` says how many
        were left out. Put the retriever's best chunks first.

        Raises:
            ConfigError: ``k`` < 1.
            DataError: an empty question, no chunks, or scores that are NaN (a corrupt
                model or non-finite features).
        """
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        if not question or not question.strip():
            raise DataError("empty question")
        if chunk_embeddings is None:
            if not chunks:
                raise DataError("no candidate chunks given")
            emb = self.encoder.encode(list(chunks), progress=False)
        else:
            emb = np.asarray(chunk_embeddings, dtype=np.float32)
            if emb.ndim != 2 or emb.shape[0] == 0:
                raise DataError(f"chunk_embeddings must be a non-empty (n, d) array, got shape {emb.shape}")
            if chunks is not None and len(chunks) != emb.shape[0]:
                raise DataError(f"{len(chunks)} chunks but {emb.shape[0]} embeddings")
            emb = emb / np.maximum(np.linalg.norm(emb, axis=1, keepdims=True), 1e-12)
        texts = list(chunks) if chunks is not None else [f"chunk {i}" for i in range(emb.shape[0])]
        warm = None
        if features is None:
            from chunksel.features.kv import warm_up

            model, tokenizer, _ = self.generator()
            warm = warm_up(model, tokenizer, question)
            features = {"h": warm.h, "r": warm.r}
        feats = InMemoryFeatures(
            ["q"], h=np.asarray(features["h"], dtype=np.float32)[None], r=np.asarray(features["r"], dtype=np.float32)[None]
        )
        inst = Instance(
            question=Question(id="q", text=question),
            candidates=[
                Candidate(id=str(i), text=t, rank=i, embedding=emb[i]) for i, t in enumerate(texts)
            ],
        )
        scores = self.selector.score([inst], feats)[0]
        n_scored = min(len(texts), int(self.selector.layout_.k))
        if n_scored < len(texts):
            warnings.warn(
                f"{len(texts) - n_scored} of {len(texts)} chunks were not scored: the model scores the first "
                f"K={n_scored} chunks in the order given (the rest get null scores and are never selected)",
                UnscoredChunksWarning,
                stacklevel=2,
            )
        sel = selection_from_scores(inst, scores[:n_scored], k)
        keep = [j for j, s in enumerate(sel.scores) if np.isfinite(s)]  # never a -inf (unscorable) chunk
        indices = [sel.indices[j] for j in keep]
        return ChunkSelection(
            question=question,
            indices=indices,
            chunks=[texts[i] for i in indices],
            scores=[sel.scores[j] for j in keep],
            all_scores=[float(s) if i < n_scored else None for i, s in enumerate(scores[: len(texts)])],
            warm_up=warm,
            n_scored=n_scored,
        )

    def answer(self, question: str, chunks: Sequence[str], max_new_tokens: int = 32) -> tuple[str, ChunkSelection]:
        """End-to-end RAG: select one chunk, then generate from the warm-up's KV cache."""
        from chunksel.features.kv import generate_with_reuse

        sel = self.select(question, chunks, k=1)
        model, tokenizer, _ = self.generator()
        gen = generate_with_reuse(
            model, tokenizer, question, sel.chunks[0], sel.warm_up.cache, sel.warm_up.ids, max_new_tokens
        )
        return gen.text, sel
