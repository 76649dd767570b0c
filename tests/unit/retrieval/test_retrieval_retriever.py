from __future__ import annotations

import numpy as np
import pytest

from chunksel.data.corpus import Corpus
from chunksel.errors import ConfigError, DataError
from chunksel.retrieval.index import build_index
from chunksel.retrieval.retriever import Retriever
from chunksel.types import Candidate, Question

pytestmark = [pytest.mark.data, pytest.mark.model]


@pytest.fixture(scope="module")
def retriever(msmarco_2k, msmarco_emb, encoder):
    emb = msmarco_emb[:2000]
    return Retriever(msmarco_2k, emb, build_index(emb, progress=False), encoder)


def test_retrieve_matches_exact_inner_product(retriever, encoder):
    questions = [Question("q1", "what is the capital of france"), Question("q2", "symptoms of flu")]
    out = retriever.retrieve(questions, k=5, progress=False)
    q = encoder.encode_questions(questions, progress=False)
    sims = q @ retriever.embeddings.T
    for b, cands in enumerate(out):
        assert [c.rank for c in cands] == [0, 1, 2, 3, 4]
        assert all(isinstance(c, Candidate) for c in cands)
        rows = [retriever.corpus.row_of[c.id] for c in cands]
        assert rows == list(np.argsort(-sims[b])[:5])
        np.testing.assert_allclose([c.score for c in cands], sims[b, rows], atol=1e-5)
        for c, r in zip(cands, rows, strict=True):
            assert c.text == retriever.corpus.texts[r] and c.title == retriever.corpus.titles[r]
            assert c.embedding.dtype == np.float32
            np.testing.assert_array_equal(c.embedding, retriever.embeddings[r])


def test_passage_text_as_question_finds_itself(retriever):
    rows = [5, 777, 1999]
    texts = [retriever.corpus.texts[r] for r in rows]
    out = retriever.retrieve(texts, k=3, batch_size=2, progress=False)
    assert [cands[0].id for cands in out] == [retriever.corpus.ids[r] for r in rows]
    assert all(cands[0].score > 0.99 for cands in out)


def test_errors(retriever, msmarco_2k, msmarco_emb, encoder):
    with pytest.raises(ConfigError, match="K=2001"):
        retriever.retrieve(["a question"], k=2001, progress=False)
    with pytest.raises(DataError, match="empty question"):
        retriever.retrieve([Question("q", "")], progress=False)
    assert retriever.retrieve([], progress=False) == []
    small = msmarco_emb[:2000, :96].copy()
    with pytest.raises(DataError, match="encoder .* gives dimension 384"):
        Retriever(msmarco_2k, small, build_index(small, progress=False), encoder)
    with pytest.raises(DataError, match="do not fit corpus"):
        Retriever(msmarco_2k, msmarco_emb[:1999], retriever.index, encoder)
    other = build_index(msmarco_emb[:1000], progress=False)
    with pytest.raises(DataError, match="index holds 1000"):
        Retriever(msmarco_2k, msmarco_emb[:2000], other, encoder)


def test_from_corpus_on_a_tsv_file(tmp_path, msmarco_2k, encoder, fresh_cache):
    path = tmp_path / "mini.tsv"
    lines = ["id\ttext\ttitle\tsource"] + [
        f"{msmarco_2k.ids[i]}\t{msmarco_2k.texts[i]}\t\tmsmarco" for i in range(40)
    ]
    path.write_text("\n".join(lines) + "\n")
    before = encoder.n_encoded
    r = Retriever.from_corpus(path, encoder=encoder, progress=False)
    assert encoder.n_encoded - before == 40 and len(r) == 40 and r.corpus.name == "mini"
    hit = r.retrieve([msmarco_2k.texts[7]], k=2, progress=False)[0]
    assert hit[0].id == msmarco_2k.ids[7]
    before = encoder.n_encoded
    r2 = Retriever.from_corpus(path, kind="ivfpq", encoder=encoder, progress=False)
    assert encoder.n_encoded == before  # embeddings came from the cache
    assert r2.index.kind == "ivfpq" and r2.index.settings["nlist"] == 1
    assert r2.retrieve([msmarco_2k.texts[7]], k=2, progress=False)[0][0].id == msmarco_2k.ids[7]


def test_from_corpus_rejects_unknown_kind(msmarco_2k, msmarco_emb, encoder, fresh_cache):
    tiny = Corpus(msmarco_2k.ids[:10], msmarco_2k.texts[:10], msmarco_2k.titles[:10], name="t")
    with pytest.raises(ConfigError, match="unknown index kind"):
        Retriever.from_corpus(tiny, kind="hnsw", encoder=encoder, progress=False)


def test_ivfpq_with_exact_rerank(retriever, msmarco_2k, msmarco_emb, encoder):
    emb = msmarco_emb[:2000]
    ivf = build_index(emb, kind="ivfpq", progress=False)
    texts = [msmarco_2k.texts[r][:60] for r in range(0, 2000, 50)]  # 40 partial-passage queries
    q = encoder.encode(texts, progress=False)
    exact_s, exact_r = retriever.search(q, 5)
    plain = Retriever(msmarco_2k, emb, ivf, encoder)
    reranked = Retriever(msmarco_2k, emb, ivf, encoder, rerank=100)
    s, r = reranked.search(q, 5, batch_size=16)
    valid = r >= 0
    np.testing.assert_allclose(s[valid], np.einsum("bd,bkd->bk", q, emb[r])[valid], atol=1e-5)

    def recall(rows):
        return np.mean([len(set(a) & set(b)) / 5 for a, b in zip(rows, exact_r, strict=True)])

    assert recall(r) >= 0.95 and recall(r) >= recall(plain.search(q, 5)[1])
    with pytest.raises(ConfigError, match="rerank"):
        Retriever(msmarco_2k, emb, ivf, encoder, rerank=-1)
