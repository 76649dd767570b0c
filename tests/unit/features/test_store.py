"""FeatureStore: resumable shards, lookup order, missing ids."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tiny import QUESTIONS, tiny_llama

from chunksel.config import cache_root
from chunksel.errors import DataError
from chunksel.features.dense import DenseAdapter
from chunksel.features.extract import extract_features
from chunksel.features.store import FeatureStore
from chunksel.types import Question


@pytest.fixture(scope="module")
def llama():
    return tiny_llama()


def _qs(texts):
    return [Question(id=f"t:q:{i}", text=t) for i, t in enumerate(texts)]


def test_extract_resume_lookup(llama, tok):
    adapter = DenseAdapter(llama, n_groups=8)
    store = FeatureStore.open("tiny-llama", tok)
    assert store.root.parent.parent == cache_root() / "features"
    qs = _qs(QUESTIONS + [""])  # the empty question fails in the second shard
    with pytest.raises(DataError, match="empty question"):
        store.extract(qs, llama, tok, shard_size=2, batch_size=2, progress=False,
                      adapter=adapter)
    # the interrupted run kept its finished shards
    assert len(store) == 4 and len(json.loads((store.root / "index.json").read_text())["shards"]) == 2
    again = FeatureStore.open("tiny-llama", tok)
    assert again.ids == [q.id for q in qs[:4]]
    assert again.extract(qs[:4], llama, tok, progress=False, adapter=adapter) == 0
    qs[4].text = "Where is Timbuktu?"
    assert again.extract(qs, llama, tok, progress=False, adapter=adapter) == 1
    assert again.dims == {"h": 32, "r": 2 * 8}
    ids = [q.id for q in qs][::-1]
    got = again.lookup(ids)
    ref = extract_features(llama, tok, qs[::-1], adapter=adapter, progress=False)
    np.testing.assert_allclose(got["h"], ref["h"], atol=1e-5)
    np.testing.assert_allclose(got["r"], ref["r"], atol=1e-5)
    assert got["h"].dtype == np.float32
    with pytest.raises(DataError, match="no generator features"):
        again.lookup(["t:q:0", "nope"])


def test_dims_must_match(tmp_path):
    store = FeatureStore(tmp_path / "s")
    store.add(["a", "b"], np.zeros((2, 3)), np.ones((2, 4)))
    store.add(["a"], np.zeros((1, 3)), np.ones((1, 4)))  # already stored: no new shard
    assert len(json.loads((store.root / "index.json").read_text())["shards"]) == 1
    with pytest.raises(DataError, match="dims"):
        store.add(["c"], np.zeros((1, 5)), np.ones((1, 4)))
    np.testing.assert_array_equal(FeatureStore(tmp_path / "s").lookup(["b"])["r"], np.ones((1, 4)))


def test_stale_row_is_reextracted(llama, tok):
    """A question whose text changed under the same id gets new features, never the old row."""
    adapter = DenseAdapter(llama, n_groups=8)
    store = FeatureStore.open("tiny-llama-stale", tok)
    qs = _qs(QUESTIONS[:3])
    assert store.extract(qs, llama, tok, progress=False, adapter=adapter) == 3
    old = store.lookup([qs[1].id])
    assert store.extract(qs, llama, tok, progress=False, adapter=adapter) == 0
    qs[1].text = "Which planet is known as the red planet?"
    assert store.extract(qs, llama, tok, progress=False, adapter=adapter) == 1
    for reopened in (store, FeatureStore.open("tiny-llama-stale", tok)):
        got = reopened.lookup([q.id for q in qs])
        ref = extract_features(llama, tok, qs, adapter=adapter, progress=False)
        np.testing.assert_allclose(got["r"], ref["r"], atol=1e-5)
        assert not np.allclose(got["r"][1], old["r"][0])
        assert reopened.ids == [q.id for q in qs] and len(reopened) == 3
