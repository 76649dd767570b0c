"""BM25 candidate lists: the top-K passages of a corpus for each question by BM25 (Lucene,
k1 = 1.5, b = 0.75, the project's tokenisation), each candidate carrying the corpus's
MiniLM embedding row, as the dense retriever's candidates do.

:func:`bm25_top_k` finds the top of the ranking with a bm25s index of the corpus
(:func:`bm25s_index`, saved under :func:`bm25s_index_dir` and kept per process), then
re-scores every document tied with the last one kept (float32 ranking, relative
tolerance 1e-5) with :meth:`BM25Stats.score_docs`, so a candidate's ``score`` is exactly
what the BM25 selector gives it (:func:`~chunksel.selectors.bm25_stats.bm25_matrix` with
the same corpus); ties go to the lower corpus row. A document sharing no term with the
question is never a candidate, so a list may be shorter than K, or empty.

:class:`BM25Retriever` wraps it with the dense :class:`~chunksel.retrieval.retriever.Retriever`'s
interface (``.corpus``, ``retrieve(questions, k)``, question embeddings set), for the build
stage's ``index="bm25"``; the zero-shot collections (:mod:`chunksel.study.zeroshot_data`)
call :func:`bm25_top_k` directly.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import cache_root, show_progress
from chunksel.errors import ConfigError, DataError, require
from chunksel.types import Candidate, Question

BM25_K1, BM25_B = 1.5, 0.75
#: corpus checksum -> bm25s index, per process
_BM25S: dict[str, Any] = {}


def bm25s_index_dir(checksum: str) -> Path:
    """``cache_root()/zeroshot/bm25/<checksum>/``: where the bm25s index of a corpus is
    saved (the folder the zero-shot collections first wrote it to; kept, so their caches
    stay valid)."""
    return cache_root() / "zeroshot" / "bm25" / checksum


def bm25s_index(corpus: Any, checksum: str, progress: bool = True) -> Any:
    """A bm25s Lucene index (k1 1.5, b 0.75, bm25s's default tokens: the statistics' own) of
    ``corpus`` (a :class:`~chunksel.data.corpus.Corpus`), saved under
    :func:`bm25s_index_dir` of ``checksum`` (its file's) and kept per process."""
    if checksum in _BM25S:
        return _BM25S[checksum]
    from chunksel.selectors.bm25_stats import passage_text

    bm25s = require("bm25s", "ltr")
    folder = bm25s_index_dir(checksum)
    stats_folder = cache_root() / "bm25" / checksum  # corpus_stats saves this very index there
    if (stats_folder / "stats.json").is_file():
        index = bm25s.BM25.load(str(stats_folder), show_progress=False, verbosity=0)
    elif (folder / "done").is_file():
        index = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
    else:
        texts = [passage_text(t, x) for t, x in zip(corpus.titles, corpus.texts, strict=True)]
        tok = bm25s.tokenize(texts, return_ids=True, show_progress=show_progress(progress))
        index = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
        index.index(tok, show_progress=show_progress(progress))
        folder.mkdir(parents=True, exist_ok=True)
        index.save(str(folder), show_progress=False)
        (folder / "done").write_text(f"{len(texts)}\n")  # written last: marks a complete index
    _BM25S[checksum] = index
    return index


def bm25_top_k(questions: Sequence[Question | str], corpus: Any, tsv: str | Path, embeddings: np.ndarray, k: int,
               progress: bool = True, exclude: Sequence[str | None] | None = None) -> list[list[Candidate]]:
    """The top-``k`` BM25 candidates of each question over ``corpus``, best first.

    Args:
        questions: the questions (or their texts).
        corpus: the passages (a :class:`~chunksel.data.corpus.Corpus`).
        tsv: the corpus file (a name or path :func:`corpus_stats` takes): its statistics
            score the candidates, its checksum keys the bm25s index.
        embeddings: ``(N, d)`` corpus embeddings, row ``i`` of passage ``corpus.ids[i]``;
            each candidate carries a float32 copy of its row.
        k: list length (a list is shorter where fewer documents share a term with the question).
        progress: show a progress bar (and the index build's, the first time).
        exclude: per question, a corpus id never to return (e.g. BEIR's query argument), or None.

    Each :class:`Candidate` has ``id``, ``title``, ``text``, ``score`` (exact BM25, > 0),
    ``rank`` 0..n-1 and ``embedding``.
    """
    from tqdm.auto import tqdm

    from chunksel.selectors.bm25_stats import (
        corpus_checksum,
        corpus_stats,
        passage_text,
        terms,
        words,
    )

    if not isinstance(k, int) or not 1 <= k <= len(corpus):
        raise ConfigError(f"K={k!r} must be between 1 and the size of corpus {corpus.name!r} ({len(corpus)} passages)")
    if exclude is not None and len(exclude) != len(questions):
        raise ConfigError(f"exclude has {len(exclude)} entries for {len(questions)} questions")
    if embeddings.shape[0] != len(corpus):
        raise DataError(f"embeddings of shape {embeddings.shape} do not fit corpus {corpus.name!r} "
                        f"of {len(corpus)} passages")
    stats = corpus_stats(str(tsv), progress=progress)
    checksum = corpus_checksum(str(tsv))
    index = bm25s_index(corpus, checksum, progress)
    if int(index.scores["num_docs"]) != len(corpus) or stats.n_docs != len(corpus):
        raise DataError(f"the BM25 index of corpus {corpus.name!r} has {index.scores['num_docs']} documents, "
                        f"its statistics {stats.n_docs}, the corpus {len(corpus)}: delete "
                        f"{bm25s_index_dir(checksum)} to rebuild it")
    tokens: dict[int, list[str]] = {}
    out = []
    for i, q in enumerate(tqdm(questions, desc=f"bm25 {corpus.name}", unit=" q", disable=not show_progress(progress))):
        query = terms(words(q.text if isinstance(q, Question) else q))
        ids = index.get_tokens_ids(query)
        if not ids:
            out.append([])
            continue
        s32 = np.asarray(index.get_scores_from_ids(ids), dtype=np.float64)
        own = corpus.row_of.get(exclude[i]) if exclude is not None and exclude[i] is not None else None
        if own is not None:
            s32[own] = 0.0
        fetch = min(len(s32), k + 10)
        cut = np.partition(s32, -fetch)[-fetch]
        rows = np.flatnonzero((s32 > 0) & (s32 >= cut * (1 - 1e-5)))
        for r in rows:
            if r not in tokens:
                tokens[r] = terms(words(passage_text(corpus.titles[r], corpus.texts[r])))
        exact = stats.score_docs(query, [tokens[r] for r in rows], BM25_K1, BM25_B)
        keep = [(float(exact[j]), int(rows[j])) for j in np.lexsort((rows, -exact)) if exact[j] > 0][:k]
        out.append([Candidate(id=corpus.ids[r], text=corpus.texts[r], title=corpus.titles[r], score=s, rank=rank,
                              embedding=np.array(embeddings[r], dtype=np.float32))
                    for rank, (s, r) in enumerate(keep)])
    return out


class BM25Retriever:
    """Top-K BM25 over one corpus with the dense retriever's interface: ``corpus``,
    ``retrieve(questions, k)`` (candidates carrying the corpus embeddings; a
    :class:`Question` given gets its ``encoder`` embedding in ``Question.embedding``).

    Args:
        corpus: the passages.
        tsv: the corpus file (name or path) of the BM25 statistics and the index key.
        embeddings: ``(N, d)`` corpus embeddings (the candidates' ``embedding``).
        encoder: the question encoder (same model as ``embeddings``); None: questions keep
            the embedding they have.
    """

    def __init__(self, corpus: Any, tsv: str | Path, embeddings: np.ndarray, encoder: Any = None) -> None:
        if len(corpus) == 0:
            raise DataError(f"corpus {corpus.name!r} is empty")
        self.corpus = corpus
        self.tsv = str(tsv)
        self.embeddings = embeddings
        self.encoder = encoder

    @classmethod
    def from_corpus(cls, name_or_path: str | Path, root: str | Path | None = None, encoder: Any = None,
                    progress: bool = True, use_precomputed: bool = True) -> BM25Retriever:
        """Load a corpus (``wiki-w100``, ``msmarco-sub`` or a corpus TSV path) and its MiniLM
        embeddings (the shipped precomputed ones of a named corpus, else encoded and cached),
        as :meth:`Retriever.from_corpus <chunksel.retrieval.retriever.Retriever.from_corpus>` does."""
        from chunksel.data.corpus import Corpus, corpus_path
        from chunksel.retrieval.embeddings import corpus_embeddings
        from chunksel.retrieval.encoder import Encoder

        corpus = Corpus.load(name_or_path, root=root, progress=progress)
        encoder = encoder or Encoder()
        emb = corpus_embeddings(corpus, encoder, root=root, progress=progress, use_precomputed=use_precomputed)
        return cls(corpus, corpus_path(name_or_path, root), emb, encoder)

    def retrieve(self, questions: Sequence[Question | str], k: int = 5,
                 progress: bool = True) -> list[list[Candidate]]:
        """The top-``k`` BM25 candidates of each question (:func:`bm25_top_k`), in rank order."""
        out = bm25_top_k(questions, self.corpus, self.tsv, self.embeddings, k, progress=progress)
        todo = [q for q in questions if isinstance(q, Question)]
        if self.encoder is not None and todo:
            vecs = self.encoder.encode_questions(todo, progress=progress)
            for q, v in zip(todo, vecs, strict=True):
                q.embedding = np.asarray(v, dtype=np.float32)
        return out

    def __repr__(self) -> str:
        return f"BM25Retriever(corpus={self.corpus.name!r}, n={len(self.corpus)}, k1={BM25_K1}, b={BM25_B})"


def make_retriever(corpus: str | Path, index: str, root: str | Path | None = None, progress: bool = True) -> Any:
    """The retriever of ``index``: :class:`BM25Retriever` for ``bm25``, else the dense
    :class:`~chunksel.retrieval.retriever.Retriever` with a FAISS ``flat`` / ``ivfpq`` index."""
    if index == "bm25":
        return BM25Retriever.from_corpus(corpus, root=root, progress=progress)
    from chunksel.retrieval.retriever import Retriever

    return Retriever.from_corpus(corpus, kind=index, root=root, progress=progress)


__all__ = ["BM25_B", "BM25_K1", "BM25Retriever", "bm25_top_k", "bm25s_index", "bm25s_index_dir", "make_retriever"]
