"""ChunkSelector.select with more chunks than the model's K, and bad k, without any model load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.errors import ArgumentTypeError, ConfigError, DataError, UnscoredChunksWarning

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


@pytest.mark.parametrize("k", ["2", 2.0, None, [2]])
def test_k_of_the_wrong_type_is_a_type_error_that_says_what_k_accepts(chunk_selector, k):
    with pytest.raises(TypeError, match=r'k must be a whole number >= 1 \(an int\) or the string "auto", got ') as err:
        chunk_selector.select("q?", ["a", "b"], chunk_embeddings=_emb(2), features=FEATS, k=k)
    assert isinstance(err.value, ArgumentTypeError) and isinstance(err.value, ConfigError)
    assert ("the string '2'" if k == "2" else f"{k!r} ({type(k).__name__})") in str(err.value)
    assert "range" not in str(err.value)


@pytest.mark.parametrize("bad", ["", "   "])
def test_an_empty_chunk_is_refused_with_its_index(chunk_selector, bad):
    with pytest.raises(DataError, match=r"chunks\[1\] is empty") as err:
        chunk_selector.select("q?", ["a", bad, "c"], chunk_embeddings=_emb(3), features=FEATS)
    assert err.value.field == "chunks"
    with pytest.raises(DataError, match=r"question #1: chunks\[0\] is empty"):
        chunk_selector.select_batch(["q?", "r?"], [["a"], [bad]], chunk_embeddings=[_emb(1), _emb(1)],
                                    features=[FEATS, FEATS])
    with pytest.raises(DataError, match=r"chunks\[0\] must be a string, got int"):
        chunk_selector.select("q?", [3, "b"], chunk_embeddings=_emb(2), features=FEATS)


def test_an_all_zero_embedding_is_refused_with_its_index(chunk_selector):
    emb = _emb(3)
    emb[2] = 0.0
    with pytest.raises(DataError, match=r"chunk_embeddings\[2\] is all zeros") as err:
        chunk_selector.select("q?", ["a", "b", "c"], chunk_embeddings=emb, features=FEATS)
    assert err.value.field == "chunk_embeddings"
    with pytest.raises(DataError, match="question_embedding is all zeros") as err:
        chunk_selector.select("q?", ["a", "b"], chunk_embeddings=_emb(2), question_embedding=np.zeros(8),
                              features=FEATS)
    assert err.value.field == "question_embedding"
