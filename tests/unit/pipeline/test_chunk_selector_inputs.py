"""ChunkSelector.select with more chunks than the model's K, and bad k, without any model load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.errors import ConfigError, UnscoredChunksWarning

pytest.importorskip("torch")


@pytest.fixture
def chunk_selector(toy_instances, one_thread):
    from chunksel.features.base import InMemoryFeatures
    from chunksel.pipeline.chunk_selector import ChunkSelector
    from chunksel.selectors import make_selector

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = make_selector("prototype", k=3, hidden=8, max_epochs=2, patience=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"], feats)
    return ChunkSelector(sel)


def _emb(n: int) -> np.ndarray:
    e = np.random.default_rng(n).normal(size=(n, 8)).astype(np.float32)
    return e / np.linalg.norm(e, axis=1, keepdims=True)


FEATS = {"h": np.ones(3), "r": np.ones(2)}


def test_chunks_past_k_are_not_scored_nor_selected(chunk_selector):
    with pytest.warns(UnscoredChunksWarning, match="2 of 5 chunks were not scored: .* K=3"):
        res = chunk_selector.select("q?", [f"c{i}" for i in range(5)], chunk_embeddings=_emb(5), features=FEATS, k=5)
    assert res.n_scored == 3 and sorted(res.indices) == [0, 1, 2] and len(res.scores) == 3
    assert res.all_scores[3:] == [None, None]
    json.dumps(res.to_dict(), allow_nan=False)  # valid JSON: no -Infinity / NaN


def test_no_warning_when_every_chunk_is_scored(chunk_selector, recwarn):
    res = chunk_selector.select("q?", ["a", "b"], chunk_embeddings=_emb(2), features=FEATS, k=5)
    assert res.n_scored == 2 and len(res.indices) == 2 and None not in res.all_scores
    assert not [w for w in recwarn if issubclass(w.category, UnscoredChunksWarning)]


def test_bad_k_is_refused_before_the_encoder_or_generator(chunk_selector, monkeypatch):
    from chunksel.pipeline.chunk_selector import ChunkSelector

    def refuse(self):
        raise AssertionError("a model was loaded before k was checked")

    monkeypatch.setattr(ChunkSelector, "encoder", property(refuse))
    monkeypatch.setattr(ChunkSelector, "generator", refuse)
    with pytest.raises(ConfigError, match="k must be >= 1, got 0"):
        chunk_selector.select("q?", ["a", "b"], k=0)
