from __future__ import annotations

import logging

import numpy as np
import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.retrieval.index import Index, build_index, cached_index, effective_nlist

pytestmark = pytest.mark.data


@pytest.fixture(scope="module")
def vectors(msmarco_emb):
    """3,000 real MiniLM passage vectors to index and 200 other passages as queries."""
    return msmarco_emb[:3000].copy(), msmarco_emb[-200:].copy()


@pytest.fixture(scope="module")
def ivfpq(vectors):
    return build_index(vectors[0], kind="ivfpq", progress=False)


def exact_topk(x, q, k):
    sims = q @ x.T
    rows = np.argsort(-sims, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sims, rows, axis=1), rows


def test_flat_is_exact(vectors):
    x, q = vectors
    index = build_index(x, kind="flat", progress=False)
    assert index.kind == "flat" and index.ntotal == 3000 and index.dim == 384
    scores, rows = index.search(q, 10, batch_size=64)
    ref_scores, ref_rows = exact_topk(x, q, 10)
    np.testing.assert_array_equal(rows, ref_rows)
    np.testing.assert_allclose(scores, ref_scores, atol=1e-5)
    assert scores.dtype == np.float32 and rows.dtype == np.int64
    faiss_scores, faiss_rows = index.index.search(q, 10)  # FAISS's own path agrees
    np.testing.assert_array_equal(rows, faiss_rows)
    np.testing.assert_allclose(scores, faiss_scores, atol=1e-5)
    one_s, one_r = index.search(q[:3], 10)  # < 8 queries: FAISS path
    np.testing.assert_array_equal(one_r, ref_rows[:3])


def test_single_query_vector(vectors):
    x, q = vectors
    scores, rows = build_index(x, progress=False).search(q[0], 3)
    assert scores.shape == rows.shape == (1, 3)


def test_effective_nlist():
    assert effective_nlist(1_000_000, 8192) == 8192
    assert effective_nlist(193_456, 8192) == 4096
    assert effective_nlist(3000, 8192) == 64
    assert effective_nlist(10, 8192) == 1


def test_ivfpq_scales_lists_and_says_so(vectors, caplog):
    with caplog.at_level(logging.WARNING, logger="chunksel.retrieval.index"):
        index = build_index(vectors[0][:1000], kind="ivfpq", nprobe=64, progress=False)
    assert index.settings["nlist"] == 16 and index.settings["nlist_requested"] == 8192
    assert index.settings["nprobe"] == 16  # never more lists than exist
    assert "using nlist=16" in caplog.text


def test_ivfpq_recall_against_exact(vectors, ivfpq):
    x, q = vectors
    s = ivfpq.settings
    assert (s["nlist"], s["m"], s["nbits"], s["nprobe"]) == (64, 64, 8, 32)
    _, rows = ivfpq.search(q, 5)
    _, ref = exact_topk(x, q, 5)
    recall = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(rows, ref, strict=True)])
    assert recall >= 0.6, recall
    top1 = np.mean(rows[:, 0] == ref[:, 0])
    assert top1 >= 0.5, top1


def test_save_load_round_trip(vectors, ivfpq, tmp_path):
    _, q = vectors
    ivfpq.save(tmp_path / "ivf")
    loaded = Index.load(tmp_path / "ivf")
    assert loaded.kind == "ivfpq" and loaded.settings == ivfpq.settings
    assert loaded.index.nprobe == 32
    for a, b in zip(ivfpq.search(q, 5), loaded.search(q, 5), strict=True):
        np.testing.assert_array_equal(a, b)
    flat = build_index(vectors[0], progress=False)
    flat.save(tmp_path / "flat")
    np.testing.assert_array_equal(
        flat.search(q, 5)[1], Index.load(tmp_path / "flat").search(q, 5)[1]
    )


def test_cached_index_is_reused(vectors, fresh_cache):
    x, q = vectors
    x = x[:1000]
    first = cached_index(x, "corpusA", "model", kind="ivfpq", nlist=16, progress=False)
    (file,) = (fresh_cache / "indexes" / "corpusA" / "model").glob("ivfpq-*/index.faiss")
    mtime = file.stat().st_mtime_ns
    second = cached_index(x, "corpusA", "model", kind="ivfpq", nlist=16, progress=False)
    assert file.stat().st_mtime_ns == mtime
    np.testing.assert_array_equal(first.search(q, 5)[1], second.search(q, 5)[1])
    other = cached_index(x, "corpusA", "model", kind="ivfpq", nlist=8, progress=False)
    assert other.settings["nlist"] == 8
    assert len(list((fresh_cache / "indexes" / "corpusA" / "model").glob("ivfpq-*"))) == 2
    with pytest.raises(ConfigError, match="unknown index settings: nlists"):
        cached_index(x, "corpusA", "model", kind="ivfpq", nlists=8)


def test_errors(vectors):
    x, q = vectors
    flat = build_index(x[:50], progress=False)
    with pytest.raises(ConfigError, match="K=51"):
        flat.search(q, 51)
    with pytest.raises(ConfigError, match="K=0"):
        flat.search(q, 0)
    with pytest.raises(DataError, match="query dimension 100"):
        flat.search(q[:, :100], 5)
    with pytest.raises(ConfigError, match="unknown index kind"):
        build_index(x, kind="hnsw")
    with pytest.raises(ConfigError, match="must divide"):
        build_index(x, kind="ivfpq", m=7)
    with pytest.raises(DataError, match="shape"):
        build_index(np.zeros((0, 384), dtype=np.float32))
    with pytest.raises(DataError, match="no saved index"):
        Index.load("/nonexistent/index")
