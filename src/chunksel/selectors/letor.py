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

:func:`instance_features` is vectorised over the K candidates (numpy over one term
matrix per instance; BM25 by :func:`~.bm25_stats.bm25_rows`), so a query pays for its
features without the memo. Its values are bit for bit those of the scalar definitions
above: the same floating-point operations in the same order, ``math.log`` and ``**``
where numpy's own ``log`` and ``square`` can differ in the last bit, and exact sums
(``math.fsum``) wherever the terms form a set (a plain sum in set order would differ
between processes in its last bits, enough to move a tree's split).
``tests/unit/selectors/test_letor_vectorised.py`` holds them to the scalar version.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from itertools import chain, compress, repeat

import numpy as np

from chunksel.config import show_progress
from chunksel.selectors.bm25_stats import (
    BM25Stats,
    bm25_rows,
    corpus_stats,
    passage_text,
    resolve_corpus,
    stopwords,
    words,
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


def _fsum_rows(x: np.ndarray) -> np.ndarray:
    """Exact (``math.fsum``) sum of each row."""
    return np.array([math.fsum(r) for r in x.tolist()], dtype=np.float64).reshape(len(x))


def _squares(x: np.ndarray) -> list[float]:
    """``v ** 2`` of each value as Python computes it (libm ``pow``; numpy's ``x * x``
    differs from it in the last bit for about one value in a thousand)."""
    return list(map(pow, x.tolist(), repeat(2)))


def instance_features(inst: Instance, stats: BM25Stats, k1: float = 1.5, b: float = 0.75) -> np.ndarray:
    """(n_candidates, 12) LETOR features of one instance (see the module table)."""
    cands = inst.candidates
    n = len(cands)
    out = np.zeros((n, len(FEATURE_NAMES)))
    if not n:
        return out
    q_words = words(inst.question.text)
    d_words = [words(passage_text(c.title, c.text)) for c in cands]
    # the instance's words, the question's first: every word is an id, every passage a row
    keys = list(dict.fromkeys(chain(q_words, *d_words)))
    v = len(keys)
    local = dict(zip(keys, range(v)))
    is_term = ~np.fromiter(map(stopwords().__contains__, keys), dtype=bool, count=v)
    qid = np.array(list(map(local.__getitem__, q_words)), dtype=np.int64)
    did = np.array(list(map(local.__getitem__, chain.from_iterable(d_words))), dtype=np.int64)
    doc = np.repeat(np.arange(n), [len(w) for w in d_words])
    term = is_term[did]
    # term frequencies, sparse: each (passage, term) code once, sorted, so row-major (each
    # passage's terms together), and a dense table over the question's terms only
    codes, counts = np.unique(doc[term] * v + did[term], return_counts=True)
    rows, cols = np.divmod(codes, v)
    gid = np.full(v, -1, dtype=np.int64)
    gid[is_term] = stats.term_ids(list(compress(keys, is_term.tolist())))
    w = np.where(is_term, stats.idf_of(gid, smooth=True), 0.0)

    scores = np.array([c.score for c in cands], dtype=np.float64)
    out[:, 0] = np.where(np.isnan(scores), 0.0, scores)
    out[:, 2] = 1.0 / (np.arange(n) + 1.0)
    q_pos = qid[is_term[qid]]  # the question's terms in order, repeats kept (BM25 adds each)
    uq = np.unique(q_pos)  # the distinct question terms
    slot = np.full(v, -1, dtype=np.int64)
    slot[uq] = np.arange(len(uq))
    col_slot = slot[cols]
    on_q = col_slot >= 0
    tfq = np.zeros((n, len(uq)))  # (n, distinct question terms) term frequencies
    tfq[rows[on_q], col_slot[on_q]] = counts[on_q]
    dl = np.bincount(doc[term], minlength=n).astype(np.float64)
    out[:, 3] = bm25_rows(stats.idf_of(gid[q_pos]), tfq[:, slot[q_pos]], dl, stats.avgdl, k1, b)
    # TF-IDF cosine and the coverages over the distinct question terms; exact sums
    qc = np.bincount(q_pos, minlength=v)[uq].astype(np.float64)
    wq = w[uq]
    dot = _fsum_rows(qc * wq * tfq * wq)
    if dot.any():
        sq = _squares(counts * w[cols])
        ends = np.cumsum(np.bincount(rows, minlength=n)).tolist()
        d_norm = np.array([math.sqrt(math.fsum(sq[s:e])) for s, e in zip([0, *ends[:-1]], ends, strict=True)])
        q_norm = math.sqrt(math.fsum(_squares(qc * wq)))
        nz = dot != 0.0
        out[nz, 5] = dot[nz] / (q_norm * d_norm[nz])
    if len(uq):
        present = tfq > 0
        out[:, 6] = present.sum(axis=1) / len(uq)
        q_idf_total = math.fsum(wq.tolist())
        if q_idf_total > 0:
            out[:, 7] = _fsum_rows(np.where(present, wq, 0.0)) / q_idf_total
        q_set = {keys[i] for i in uq.tolist()}
        out[:, 9] = [len(q_set.intersection(words(c.title))) / len(uq) for c in cands]
    # word bigrams (stopwords kept): pairs of the question's m distinct words (ids below m),
    # marked per passage in an (n, m * m) table; a pair must lie within one passage
    m = int(qid.max()) + 1 if len(qid) else 0
    q_bi = np.zeros(m * m, dtype=bool)
    q_bi[qid[:-1] * m + qid[1:]] = True
    n_bi = int(q_bi.sum())
    if n_bi and len(did) > 1:
        a, z = did[:-1], did[1:]
        pair = (a < m) & (z < m) & (doc[:-1] == doc[1:])
        code = a[pair] * m + z[pair]
        hit = q_bi[code]
        seen = np.zeros((n, m * m), dtype=bool)
        seen[doc[:-1][pair][hit], code[hit]] = True
        out[:, 8] = seen.sum(axis=1) / n_bi
    out[:, 10] = [math.log1p(len(x)) for x in d_words]
    out[:, 11] = math.log1p(len(q_words))
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
#: what :func:`letor_features` did per instance: ``"hits"`` answered from the memo,
#: ``"computed"`` computed (the cost stage's test counts them; nothing times them)
MEMO_COUNTS: Counter[str] = Counter()


@contextmanager
def memo_off():
    """Neither read nor fill the memo inside the block (this context only): every
    instance's features are computed, as a query that was never seen pays for them."""
    token = MEMO_ENABLED.set(False)
    try:
        yield
    finally:
        MEMO_ENABLED.reset(token)


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
            MEMO_COUNTS["computed"] += 1
            if use_memo:
                if len(_MEMO) >= _MEMO_LIMIT:
                    _MEMO.clear()
                _MEMO[key] = got
        else:
            MEMO_COUNTS["hits"] += 1
        n = len(inst.candidates)
        feats[i, :n] = got
        mask[i, :n] = True
    return feats, mask
