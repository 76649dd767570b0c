from __future__ import annotations

import numpy as np
import pytest

from chunksel.data.corpus import Corpus
from chunksel.errors import DataError
from chunksel.retrieval.embeddings import (
    check_precomputed,
    corpus_embeddings,
    corpus_key,
    decode_precomputed,
    embeddings_dir,
)


def test_decode_formula(tmp_path):
    codes = np.array([[-128, 0, 127], [10, -5, 3]], dtype=np.int8)
    lo = np.array([-1.0, 0.5, 2.0], dtype=np.float32)
    step = np.array([0.01, 0.02, 0.03], dtype=np.float32)
    np.savez(tmp_path / "e.npz", codes=codes, lo=lo, step=step)
    x = (codes.astype(np.float64) + 128) * step + lo
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    out = decode_precomputed(tmp_path / "e.npz")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x, rtol=1e-6)


def test_decode_rejects_missing_arrays(tmp_path):
    np.savez(tmp_path / "e.npz", codes=np.zeros((2, 3), dtype=np.int8))
    with pytest.raises(DataError, match="missing arrays lo, step"):
        decode_precomputed(tmp_path / "e.npz")
    with pytest.raises(DataError, match="not found"):
        decode_precomputed(tmp_path / "absent.npz")


@pytest.mark.data
def test_decode_real_file(msmarco_emb):
    assert msmarco_emb.shape == (31604, 384) and msmarco_emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(msmarco_emb, axis=1), 1.0, atol=1e-5)


@pytest.mark.data
@pytest.mark.model
def test_encoded_cache_matches_precomputed_and_is_reused(
    data_root, encoder, msmarco_emb, corpus_slice, fresh_cache
):
    corpus = corpus_slice(64, name="tiny")
    before = encoder.n_encoded
    emb = corpus_embeddings(corpus, encoder, root=data_root, progress=False, shard_rows=32)
    assert encoder.n_encoded - before == 64
    cos = np.sum(emb * msmarco_emb[:64], axis=1)
    assert cos.min() >= 0.999
    again = corpus_embeddings(corpus, encoder, root=data_root, progress=False, shard_rows=32)
    assert encoder.n_encoded - before == 64  # second call read the shards
    np.testing.assert_array_equal(again, emb)
    assert sorted(p.name for p in embeddings_dir(corpus, encoder).glob("shard_*.npy")) == [
        "shard_00000.npy",
        "shard_00001.npy",
    ]


@pytest.mark.data
@pytest.mark.model
def test_interrupted_encoding_resumes_from_last_shard(encoder, corpus_slice, fresh_cache):
    corpus = corpus_slice(48, name="resume")

    def stop_after_first(shard, n_shards):
        assert n_shards == 3
        if shard == 0:
            raise KeyboardInterrupt

    before = encoder.n_encoded
    with pytest.raises(KeyboardInterrupt):
        corpus_embeddings(corpus, encoder, progress=False, shard_rows=16, on_shard=stop_after_first)
    assert encoder.n_encoded - before == 16
    seen = []
    emb = corpus_embeddings(
        corpus, encoder, progress=False, shard_rows=16, on_shard=lambda s, n: seen.append(s)
    )
    assert seen == [1, 2] and encoder.n_encoded - before == 48
    fresh = encoder.encode([corpus.encoder_input(i) for i in range(16)], progress=False)
    np.testing.assert_allclose(emb[:16], fresh, atol=1e-5)


@pytest.mark.data
@pytest.mark.model
def test_cached_shard_with_wrong_dimension(encoder, corpus_slice, fresh_cache):
    corpus = corpus_slice(20, name="baddim")
    folder = embeddings_dir(corpus, encoder)
    corpus_embeddings(corpus, encoder, progress=False, shard_rows=10)
    np.save(folder / "shard_00001.npy", np.zeros((10, 128), dtype=np.float32))
    with pytest.raises(DataError, match="dimension mismatch"):
        corpus_embeddings(corpus, encoder, progress=False, shard_rows=10)


def test_corpus_key_depends_on_content():
    a = Corpus(["1", "2"], ["x", "y"], ["", ""])
    b = Corpus(["1", "2"], ["x", "z"], ["", ""])
    assert corpus_key(a) != corpus_key(b) and corpus_key(a) == corpus_key(
        Corpus(["1", "2"], ["x", "y"], ["", ""])
    )
    assert corpus_key(Corpus(["1"], ["x"], [""], checksum="abc")) == "abc"


@pytest.fixture(scope="module")
def msmarco_full(data_root):
    return Corpus.load("msmarco-sub", root=data_root, progress=False)


@pytest.mark.data
@pytest.mark.model
def test_named_corpus_uses_checked_precomputed_file(
    data_root, encoder, msmarco_full, msmarco_emb, fresh_cache
):
    before = encoder.n_encoded
    emb = corpus_embeddings(msmarco_full, encoder, root=data_root, progress=False)
    np.testing.assert_array_equal(emb, msmarco_emb)
    assert encoder.n_encoded - before == 8  # the sample check only
    corpus_embeddings(msmarco_full, encoder, root=data_root, progress=False)
    assert encoder.n_encoded - before == 8  # verdict cached
    assert (embeddings_dir(msmarco_full, encoder) / "precomputed_check.json").is_file()


@pytest.mark.data
@pytest.mark.model
def test_precomputed_row_count_mismatch(data_root, encoder, msmarco_2k):
    assert msmarco_2k.name != "msmarco-sub"
    named = Corpus(msmarco_2k.ids, msmarco_2k.texts, msmarco_2k.titles, name="msmarco-sub")
    with pytest.raises(DataError, match="31604 rows but corpus 'msmarco-sub' has 2000"):
        corpus_embeddings(named, encoder, root=data_root, progress=False)


@pytest.mark.data
@pytest.mark.model
def test_precomputed_text_mismatch(data_root, encoder, msmarco_full, msmarco_emb):
    shifted = Corpus(
        msmarco_full.ids,
        msmarco_full.texts[1:] + msmarco_full.texts[:1],
        msmarco_full.titles,
        name="msmarco-sub",
        checksum="shifted",
    )
    with pytest.raises(DataError, match="do not match corpus 'msmarco-sub'.*cosine"):
        corpus_embeddings(shifted, encoder, root=data_root, progress=False)


@pytest.mark.data
@pytest.mark.model
def test_precomputed_dimension_mismatch(encoder, msmarco_full, msmarco_emb):
    with pytest.raises(DataError, match="dimension 128"):
        check_precomputed(msmarco_full, msmarco_emb[:, :128], encoder)
