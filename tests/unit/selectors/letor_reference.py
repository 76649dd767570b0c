"""The scalar LETOR features as they were before vectorisation (commit 2bdd2ba of
``chunksel.selectors.letor.instance_features``, with BM25 by
``BM25Stats.score_tokens`` and bm25s's own tokenizer), kept as the reference the
vectorised features are held to, bit for bit (``test_letor_vectorised.py``)."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Sequence

import numpy as np

from chunksel.selectors.bm25_stats import BM25Stats, passage_text, tokenize
from chunksel.selectors.letor import FEATURE_NAMES
from chunksel.types import Instance

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



def bm25_reference(inst: Instance, stats: BM25Stats, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """BM25 of each candidate as ``bm25_matrix`` computed it before vectorisation."""
    q = tokenize([inst.question.text])[0]
    docs = tokenize([passage_text(c.title, c.text) for c in inst.candidates])
    return np.array([stats.score_tokens(q, d, k1, b) for d in docs])
