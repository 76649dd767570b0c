"""LETOR-style hand-crafted query-passage features for the learning-to-rank baselines.

Built from the question text and each candidate's title/text only: never from labels
or reference answers (no answer-type hints: answers are unknown at test time). Twelve
features per candidate (:data:`FEATURE_NAMES`), in the spirit of the LETOR 3.0/4.0
feature sets (Qin et al. 2010):

====  ====================  ==============================================================
 #    name                  definition
====  ====================  ==============================================================
 0    retrieval_score       the retriever's score (NaN -> 0)
 1    retrieval_gap         retrieval score minus the instance's best (NaN -> 0)
 2    reciprocal_rank       1 / (retrieval rank + 1)
 3    bm25                  BM25 (Lucene variant, corpus statistics; :mod:`.bm25`)
 4    bm25_gap              BM25 minus the instance's best BM25
 5    tfidf_cosine          cosine of raw-tf x idf vectors, idf = ln((N+1)/(df+1)) + 1
                            from the corpus (scikit-learn's smooth idf), bm25s tokens
 6    query_coverage        share of the question's distinct terms found in the passage
 7    idf_coverage          the same share weighted by corpus idf
 8    bigram_overlap        share of the question's word bigrams (stopwords kept) found
                            in the passage
 9    title_overlap         share of the question's distinct terms found in the title
10    log_passage_len       ln(1 + word tokens of title + text)
11    log_question_len      ln(1 + word tokens of the question)
====  ====================  ==============================================================

"Terms" are bm25s tokens (lowercase, English stopwords removed, no stemming); "word
tokens" are the same regex words with stopwords kept.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence
from contextvars import ContextVar

import numpy as np

from chunksel.config import show_progress
from chunksel.selectors.bm25_stats import (
    BM25Stats,
    corpus_stats,
    passage_text,
    resolve_corpus,
    tokenize,
)
from chunksel.types import Instance

FEATURE_NAMES = (
    "retrieval_score",
    "retrieval_gap",
    "reciprocal_rank",
    "bm25",
    "bm25_gap",
    "tfidf_cosine",
    "query_coverage",
    "idf_coverage",
    "bigram_overlap",
    "title_overlap",
    "log_passage_len",
    "log_question_len",
)
_WORD = re.compile(r"(?u)\b\w\w+\b")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def _bigrams(words: Sequence[str]) -> set[tuple[str, str]]:
    return set(zip(words, words[1:], strict=False))


def _smooth_idf(stats: BM25Stats, term: str) -> float:
    j = stats.vocab.get(term)
    df = float(stats.df[j]) if j is not None and j < len(stats.df) else 0.0
    return math.log((stats.n_docs + 1.0) / (df + 1.0)) + 1.0


def _tfidf_cosine(stats: BM25Stats, q: Counter, d: Counter, idf: dict[str, float]) -> float:
    for t in d:
        if t not in idf:
            idf[t] = _smooth_idf(stats, t)
    dot = math.fsum(q[t] * idf[t] * d[t] * idf[t] for t in q if t in d)
    if dot == 0.0:
        return 0.0
    nq = math.sqrt(math.fsum((v * idf[t]) ** 2 for t, v in q.items()))
    nd = math.sqrt(math.fsum((v * idf[t]) ** 2 for t, v in d.items()))
    return dot / (nq * nd)


def instance_features(inst: Instance, stats: BM25Stats, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """(n_candidates, 12) LETOR features of one instance (see the module table)."""
    n = len(inst.candidates)
    out = np.zeros((n, len(FEATURE_NAMES)))
    q_terms = tokenize([inst.question.text])[0]
    q_count = Counter(q_terms)
    q_set = set(q_terms)
    q_words = _words(inst.question.text)
    q_bi = _bigrams(q_words)
    idf: dict[str, float] = {t: _smooth_idf(stats, t) for t in q_set}
    # math.fsum: sets iterate in a per-process hash order, and a plain float sum would
    # then differ in its last bits from run to run (enough to move a tree's split)
    q_idf_total = math.fsum(idf[t] for t in q_set)
    docs = tokenize([passage_text(c.title, c.text) for c in inst.candidates])
    titles = tokenize([c.title for c in inst.candidates])
    for j, (cand, d_terms, t_terms) in enumerate(zip(inst.candidates, docs, titles, strict=True)):
        d_set = set(d_terms)
        d_words = _words(passage_text(cand.title, cand.text))
        covered = q_set & d_set
        out[j, 0] = 0.0 if math.isnan(cand.score) else cand.score
        out[j, 2] = 1.0 / (j + 1.0)
        out[j, 3] = stats.score_tokens(q_terms, d_terms, k1, b)
        out[j, 5] = _tfidf_cosine(stats, q_count, Counter(d_terms), idf)
        out[j, 6] = len(covered) / len(q_set) if q_set else 0.0
        out[j, 7] = math.fsum(idf[t] for t in covered) / q_idf_total if q_idf_total > 0 else 0.0
        out[j, 8] = len(q_bi & _bigrams(d_words)) / len(q_bi) if q_bi else 0.0
        out[j, 9] = len(q_set & set(t_terms)) / len(q_set) if q_set else 0.0
        out[j, 10] = math.log1p(len(d_words))
        out[j, 11] = math.log1p(len(q_words))
    if n:
        out[:, 1] = out[:, 0] - out[:, 0].max()
        out[:, 4] = out[:, 3] - out[:, 3].max()
    return out


#: in-process memo of :func:`instance_features` (several selectors and seeds of one run
#: read the same instances' features): key -> (n_candidates, 12) array
_MEMO: dict[tuple, np.ndarray] = {}
_MEMO_LIMIT = 200_000
#: False skips the memo in the current context (thread / task): the application path
#: sets it, since a request's chunks are rarely scored twice and the memo would keep
#: every request's texts
MEMO_ENABLED: ContextVar[bool] = ContextVar("chunksel_letor_memo", default=True)


def _memo_key(inst: Instance, corpus: str, k1: float, b: float) -> tuple:
    return (
        corpus, k1, b, inst.id, inst.question.text,
        tuple((c.id, c.title, c.text, c.score) for c in inst.candidates),
    )


def letor_features(
    batch: Sequence[Instance], corpus: str | None = None, k1: float = 1.5, b: float = 0.75,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """LETOR features of a batch: ``(B, K, 12)`` array (0 at padded slots) and the
    ``(B, K)`` real-candidate mask. ``corpus`` as in :class:`~.bm25.BM25Selector`.

    Each instance's features are memoised in-process by its question, candidates and
    corpus, so selectors and seeds that score the same instances compute them once."""
    from tqdm.auto import tqdm

    k = max((len(i.candidates) for i in batch), default=0)
    feats = np.zeros((len(batch), k, len(FEATURE_NAMES)))
    mask = np.zeros((len(batch), k), dtype=bool)
    rows = batch if len(batch) < 64 or not show_progress(progress) else tqdm(  # no bar object per request
        batch, desc="letor features", mininterval=1.0)
    for i, inst in enumerate(rows):
        name = resolve_corpus(corpus, inst)
        use_memo = MEMO_ENABLED.get()
        key = _memo_key(inst, name, k1, b) if use_memo else None
        got = _MEMO.get(key) if use_memo else None
        if got is None:
            got = instance_features(inst, corpus_stats(name, progress=progress), k1, b)
            if use_memo:
                if len(_MEMO) >= _MEMO_LIMIT:
                    _MEMO.clear()
                _MEMO[key] = got
        n = len(inst.candidates)
        feats[i, :n] = got
        mask[i, :n] = True
    return feats, mask
