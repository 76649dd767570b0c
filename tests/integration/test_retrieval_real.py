"""Real-data checks of the retrieval stack: shipped embeddings vs the real MiniLM, and
dense retrieval quality on TREC DL 2019 against the msmarco-sub corpus."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.data.corpus import CORPORA, PRECOMPUTED, iter_passages
from chunksel.retrieval.embeddings import decode_precomputed
from chunksel.retrieval.encoder import Encoder

pytestmark = [pytest.mark.data, pytest.mark.model]


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return Encoder()


@pytest.mark.parametrize("name", ["wiki-w100", "msmarco-sub"])
def test_decode_precomputed_matches_real_reencode(name, data_root, encoder):
    """Decoded shipped embeddings vs a fresh all-MiniLM-L6-v2 encoding: cosine >= 0.999."""
    emb = decode_precomputed(data_root / PRECOMPUTED[name])
    assert emb.dtype == np.float32 and emb.shape[1] == 384
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    # 8 random rows; for the big wiki file among its first 40,000 rows (7 of its 9 sources
    # occur there), so the test need not stream the whole TSV
    span = min(emb.shape[0], 40_000)
    wanted = set(np.random.default_rng(1234).choice(span, size=8, replace=False).tolist())
    rows, texts = [], []
    for n, p in enumerate(iter_passages(data_root / CORPORA[name])):
        if n in wanted:
            rows.append(n)
            texts.append((p.title + " " + p.text).strip())
        if len(rows) == len(wanted):
            break
    fresh = encoder.encode(texts, progress=False)
    cos = np.sum(fresh * emb[rows], axis=1)
    assert cos.min() >= 0.999, dict(zip(rows, cos.round(5).tolist(), strict=True))


def test_dl19_relevant_passages_are_retrieved(data_root, encoder):
    """DL19 queries over msmarco-sub: most find a passage judged >= 2 in their top 10."""
    from chunksel.retrieval.retriever import Retriever

    folder = data_root / "qa" / "msmarco" / "trec-dl"
    topics = dict(
        line.rstrip("\n").split("\t", 1)
        for line in (folder / "topics.dl19.tsv").read_text().splitlines()
    )
    relevant: dict[str, set[str]] = {}
    for line in (folder / "qrels.dl19-passage.txt").read_text().splitlines():
        qid, _, pid, grade = line.split()
        if int(grade) >= 2:
            relevant.setdefault(qid, set()).add(f"msmarco:{pid}")
    qids = sorted(q for q in relevant if q in topics)
    assert len(qids) == 43
    retriever = Retriever.from_corpus(
        "msmarco-sub", root=data_root, encoder=encoder, progress=False
    )
    out = retriever.retrieve([topics[q] for q in qids], k=10, progress=False)
    hits = [any(c.id in relevant[q] for c in cands) for q, cands in zip(qids, out, strict=True)]
    assert np.mean(hits) >= 0.8, np.mean(hits)
