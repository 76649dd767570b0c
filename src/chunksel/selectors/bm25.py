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

A saved selector that reads corpus statistics carries them: ``Selector.save`` writes
each training corpus's statistics as ``corpus_stats/<checksum>.npz`` (vocabulary,
document frequencies, ``N``, ``avgdl``; :func:`bundle_corpus_stats`) and
:func:`use_saved_corpus` points a loaded selector at them (registered in this process as
the corpus ``"bundled:<checksum>"``), so it scores a user's chunks with the statistics it
was trained with, without the corpus file. ``corpus=`` there picks the user's own corpus
instead.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.bm25_stats import (  # noqa: F401  (re-exported: the statistics' old home)
    BUNDLED,
    DATASET_CORPUS,
    STATS_VERSION,
    BM25Stats,
    bm25_matrix,
    bundle_corpus_stats,
    corpus_checksum,
    corpus_stats,
    load_stats,
    passage_text,
    resolve_corpus,
    save_stats,
    tokenize,
    use_saved_corpus,
)
from chunksel.types import Instance


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
