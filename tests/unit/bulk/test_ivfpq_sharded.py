"""The IVF-PQ index filled shard by shard equals the one built from the whole array."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("faiss")

from chunksel.bulk.ivfpq import build_ivfpq_from_shards, gather_rows, ivfpq_bytes_per_vector  # noqa: E402
from chunksel.retrieval.index import build_index  # noqa: E402


def _unit(n, d, seed):
    x = np.random.default_rng(seed).normal(size=(n, d)).astype(np.float32)
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _shards(tmp_path, emb, sizes):
    files, lo = [], 0
    for i, size in enumerate(sizes):
        f = tmp_path / f"shard_{i:05d}.npy"
        np.save(f, emb[lo:lo + size])
        files.append(f)
        lo += size
    assert lo == len(emb)
    return files


SETTINGS = dict(nlist=16, m=8, nbits=6, train_sample=1500, seed=3, progress=False)


def test_gather_rows_reads_across_shards(tmp_path):
    emb = _unit(50, 8, 0)
    files = _shards(tmp_path, emb, [7, 20, 23])
    rows = np.array([0, 6, 7, 26, 27, 49])
    np.testing.assert_array_equal(gather_rows(files, rows), emb[rows])


@pytest.mark.parametrize("nprobe", [16, 4])
def test_same_top_k_as_the_unsharded_index(tmp_path, nprobe):
    emb = _unit(2400, 32, 1)
    files = _shards(tmp_path, emb, [1000, 333, 1000, 67])
    whole = build_index(emb, kind="ivfpq", nprobe=nprobe, **SETTINGS)
    sharded = build_ivfpq_from_shards(files, nprobe=nprobe, **SETTINGS)
    assert sharded.settings == {**whole.settings, "shards": 4}
    q = _unit(40, 32, 2)
    s1, r1 = whole.search(q, 10)
    s2, r2 = sharded.search(q, 10)
    np.testing.assert_array_equal(r1, r2)
    np.testing.assert_array_equal(s1, s2)


def test_exhaustive_search_with_one_trained_quantizer(tmp_path):
    """nprobe = nlist, the same trained index filled in one go or shard by shard."""
    import faiss

    emb = _unit(2000, 32, 4)
    files = _shards(tmp_path, emb, [500, 500, 999, 1])
    base = build_index(emb[:1500], kind="ivfpq", nprobe=16, **SETTINGS).index
    base.reset()  # trained, empty
    one_go = faiss.clone_index(base)
    one_go.add(emb)
    sharded = build_ivfpq_from_shards(files, nprobe=16, trained=base, **SETTINGS)
    one_go.nprobe = sharded.index.nprobe = one_go.nlist
    q = _unit(25, 32, 5)
    d1, i1 = one_go.search(q, 20)
    d2, i2 = sharded.index.search(q, 20)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(d1, d2)
    assert sharded.ntotal == 2000


def test_bytes_per_vector():
    assert ivfpq_bytes_per_vector(64, 8) == 72
    assert ivfpq_bytes_per_vector(8, 6) == 14
