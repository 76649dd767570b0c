"""Okapi BM25 over the K candidates with term statistics of the whole passage corpus.

Scoring follows bm25s (Lù 2024) with ``method="lucene"`` (its default), after
Kamphuis et al. (ECIR 2020), "Which BM25 do you mean?":

.. math::

    \\mathrm{BM25}(q, d) = \\sum_{t \\in q} \\mathrm{idf}(t)
        \\frac{tf_{t,d}}{tf_{t,d} + k_1 (1 - b + b\\, |d| / \\mathrm{avgdl})},
    \\qquad \\mathrm{idf}(t) = \\ln\\Big(1 + \\frac{N - df_t + 0.5}{df_t + 0.5}\\Big)

(the Lucene form drops the constant ``k1 + 1`` of the numerator). ``N``, ``df_t`` and
``avgdl`` come from the whole corpus (``wiki-w100`` or ``msmarco-sub``), never from the K
candidates; ``|d|`` and ``tf`` from the candidate's own ``title + " " + text``. Query
terms are summed with their multiplicity and terms absent from the corpus vocabulary
contribute 0 (both as bm25s does), so a candidate that is a corpus passage gets exactly
the score bm25s gives it.

Tokenisation is bm25s's default: lowercase, regex ``(?u)\\b\\w\\w+\\b`` word tokens,
bm25s's English stopword list removed, **no stemming** (PyStemmer is not used).

The corpus statistics are built once per corpus file and cached as a bm25s index under
``cache_root()/bm25/<corpus checksum>/`` (``bm25s.BM25.save``/``load``) plus
``stats.json`` (``N``, ``avgdl``), and kept in memory per process.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from chunksel.config import cache_root, file_checksum, show_progress
from chunksel.errors import ConfigError, DataError, require
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.types import Instance

#: dataset name -> the passage corpus its candidates come from
DATASET_CORPUS = {
    "triviaqa": "wiki-w100",
    "nq": "wiki-w100",
    "popqa": "wiki-w100",
    "squad2": "wiki-w100",
    "hotpotqa": "wiki-w100",
    "msmarco": "msmarco-sub",
}
STATS_VERSION = 1

_STATS_MEMO: dict[str, BM25Stats] = {}
_PATH_CHECKSUM: dict[tuple[str, float, int], str] = {}


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """bm25s default tokens (lowercase, regex words, English stopwords out, no stemming)."""
    bm25s = require("bm25s", "ltr")
    if not texts:
        return []
    return bm25s.tokenize(list(texts), return_ids=False, show_progress=False)


def passage_text(title: str, text: str) -> str:
    """What BM25 indexes for a passage: ``(title + " " + text).strip()``."""
    return (title + " " + text).strip()


@dataclass
class BM25Stats:
    """Corpus term statistics: vocabulary, document frequencies, ``N`` and ``avgdl``."""

    vocab: dict[str, int]
    df: np.ndarray  # (V,) documents containing each vocabulary term
    n_docs: int
    avgdl: float

    @classmethod
    def from_texts(cls, texts: Sequence[str], progress: bool = False) -> BM25Stats:
        """Statistics of an in-memory list of passage texts (bm25s tokenisation)."""
        index, stats = _build_index(texts, progress)
        del index
        return stats

    def idf(self, term: str) -> float:
        """Lucene IDF ``ln(1 + (N - df + 0.5) / (df + 0.5))``; 0 for terms not in the corpus."""
        j = self.vocab.get(term)
        if j is None or j >= len(self.df):
            return 0.0
        df = float(self.df[j])
        return math.log(1.0 + (self.n_docs - df + 0.5) / (df + 0.5))

    def score_tokens(
        self, query: Sequence[str], doc: Sequence[str], k1: float = 1.5, b: float = 0.75
    ) -> float:
        """BM25 (Lucene variant) of one tokenised document for one tokenised query."""
        if not query:
            return 0.0
        tf = Counter(doc)
        norm = k1 * (1.0 - b + b * len(doc) / self.avgdl) if self.avgdl > 0 else k1
        total = 0.0
        for term in query:
            f = tf.get(term, 0)
            if f:
                total += self.idf(term) * f / (f + norm)
        return total

    def score_matrix(
        self,
        queries: Sequence[Sequence[str]],
        docs: Sequence[Sequence[Sequence[str]]],
        k1: float = 1.5,
        b: float = 0.75,
    ) -> np.ndarray:
        """(B, K) scores, ``docs[b]`` the tokenised candidates of query ``b``; pads 0."""
        k = max((len(d) for d in docs), default=0)
        out = np.zeros((len(queries), k))
        for i, (q, ds) in enumerate(zip(queries, docs, strict=True)):
            for j, d in enumerate(ds):
                out[i, j] = self.score_tokens(q, d, k1, b)
        return out


def _build_index(texts: Sequence[str], progress: bool):
    bm25s = require("bm25s", "ltr")
    tok = bm25s.tokenize(list(texts), return_ids=True, show_progress=progress)
    lengths = np.fromiter((len(d) for d in tok.ids), dtype=np.int64, count=len(tok.ids))
    index = bm25s.BM25(k1=1.5, b=0.75, method="lucene")
    index.index(tok, show_progress=progress)
    stats = _stats_from_index(index, n_docs=len(lengths), avgdl=float(lengths.mean()) if len(lengths) else 0.0)
    return index, stats


def _stats_from_index(index, n_docs: int, avgdl: float) -> BM25Stats:
    indptr = np.asarray(index.scores["indptr"])
    # CSC over (docs x vocab): a vocabulary column holds one entry per document containing
    # the term (the Lucene score of a present term is > 0), so its length is df.
    df = np.diff(indptr).astype(np.int64)
    return BM25Stats(vocab=dict(index.vocab_dict), df=df, n_docs=n_docs, avgdl=avgdl)


def corpus_stats(corpus: str | Path, progress: bool = True) -> BM25Stats:
    """BM25 statistics of a corpus (name or TSV path), cached on disk and in memory."""
    from chunksel.data.corpus import corpus_path

    path = corpus_path(corpus)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime, st.st_size)
    checksum = _PATH_CHECKSUM.get(key)
    if checksum is None:
        checksum = _PATH_CHECKSUM[key] = file_checksum(path)
    if checksum in _STATS_MEMO:
        return _STATS_MEMO[checksum]
    bm25s = require("bm25s", "ltr")
    folder = cache_root() / "bm25" / checksum
    stats_file = folder / "stats.json"
    stats: BM25Stats | None = None
    if stats_file.is_file():
        try:
            meta = json.loads(stats_file.read_text())
            if meta.get("version") == STATS_VERSION:
                index = bm25s.BM25.load(str(folder), show_progress=False, verbosity=0)
                stats = _stats_from_index(index, int(meta["n_docs"]), float(meta["avgdl"]))
        except (OSError, ValueError, KeyError):
            stats = None  # a broken cache is rebuilt below
    if stats is None:
        from tqdm.auto import tqdm

        from chunksel.data.corpus import iter_passages

        texts = [
            passage_text(p.title, p.text)
            for p in tqdm(iter_passages(path), desc=f"bm25: reading {path.name}", unit=" psg",
                          disable=not show_progress(progress), mininterval=1.0)
        ]
        if not texts:
            raise DataError(f"corpus {path} has no passages")
        index, stats = _build_index(texts, progress)
        folder.mkdir(parents=True, exist_ok=True)
        index.save(str(folder), show_progress=False)
        meta = {"version": STATS_VERSION, "n_docs": stats.n_docs, "avgdl": stats.avgdl,
                "corpus": str(corpus), "tokenizer": "bm25s default, english stopwords, no stemming"}
        tmp = folder / "stats.json.tmp"
        tmp.write_text(json.dumps(meta, indent=2))
        tmp.replace(stats_file)  # written last: its presence marks a complete cache
    _STATS_MEMO[checksum] = stats
    return stats


def resolve_corpus(corpus: str | None, inst: Instance) -> str:
    """The corpus of an instance: the explicit setting, else its dataset's corpus."""
    if corpus:
        return str(corpus)
    ds = inst.question.dataset or inst.id.split(":", 1)[0]
    if ds not in DATASET_CORPUS:
        raise ConfigError(
            f"no passage corpus known for dataset {ds!r} (question {inst.id!r}): "
            f"set corpus= to a corpus name or TSV path"
        )
    return DATASET_CORPUS[ds]


def bm25_matrix(
    batch: Sequence[Instance], corpus: str | None, k1: float, b: float, progress: bool = True
) -> np.ndarray:
    """(B, k) BM25 scores of each instance's candidates (title + text), corpus statistics."""
    k = max(len(i.candidates) for i in batch)
    out = np.zeros((len(batch), k))
    groups: dict[str, list[int]] = {}
    for i, inst in enumerate(batch):
        groups.setdefault(resolve_corpus(corpus, inst), []).append(i)
    for name, rows in groups.items():
        stats = corpus_stats(name, progress=progress)
        queries = tokenize([batch[i].question.text for i in rows])
        for i, q in zip(rows, queries, strict=True):
            docs = tokenize([passage_text(c.title, c.text) for c in batch[i].candidates])
            for j, d in enumerate(docs):
                out[i, j] = stats.score_tokens(q, d, k1, b)
    return out


class BM25Selector(Selector):
    """Rank the candidates by Okapi BM25 (bm25s Lucene variant) with corpus statistics.

    Args:
        corpus: a corpus name (``"wiki-w100"``, ``"msmarco-sub"``), a corpus TSV path, or
            None to take each instance's corpus from its dataset (:data:`DATASET_CORPUS`).
        k1: term-frequency saturation (default 1.5).
        b: length normalisation (default 0.75).
        progress: show a progress bar while the corpus statistics are built (once).
    """

    name = "bm25"
    display_name = "BM25"
    family = "lexical"
    role = "baseline"
    requires_fit = False
    query_cost = "bm25"

    def __init__(
        self, corpus: str | None = None, k1: float = 1.5, b: float = 0.75, progress: bool = True
    ) -> None:
        self.corpus = corpus
        self.k1 = k1
        self.b = b
        self.progress = progress

    def n_parameters(self) -> int:
        """Trainable parameters: none."""
        return 0

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        return bm25_matrix(batch, self.corpus, self.k1, self.b, self.progress)
