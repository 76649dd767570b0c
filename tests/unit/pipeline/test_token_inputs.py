"""Late interaction on the application path: ChunkSelector gives a ``late=True`` ranker the
question's and the chunks' token vectors (the caller's, the token cache's, or encoded from
the text with the real all-MiniLM-L6-v2), and every path scores as the benchmark does."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.selectors.test_late_features import FACTS, _instances

from chunksel.errors import DataError
from chunksel.pipeline.chunk_selector import ChunkSelector
from chunksel.retrieval.chunk_cache import TokenCache
from chunksel.retrieval.tokens import chunk_codes
from chunksel.selectors import make_selector
from chunksel.selectors.provenance import selector_inputs

pytestmark = pytest.mark.model

QUESTION = "Who wrote Hamlet?"
CHUNKS = ["The Globe Theatre was built in 1599.", "Hamlet is a tragedy written by William Shakespeare.",
          "Jupiter is the largest planet in the Solar System."]


@pytest.fixture(scope="module")
def late_lm(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("late")
    corpus = tmp / "c.tsv"
    texts = [t for _, a, b in FACTS for t in (a, b)]
    corpus.write_text("id\ttext\ttitle\n" + "".join(f"d{i}\t{t}\t\n" for i, t in enumerate(texts)))
    sel = make_selector("lambdamart", corpus=str(corpus), late=True, progress=False, min_child_samples=1,
                        n_estimators=20)
    sel.fit(_instances("c"), None, _instances("d", flip=True, split="val"))
    sel.save(tmp / "m")
    return tmp / "m"


def _encoded(cs):
    return cs.encoder.n_encoded


def test_a_late_ranker_reads_token_vectors_and_says_so_in_its_cost(late_lm):
    cs = ChunkSelector.load(late_lm)
    assert "token_vectors" in cs.inputs and cs.selector.query_cost == "bm25+tokens"
    assert make_selector("lambdamart").query_cost == "bm25"
    assert make_selector("maxsim").query_cost == "tokens"
    assert make_selector("anchored-ce", base_params={"late": True}).query_cost == "warmup+bm25+tokens"
    assert make_selector("lambdamart-late").late and make_selector("lambdamart-late").query_cost == "bm25+tokens"
    assert "token_vectors" in selector_inputs(make_selector("anchored", blocks="letor+lambdamart", late=True))
    assert "token_vectors" not in selector_inputs(make_selector("anchored", blocks="letor+lambdamart"))
    assert cs.token_cache is not None and ChunkSelector.load("retrieval").token_cache is None


def test_raw_text_given_vectors_and_the_cache_give_the_benchmark_scores(late_lm):
    from chunksel.types import Candidate, Instance, Question

    cs = ChunkSelector.load(late_lm)
    raw = cs.select(QUESTION, CHUNKS, k=1)
    assert raw.selected[0].index == 1
    # one MiniLM pass a text: the question (embedding and tokens), each chunk (tokens, and the
    # embedding the embedding cache then holds)
    assert _encoded(cs) == 1 + len(CHUNKS)
    # the benchmark path: the same instance, the retrieval scores as ChunkSelector computes them
    q_emb, q_tok = cs.encoder.encode_with_tokens([QUESTION])
    c_emb = cs.encoder.encode(CHUNKS, progress=False)
    inst = Instance(Question("q", QUESTION), [Candidate(str(j), t, rank=j, score=float(q_emb[0] @ c_emb[j]))
                                              for j, t in enumerate(CHUNKS)])
    np.testing.assert_allclose(raw.all_scores, cs.selector.score([inst])[0], atol=1e-5)

    # every vector given: nothing is encoded, and the scores agree
    codes = chunk_codes(cs.encoder, CHUNKS)
    before = _encoded(cs)
    given = cs.select(QUESTION, CHUNKS, k=1, question_embedding=q_emb[0], chunk_embeddings=c_emb,
                      question_tokens=q_tok[0], chunk_tokens=codes)
    assert _encoded(cs) == before
    np.testing.assert_allclose(given.all_scores, raw.all_scores, atol=1e-5)
    # float token vectors are packed to the stored codes: the same scores again
    floats = [c.astype(np.float32) / 127.0 for c in codes]
    again = cs.select(QUESTION, CHUNKS, k=1, question_embedding=q_emb[0], chunk_embeddings=c_emb,
                      question_tokens=q_tok[0], chunk_tokens=floats)
    np.testing.assert_allclose(again.all_scores, raw.all_scores, atol=1e-5)

    # without an embedding cache too, one pass a text
    bare = ChunkSelector.load(late_lm, embedding_cache=False, token_cache=False)
    bare.select(QUESTION, CHUNKS)
    assert _encoded(bare) == 1 + len(CHUNKS) and bare.embedding_cache is None

    # from raw text a second time: the token cache holds the chunks, only the question is encoded
    cs2 = ChunkSelector.load(late_lm, token_cache=TokenCache(), embedding_cache=True)
    cs2.select(QUESTION, CHUNKS)
    before = _encoded(cs2)
    second = cs2.select(QUESTION, CHUNKS)
    assert _encoded(cs2) - before == 1  # the question: its embedding and tokens in one pass
    np.testing.assert_allclose(second.all_scores, raw.all_scores, atol=1e-5)


def test_token_vectors_are_checked_with_the_field_named(late_lm):
    cs = ChunkSelector.load(late_lm)
    codes = chunk_codes(cs.encoder, CHUNKS)
    cases = [
        ({"question_tokens": np.ones((3, 100))}, "question_tokens", "expected \\(tokens, 384\\)"),
        ({"question_tokens": np.full((3, 384), np.nan)}, "question_tokens", "NaN"),
        ({"chunk_tokens": codes[:2]}, "chunk_tokens", "3 chunks but 2 chunk_tokens"),
        ({"chunk_tokens": codes[0]}, "chunk_tokens", "one \\(tokens, 384\\) array per chunk"),
        ({"chunk_tokens": [codes[0], np.zeros((4, 384)), codes[2]]}, "chunk_tokens", "all-zero token vector"),
    ]
    for kw, field, msg in cases:
        with pytest.raises(DataError, match=msg) as err:
            cs.select(QUESTION, CHUNKS, **kw)
        assert err.value.field == field


def test_maxsim_by_name_scores_the_callers_vectors():
    cs = ChunkSelector.load("maxsim")
    assert cs.inputs == {"token_vectors"}
    raw = cs.select(QUESTION, CHUNKS, k=1)
    _, q_tok = cs.encoder.encode_with_tokens([QUESTION])
    codes = chunk_codes(cs.encoder, CHUNKS)
    before = _encoded(cs)
    given = cs.select(QUESTION, CHUNKS, k=1, question_tokens=q_tok[0], chunk_tokens=codes)
    assert _encoded(cs) == before and given.selected[0].index == raw.selected[0].index == 1
    np.testing.assert_allclose(given.all_scores, raw.all_scores, atol=1e-5)


def test_the_server_keeps_a_late_models_chunk_vectors_in_its_cache_file(late_lm, tmp_path):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    import sqlite3

    from tests.unit.pipeline.test_server import running

    from chunksel.pipeline.serve_boot import load_for_serving
    from chunksel.pipeline.server import ServeSettings

    path = tmp_path / "cache.sqlite"
    cs = load_for_serving(late_lm, ServeSettings(port=0, embedding_cache_path=str(path), embedding_cache_items=100))
    assert cs.token_cache.max_items == 10 and cs.token_cache.path == path
    with running(cs) as base:
        got = httpx.post(base + "/select", json={"question": QUESTION, "chunks": CHUNKS, "k": 1}, timeout=60).json()
    assert got["selected"][0]["index"] == 1
    with sqlite3.connect(path) as db:
        assert db.execute("SELECT COUNT(*) FROM tok").fetchone()[0] == len(CHUNKS)


def test_the_cost_stage_times_a_late_model_with_its_stored_vectors_given(late_lm):
    from chunksel.selectors import load_selector
    from chunksel.selectors.letor import memo_off
    from chunksel.study.cost import raw, with_tokens

    sel = load_selector(late_lm)
    insts = _instances("e", flip=True, split="test")[:3]
    given = with_tokens(sel, insts)
    assert given[0].question.tokens is not None and insts[0].question.tokens is None
    assert all(c.tokens is not None and c.tokens.dtype == np.int8 for i in given for c in i.candidates)
    assert all(c.tokens is None for c in raw(given[0]).candidates) and raw(given[0]).question.tokens is None
    with memo_off():  # the same scores as from the texts
        np.testing.assert_allclose(sel.score(given), sel.score(insts), atol=1e-5)


def test_token_cache_settings():
    from chunksel.errors import ConfigError
    from chunksel.pipeline.token_inputs import make_token_cache

    assert make_token_cache(False) is None and isinstance(make_token_cache(True), TokenCache)
    with pytest.raises(ConfigError, match="token_cache must be True, False, a SQLite path or a TokenCache"):
        make_token_cache(3)


def test_the_cost_stages_text_path_gives_a_late_model_one_pass_and_the_given_paths_scores(late_lm):
    from chunksel.retrieval.encoder import Encoder
    from chunksel.selectors import load_selector
    from chunksel.selectors.letor import memo_off
    from chunksel.study.cost import raw, text_path, with_tokens

    sel, enc = load_selector(late_lm), Encoder()
    inst = _instances("e", flip=True, split="test")[0]
    q = enc.encode([inst.question.text], progress=False)[0]
    e = enc.encode([c.text for c in inst.candidates], progress=False)
    for c, v in zip(inst.candidates, e, strict=True):
        c.embedding, c.score = v, float(v @ q)
    inst.question.embedding = q
    from chunksel.selectors.late_features import scorer

    with memo_off():
        given = sel.score(with_tokens(sel, [inst]))
        before, inside = enc.n_encoded, scorer(None).encoder().n_encoded
        got = text_path(sel, None, enc)(raw(inst))
    assert enc.n_encoded - before == 1 + len(inst.candidates)  # each text once
    assert scorer(None).encoder().n_encoded == inside  # MaxSim encoded nothing more
    np.testing.assert_allclose(got, given, atol=1e-4)
