"""Dense retrieval of the top-K candidate passages for each question (MiniLM + FAISS).

A question is embedded with the encoder, the index returns the ``K`` corpus rows with the
highest inner product (= cosine, all vectors being unit length), and each hit becomes a
:class:`~chunksel.types.Candidate` in rank order, carrying its corpus embedding (the
chunk embedding ``E`` of the paper's features).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import show_progress
from chunksel.data.corpus import Corpus
from chunksel.errors import ConfigError, DataError
from chunksel.retrieval.embeddings import corpus_embeddings, corpus_key
from chunksel.retrieval.encoder import Encoder
from chunksel.retrieval.index import Index, cached_index
from chunksel.types import Candidate, Question


class Retriever:
    """Top-K dense retrieval over one corpus.

    Args:
        corpus: the passages (row ``i`` of ``embeddings`` / the index is ``corpus.ids[i]``).
        embeddings: ``(N, d)`` float32 unit vectors of the passages.
        index: a FAISS :class:`Index` built over ``embeddings``.
        encoder: the question encoder (same model as the passage embeddings).
        rerank: for an approximate index (IVF-PQ), fetch the top ``max(k, rerank)`` hits
            and re-score them exactly with ``embeddings`` (``q · e``) before keeping the top
            ``k``; ``0`` (default, the paper's setting) keeps the index's PQ scores. PQ
            codes lose fine distinctions among close neighbours; re-ranking the top 100
            restores near-exact top-5 sets for a few ms of work per batch.
    """

    def __init__(
        self,
        corpus: Corpus,
        embeddings: np.ndarray,
        index: Index,
        encoder: Encoder,
        rerank: int = 0,
    ) -> None:
        if rerank < 0:
            raise ConfigError(f"rerank must be >= 0, got {rerank}")
        if len(corpus) == 0:
            raise DataError(f"corpus {corpus.name!r} is empty")
        if embeddings.ndim != 2 or embeddings.shape[0] != len(corpus):
            raise DataError(
                f"embeddings of shape {embeddings.shape} do not fit corpus {corpus.name!r} "
                f"of {len(corpus)} passages"
            )
        if index.ntotal != len(corpus):
            raise DataError(
                f"index holds {index.ntotal} vectors but corpus {corpus.name!r} has {len(corpus)}"
            )
        if index.dim != embeddings.shape[1]:
            raise DataError(
                f"index dimension {index.dim} != corpus embedding dimension {embeddings.shape[1]}"
            )
        if encoder.dim != embeddings.shape[1]:
            raise DataError(
                f"encoder {encoder.model_id} gives dimension {encoder.dim} but the corpus "
                f"embeddings have {embeddings.shape[1]}"
            )
        self.corpus = corpus
        self.embeddings = np.asarray(embeddings, dtype=np.float32)
        self.index = index
        self.encoder = encoder
        self.rerank = rerank

    @classmethod
    def from_corpus(
        cls,
        name_or_path: str | Path | Corpus,
        kind: str = "flat",
        root: str | Path | None = None,
        encoder: Encoder | None = None,
        progress: bool = True,
        use_precomputed: bool = True,
        rerank: int = 0,
        **index_settings: Any,
    ) -> Retriever:
        """Load a corpus (or take a loaded one), its embeddings and its cached index.

        Args:
            name_or_path: ``"wiki-w100"``, ``"msmarco-sub"``, a corpus TSV path, or a
                :class:`Corpus` already in memory.
            kind: ``"flat"`` (exact) or ``"ivfpq"`` (the paper's setting).
            root: data root (default ``$CHUNKSEL_DATA``).
            encoder: the encoder; default the packaged all-MiniLM-L6-v2 on CPU.
            progress: show progress bars.
            use_precomputed: use the shipped embeddings of a named corpus (checked).
            rerank: exact re-scoring depth for an approximate index (see the class doc).
            **index_settings: passed to :func:`chunksel.retrieval.index.build_index`.
        """
        corpus = (
            name_or_path
            if isinstance(name_or_path, Corpus)
            else Corpus.load(name_or_path, root=root, progress=progress)
        )
        encoder = encoder or Encoder()
        emb = corpus_embeddings(
            corpus, encoder, root=root, progress=progress, use_precomputed=use_precomputed
        )
        index = cached_index(
            emb,
            corpus_key(corpus),
            encoder.model_id,
            kind=kind,
            progress=progress,
            **index_settings,
        )
        return cls(corpus, emb, index, encoder, rerank=rerank)

    def __len__(self) -> int:
        return len(self.corpus)

    def search(
        self, query_emb: np.ndarray, k: int = 5, batch_size: int = 256, progress: bool = False
    ) -> tuple[np.ndarray, np.ndarray]:
        """Index search for already-encoded queries -> ``(scores, rows)``, each ``(B, k)``.

        Rows are -1 (score -inf) where an IVF-PQ search found fewer than ``k`` passages.
        """
        from tqdm.auto import tqdm

        self._check_k(k)
        query_emb = np.ascontiguousarray(np.atleast_2d(query_emb), dtype=np.float32)
        scores = np.empty((query_emb.shape[0], k), dtype=np.float32)
        rows = np.empty((query_emb.shape[0], k), dtype=np.int64)
        fetch = k
        if self.rerank and self.index.kind != "flat":
            fetch = min(len(self.corpus), max(k, self.rerank))
        starts = range(0, query_emb.shape[0], batch_size)
        for i in tqdm(
            starts, desc="searching", unit=" batch", disable=not show_progress(progress) or len(starts) < 4
        ):
            q = query_emb[i : i + batch_size]
            s, r = self.index.search(q, fetch)
            if fetch > k:
                s, r = self._rescore(q, r, k)
            scores[i : i + batch_size], rows[i : i + batch_size] = s, r
        return scores, rows

    def _rescore(self, q: np.ndarray, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Exact inner products of the fetched rows; keep the top ``k`` (stable on ties)."""
        valid = rows >= 0
        exact = np.einsum("bd,bkd->bk", q, self.embeddings[np.where(valid, rows, 0)])
        exact[~valid] = -np.inf
        order = np.argsort(-exact, axis=1, kind="stable")[:, :k]
        top_rows = np.take_along_axis(rows, order, axis=1)
        top_rows[~np.take_along_axis(valid, order, axis=1)] = -1
        return np.take_along_axis(exact, order, axis=1).astype(np.float32), top_rows

    def retrieve(
        self,
        questions: Sequence[Question | str],
        k: int = 5,
        batch_size: int = 256,
        progress: bool = True,
    ) -> list[list[Candidate]]:
        """The top-``k`` candidates of each question, in rank order.

        Each :class:`Candidate` has the passage ``id``, ``title``, ``text``, the inner
        product ``score``, ``rank`` 0..k-1 and ``embedding`` = its corpus embedding row
        (float32, a copy). An IVF-PQ search that reaches fewer than ``k`` passages
        returns fewer candidates for that question. A :class:`Question` given (not a
        plain string) keeps its query embedding in ``Question.embedding``.

        Raises:
            ConfigError: ``k`` < 1 or larger than the corpus.
            DataError: an empty question text.
        """
        self._check_k(k)
        if not questions:
            return []
        q_emb = self.encoder.encode_questions(questions, progress=progress)
        for q, vec in zip(questions, q_emb, strict=True):
            if isinstance(q, Question):
                q.embedding = np.array(vec, dtype=np.float32)
        scores, rows = self.search(q_emb, k, batch_size=batch_size, progress=progress)
        out: list[list[Candidate]] = []
        c = self.corpus
        for srow, rrow in zip(scores, rows, strict=True):
            cands = []
            for rank, (score, row) in enumerate(
                (s, int(r)) for s, r in zip(srow, rrow, strict=True) if r >= 0
            ):
                cands.append(
                    Candidate(
                        id=c.ids[row],
                        text=c.texts[row],
                        title=c.titles[row],
                        score=float(score),
                        rank=rank,
                        embedding=self.embeddings[row].copy(),
                    )
                )
            out.append(cands)
        return out

    def _check_k(self, k: int) -> None:
        if not 1 <= k <= len(self.corpus):
            raise ConfigError(
                f"K={k} must be between 1 and the size of corpus {self.corpus.name!r} "
                f"({len(self.corpus)} passages)"
            )

    def __repr__(self) -> str:
        return (
            f"Retriever(corpus={self.corpus.name!r}, n={len(self.corpus)}, "
            f"index={self.index.kind!r}, encoder={self.encoder.model_id!r})"
        )
