"""BM25 corpus statistics (document frequencies, lengths) shared by the lexical selectors:
tokenisation, per-corpus statistics cached on disk, the bundle a saved selector carries,
and the corpus of an instance. No selector class here (so the base class and its
provenance can use it without an import cycle); :mod:`.bm25` holds the BM25 selector.

Query-time scoring is vectorised over the K candidates (:func:`bm25_rows`,
:meth:`BM25Stats.score_docs`): the same tokens as bm25s's tokenizer (:func:`words`,
:func:`terms`) and the same floating-point operations, in the same order, as the scalar
:meth:`BM25Stats.score_tokens`, so the scores are bit for bit the same.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import repeat
from pathlib import Path

import numpy as np

from chunksel.config import cache_root, file_checksum, show_progress
from chunksel.data.datasets import DATASETS
from chunksel.errors import ConfigError, DataError, require
from chunksel.types import Instance

#: each dataset's statistics corpus (the dataset registry's)
DATASET_CORPUS = {n: s.statistics_corpus for n, s in DATASETS.items() if s.statistics_corpus}
STATS_VERSION = 1
#: prefix of the corpus names under which saved statistics are registered
BUNDLED = "bundled:"

_STATS_MEMO: dict[str, BM25Stats] = {}
_PATH_CHECKSUM: dict[tuple[str, float, int], str] = {}
#: "bundled:<checksum>" -> statistics read from a saved selector
_REGISTERED: dict[str, BM25Stats] = {}


#: bm25s's default token pattern, ``(?u)\b\w\w+\b`` (scikit-learn's), without its word
#: boundaries: a greedy run of word characters ends where ``\b`` would, so ``findall``
#: gives the same words, a quarter faster
_WORD = re.compile(r"\w\w+")


def tokenize(texts: Sequence[str]) -> list[list[str]]:
    """bm25s default tokens (lowercase, regex words, English stopwords out, no stemming)."""
    bm25s = require("bm25s", "ltr")
    if not texts:
        return []
    return bm25s.tokenize(list(texts), return_ids=False, show_progress=False)


def words(text: str) -> list[str]:
    """Lowercase regex words of ``text``, stopwords kept (bm25s's pattern)."""
    return _WORD.findall(text.lower())


@functools.cache
def stopwords() -> frozenset[str]:
    """bm25s's English stopword list."""
    require("bm25s", "ltr")
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def terms(tokens: Sequence[str]) -> list[str]:
    """``tokens`` without bm25s's English stopwords: ``terms(words(t))`` is
    ``tokenize([t])[0]`` without the per-call set-up of bm25s's tokenizer."""
    stop = stopwords()
    return [w for w in tokens if w not in stop]


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

    @functools.cached_property
    def _idf_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """Lucene and smoothed idf by vocabulary id, one slot past the end for a term
        outside the vocabulary (id -1). Each value is ``math.log`` of the scalar formula,
        computed once per distinct document frequency (numpy's ``log`` may differ from it
        in the last bit)."""
        size = max(len(self.df), max(self.vocab.values(), default=-1) + 1) + 1
        df = np.zeros(size, dtype=np.int64)
        df[: len(self.df)] = self.df
        known = np.zeros(size, dtype=bool)
        known[: len(self.df)] = True
        uniq, inv = np.unique(df, return_inverse=True)
        n = self.n_docs
        lucene = np.array([math.log(1.0 + (n - float(d) + 0.5) / (float(d) + 0.5)) for d in uniq])[inv]
        smooth = np.array([math.log((n + 1.0) / (float(d) + 1.0)) + 1.0 for d in uniq])[inv]
        lucene[~known] = 0.0
        smooth[~known] = math.log((n + 1.0) / 1.0) + 1.0
        return lucene, smooth

    def term_ids(self, tokens: Sequence[str]) -> np.ndarray:
        """Vocabulary ids of ``tokens`` (-1 outside the vocabulary), to index :meth:`idf_of`."""
        return np.fromiter(map(self.vocab.get, tokens, repeat(-1)), dtype=np.int64, count=len(tokens))

    def idf_of(self, ids: np.ndarray, smooth: bool = False) -> np.ndarray:
        """Per id of :meth:`term_ids`: the Lucene idf (:meth:`idf`), or with ``smooth`` the
        TF-IDF idf ``ln((N + 1) / (df + 1)) + 1`` (scikit-learn's smooth idf); both the
        scalar formulas' exact values."""
        return self._idf_tables[1 if smooth else 0][ids]

    def score_docs(self, query: Sequence[str], docs: Sequence[Sequence[str]], k1: float = 1.5,
                   b: float = 0.75) -> np.ndarray:
        """(len(docs),) :meth:`score_tokens` of each document, vectorised over them."""
        uq = list(dict.fromkeys(query))
        counts = [Counter(d) for d in docs]
        tf = np.array([[c.get(t, 0) for t in uq] for c in counts], dtype=np.float64).reshape(len(docs), len(uq))
        pos = [uq.index(t) for t in query]
        dl = np.array([len(d) for d in docs], dtype=np.float64)
        return bm25_rows(self.idf_of(self.term_ids(uq))[pos], tf[:, pos], dl, self.avgdl, k1, b)

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
            out[i, : len(ds)] = self.score_docs(q, ds, k1, b)
        return out


def bm25_rows(idf: np.ndarray, tf: np.ndarray, dl: np.ndarray, avgdl: float, k1: float,
              b: float) -> np.ndarray:
    """BM25 (Lucene) of n documents from each query position's idf ``(L,)``, its term
    frequency in each document ``(n, L)`` and the documents' lengths ``(n,)``.

    The terms are added in query order (``cumsum`` is sequential), each as
    ``idf * tf / (tf + norm)``: the operations of :meth:`BM25Stats.score_tokens`, so
    the result is bit for bit the same."""
    n = len(dl)
    if tf.shape[1] == 0:
        return np.zeros(n)
    norm = k1 * (1.0 - b + b * dl / avgdl) if avgdl > 0 else np.full(n, k1, dtype=np.float64)
    part = np.divide(idf * tf, tf + norm[:, None], out=np.zeros(tf.shape), where=tf > 0)
    return np.cumsum(part, axis=1)[:, -1]


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


def corpus_checksum(corpus: str | Path) -> str:
    """The checksum that keys a corpus's statistics (its file's, memoised per process)."""
    from chunksel.data.corpus import corpus_path

    if str(corpus).startswith(BUNDLED):
        return str(corpus)[len(BUNDLED):]
    path = corpus_path(corpus)
    st = path.stat()
    key = (str(path.resolve()), st.st_mtime, st.st_size)
    checksum = _PATH_CHECKSUM.get(key)
    if checksum is None:
        checksum = _PATH_CHECKSUM[key] = file_checksum(path)
    return checksum


def corpus_stats(corpus: str | Path, progress: bool = True) -> BM25Stats:
    """BM25 statistics of a corpus (name, TSV path, or ``"bundled:<checksum>"`` for the
    statistics of a loaded selector), cached on disk and in memory."""
    from chunksel.data.corpus import corpus_path

    if str(corpus).startswith(BUNDLED):
        if str(corpus) not in _REGISTERED:
            raise DataError(
                f"corpus {str(corpus)!r} names the statistics saved with a selector, but none are "
                "loaded in this process: load the selector with ChunkSelector.load (or use_saved_corpus)"
            )
        return _REGISTERED[str(corpus)]
    path = corpus_path(corpus)
    checksum = corpus_checksum(path)
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


def save_stats(stats: BM25Stats, file: str | Path) -> None:
    """Write statistics as one compressed ``.npz``: the terms (UTF-8, one per line) and
    their ids, ``df`` (int32, by id), ``n_docs`` and ``avgdl``."""
    terms = sorted(stats.vocab, key=stats.vocab.__getitem__)
    with open(file, "wb") as fh:
        np.savez_compressed(
            fh, terms=np.frombuffer("\n".join(terms).encode("utf-8"), dtype=np.uint8),
            ids=np.asarray([stats.vocab[t] for t in terms], dtype=np.int64),
            df=np.asarray(stats.df, dtype=np.int32),
            n_docs=np.int64(stats.n_docs), avgdl=np.float64(stats.avgdl),
        )


def load_stats(file: str | Path) -> BM25Stats:
    """Read what :func:`save_stats` wrote (a damaged file is a :class:`DataError`)."""
    try:
        with np.load(file) as z:
            raw = z["terms"].tobytes().decode("utf-8")
            ids = np.asarray(z["ids"], dtype=np.int64)
            df = np.asarray(z["df"], dtype=np.int64)
            n_docs, avgdl = int(z["n_docs"]), float(z["avgdl"])
    except (OSError, KeyError, ValueError, EOFError) as err:
        raise DataError(f"corrupt corpus statistics {file}: {err}") from None
    terms = raw.split("\n") if raw else []
    if len(terms) != len(ids):
        raise DataError(f"corrupt corpus statistics {file}: {len(terms)} terms but {len(ids)} ids")
    return BM25Stats(vocab=dict(zip(terms, ids.tolist(), strict=True)), df=df, n_docs=n_docs, avgdl=avgdl)


def bundle_corpus_stats(corpora: dict[str, str], folder: str | Path, progress: bool = False) -> dict[str, dict]:
    """Write the statistics of every corpus in ``corpora`` (``{dataset: corpus}``) under
    ``folder/corpus_stats/``; returns ``{corpus: {"file", "checksum", "n_docs", "avgdl",
    "n_terms"}}`` for the saved config."""
    out: dict[str, dict] = {}
    for name in sorted(set(corpora.values())):
        stats = corpus_stats(name, progress=progress)
        checksum = corpus_checksum(name)
        rel = f"corpus_stats/{checksum}.npz"
        (Path(folder) / "corpus_stats").mkdir(parents=True, exist_ok=True)
        save_stats(stats, Path(folder) / rel)
        out[name] = {"file": rel, "checksum": checksum, "n_docs": stats.n_docs,
                     "avgdl": stats.avgdl, "n_terms": len(stats.vocab)}
    return out


def use_saved_corpus(selector, path: str | Path, corpus: str | Path | None = None) -> str | None:
    """Point a loaded selector's ``corpus`` setting at the statistics to score new chunks
    with; returns the corpus it will use (None if it reads no corpus statistics).

    ``corpus`` (a name or TSV path) is the user's own corpus and wins. Otherwise the
    statistics saved with the selector (``corpus_stats/``) are registered as
    ``"bundled:<checksum>"``; a save without them falls back to the corpus it names
    (found in the cache or the data root), or to its ``corpus`` setting.

    Raises:
        ConfigError: it was trained on several corpora, or on none that is known.
    """
    if not hasattr(selector, "corpus"):
        return None
    if corpus is not None:
        selector.corpus = str(corpus)
        return selector.corpus
    prov = getattr(selector, "provenance_", None) or {}
    names = sorted(set((prov.get("corpora") or {}).values()))
    bundles = prov.get("corpus_stats") or {}
    if len(names) > 1:
        raise ConfigError(
            f"the {selector.name} selector was trained with the statistics of several corpora "
            f"({', '.join(names)}): choose one with corpus="
        )
    if names:
        entry = bundles.get(names[0])
        if entry:
            key = BUNDLED + str(entry["checksum"])
            if key not in _REGISTERED:
                _REGISTERED[key] = load_stats(Path(path) / entry["file"])
            selector.corpus = key
        else:
            selector.corpus = names[0]
        return selector.corpus
    if getattr(selector, "corpus", None):
        return selector.corpus
    raise ConfigError(
        f"the {selector.name} selector reads BM25 corpus statistics, but its save names no corpus: "
        "pass corpus= (a corpus name or a passage TSV/JSONL file)"
    )


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
        for i in rows:
            cands = batch[i].candidates
            docs = [terms(words(passage_text(c.title, c.text))) for c in cands]
            out[i, : len(cands)] = stats.score_docs(terms(words(batch[i].question.text)), docs, k1, b)
    return out
