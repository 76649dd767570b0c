"""MaxSim over the real all-MiniLM-L6-v2 token vectors (no training)."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.retrieval.tokens import (
    BYTES_PER_TOKEN,
    TokenShards,
    maxsim,
    maxsim_many,
    pack,
    token_vectors,
    unpack,
    write_shard,
)
from chunksel.selectors import load_selector, make_selector
from chunksel.types import Candidate, Instance, Question

pytestmark = pytest.mark.model


def _instance(texts, titles=None):
    titles = titles or [""] * len(texts)
    return Instance(Question("q1", "Who wrote the play Hamlet?"),
                    [Candidate(f"c{j}", t, title=ti, rank=j) for j, (t, ti) in enumerate(zip(texts, titles, strict=True))])


def test_maxsim_is_the_mean_of_each_question_tokens_best_cosine():
    q = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float16)
    c = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float16)
    assert maxsim(q, c) == pytest.approx((1.0 + 0.8) / 2, abs=1e-3)
    with pytest.raises(DataError, match="one dim"):
        maxsim(q, np.ones((3, 4), dtype=np.float16))


def test_token_vectors_drop_special_tokens_and_are_unit_float16():
    from chunksel.retrieval.encoder import Encoder

    enc = Encoder()
    vecs = token_vectors(enc, ["who wrote hamlet?", "The Globe Theatre"])
    assert [v.shape for v in vecs] == [(4, 384), (3, 384)]  # who wrote hamlet ? / the globe theatre
    assert vecs[0].dtype == np.float16 and vecs[0].nbytes == 4 * 2 * 384
    assert pack(vecs[0]).nbytes == 4 * BYTES_PER_TOKEN == 4 * 384  # stored: one byte a component
    assert np.allclose(np.linalg.norm(vecs[0].astype(np.float32), axis=1), 1.0, atol=1e-2)
    with pytest.raises(DataError, match="text #1 is empty"):
        token_vectors(enc, ["fine", "  "])


def test_the_chunk_that_answers_word_for_word_ranks_first(tmp_path):
    sel = make_selector("maxsim")
    inst = _instance(["The Globe Theatre was built in 1599.",
                      "Hamlet is a tragedy written by William Shakespeare.",
                      "Denmark is a Nordic country."])
    scores = sel.score([inst])
    assert scores.shape == (1, 3) and int(np.argmax(scores[0])) == 1
    sel.save(tmp_path / "m")
    assert np.array_equal(load_selector(tmp_path / "m").score([inst]), scores)
    # titles are read with the text unless title=False
    titled = _instance(["It was written around 1600."], ["Hamlet"])
    assert make_selector("maxsim").score([titled])[0, 0] != make_selector("maxsim", title=False).score([titled])[0, 0]


def test_stored_codes_keep_maxsim_within_a_hundredth():
    rng = np.random.default_rng(0)
    q, c = (rng.normal(size=(n, 384)) for n in (6, 40))
    q, c = (x / np.linalg.norm(x, axis=1, keepdims=True) for x in (q, c))
    codes = pack(c)
    assert codes.dtype == np.int8 and np.abs(unpack(codes) - c).max() <= 0.5 / 127 + 1e-7
    assert maxsim(q, codes) == pytest.approx(maxsim(q, c), abs=0.01)
    with pytest.raises(DataError, match="int8 codes"):
        unpack(c)
    with pytest.raises(DataError, match=r"\(tokens, dim\)"):
        pack(c[0])


def test_token_shards_read_by_passage_id_and_refuse_a_broken_shard(tmp_path):
    a, b = (np.full((n, 384), n, dtype=np.int8) for n in (3, 5))
    info = write_shard(tmp_path, "x-00000", ["p1", "p2"], [a, b])
    assert info == {"rows": 2, "tokens": 8, "bytes": 8 * 384 + 3 * 8}
    shards = TokenShards(tmp_path)
    got = shards.get(["p2", "nope", "p1"])
    assert np.array_equal(got[0], b) and got[1] is None and np.array_equal(got[2], a)
    assert len(shards) == 2 and "p1" in shards and shards.bytes_per_chunk == (8 * 384 + 24) / 2
    np.save(tmp_path / "tokens_x-00000.offsets.npy", np.array([0, 3], dtype=np.int64))
    with pytest.raises(DataError, match="inconsistent"):
        TokenShards(tmp_path)
    with pytest.raises(DataError, match="no token shards"):
        TokenShards(tmp_path / "empty")


def test_kept_token_vectors_give_the_same_scores_and_encode_only_the_question(tmp_path):
    from chunksel.errors import ConfigError

    texts = ["The Globe Theatre was built in 1599.", "Hamlet is a tragedy written by William Shakespeare."]
    ref = make_selector("maxsim").score([_instance(texts)])
    for spec in ("memory", str(tmp_path / "tok.sqlite")):
        sel = make_selector("maxsim", tokens=spec)
        assert np.array_equal(sel.score([_instance(texts)]), ref)
        before = sel.encoder().n_encoded
        assert np.array_equal(sel.score([_instance(texts)]), ref)
        assert sel.encoder().n_encoded - before == 1  # the question alone
    # the SQLite tier outlives the process's selector
    again = make_selector("maxsim", tokens=str(tmp_path / "tok.sqlite"))
    assert np.array_equal(again.score([_instance(texts)]), ref) and again.encoder().n_encoded == 1
    # shards: read by passage id; a chunk they lack is encoded from its text
    from chunksel.retrieval.tokens import chunk_codes

    write_shard(tmp_path / "shards", "a-00000", ["c0"], chunk_codes(again.encoder(), ["The Globe Theatre was built in 1599."]))
    sel = make_selector("maxsim", tokens=str(tmp_path / "shards"))
    assert np.array_equal(sel.score([_instance(texts)]), ref) and sel.encoder().n_encoded == 2
    with pytest.raises(ConfigError, match="neither 'memory'"):
        make_selector("maxsim", tokens=str(tmp_path / "missing-folder")).score([_instance(texts)])


def test_one_encoder_pass_gives_the_embedding_and_the_token_vectors():
    from chunksel.retrieval.encoder import Encoder

    enc = Encoder()
    texts = ["who wrote hamlet?", "Hamlet is a tragedy written by William Shakespeare."]
    emb, toks = enc.encode_with_tokens(texts)
    np.testing.assert_allclose(emb, enc.encode(texts, progress=False), atol=1e-5)
    for a, b in zip(toks, token_vectors(enc, texts), strict=True):
        assert a.shape == b.shape and np.abs(a.astype(np.float32) - b.astype(np.float32)).max() < 2e-3
    with pytest.raises(DataError, match="text #0 is empty"):
        enc.encode_with_tokens([""])


def test_the_token_cache_keeps_int8_codes_only(tmp_path):
    from chunksel.errors import ConfigError
    from chunksel.retrieval.chunk_cache import TokenCache

    cache = TokenCache(max_items=1, path=tmp_path / "c.sqlite")
    a, b = np.ones((3, 384), dtype=np.int8), np.full((2, 384), -5, dtype=np.int8)
    cache.put_many(["a", "b"], [a, b])
    assert len(cache) == 1  # the memory tier keeps one; the file keeps both
    got = TokenCache(path=tmp_path / "c.sqlite").get_many(["a", "b", "c"])
    assert np.array_equal(got[0], a) and np.array_equal(got[1], b) and got[2] is None
    with pytest.raises(ConfigError, match="int8 codes"):
        cache.put_many(["x"], [np.ones((2, 384), dtype=np.float16)])
    with pytest.raises(ConfigError, match="token cache max_items"):
        TokenCache(max_items=-1)


def test_maxsim_many_is_the_mean_of_each_question_tokens_best_cosine():
    rng = np.random.default_rng(3)

    def unit(n):
        x = rng.normal(size=(n, 384)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)

    def reference(q, c):  # the definition, term by term
        c = unpack(c) if c.dtype == np.int8 else c
        return np.mean([max(float(np.dot(t, u)) for u in c) for t in q])

    q = unit(7)
    chunks = [pack(unit(n)) for n in (1, 40, 130, 9)]
    want = [reference(q, c) for c in chunks]
    np.testing.assert_allclose(maxsim_many(q, chunks), want, atol=1e-6)
    np.testing.assert_allclose([maxsim(q, c) for c in chunks], want, atol=1e-6)
    mixed = [chunks[0], unpack(chunks[1])]  # codes and floats together
    np.testing.assert_allclose(maxsim_many(q, mixed), [want[0], want[1]], atol=1e-6)
    assert maxsim_many(q, []).shape == (0,)
    with pytest.raises(DataError, match="non-empty"):
        maxsim_many(q, [chunks[0], np.zeros((0, 384), dtype=np.int8)])
    with pytest.raises(DataError, match="one dim"):
        maxsim_many(q, [pack(unit(3))[:, :100]])
    with pytest.raises(DataError, match="question"):
        maxsim_many(np.zeros((0, 384), dtype=np.float32), chunks)
