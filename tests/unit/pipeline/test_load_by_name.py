"""ChunkSelector.load of a registered selector's name: those that need no training load
(as ``chunksel eval --model`` accepts them), the others say how to train them first."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.pipeline.chunk_selector import ChunkSelector


def test_a_selector_that_needs_no_training_loads_by_name():
    cs = ChunkSelector.load("retrieval")
    assert cs.name == "retrieval" and cs.inputs == frozenset()
    sel = cs.select("who wrote Hamlet?", ["first retrieved", "second", "third"], k=2)
    assert sel.indices == [0, 1]  # the retriever's order
    picked = ChunkSelector.load("random").select("q?", ["a", "b", "c"], k=3)
    assert sorted(picked.indices) == [0, 1, 2]


def test_bm25_by_name_scores_with_the_given_corpus(tmp_path):
    pytest.importorskip("bm25s")
    import json

    corpus = tmp_path / "passages.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"p{i}", "text": text}) + "\n" for i, text in enumerate(
        ["the globe theatre in london", "hamlet was written by william shakespeare",
         "a play about a danish prince", "london bridge"])))
    with pytest.raises(ConfigError, match="pass corpus="):
        ChunkSelector.load("bm25")
    cs = ChunkSelector.load("bm25", corpus=corpus)
    sel = cs.select("who wrote hamlet", ["london bridge", "hamlet was written by william shakespeare"])
    assert sel.indices == [1] and np.isfinite(sel.scores).all()


def test_a_name_that_needs_training_says_how():
    pytest.importorskip("lightgbm")
    with pytest.raises(ConfigError, match=r"'lambdamart' must be trained first: chunksel train --selector "
                                          r"lambdamart --out DIR, then ChunkSelector.load\(DIR\)"):
        ChunkSelector.load("lambdamart")
    with pytest.raises(ConfigError, match="oracle.*gold labels"):
        ChunkSelector.load("oracle")
    with pytest.raises(ConfigError, match="quantize= and engine= apply to a saved prototype"):
        ChunkSelector.load("retrieval", quantize="int8")


def test_neither_a_directory_nor_a_name(tmp_path):
    with pytest.raises(DataError, match=r"shipped pretrained selectors: anchored-base, lambdamart-base, anchored-lite, "
                                        r"lambdamart-lite\); nor is "
                                        r"'retreival' a registered selector \(known: .*retrieval"):
        ChunkSelector.load("retreival")
    with pytest.raises(DataError, match=r"did you mean the pretrained 'anchored-base'\?"):
        ChunkSelector.load("anchored-bass")
    with pytest.raises(DataError, match="does not exist") as err:
        ChunkSelector.load(tmp_path / "absent")
    assert "registered" not in str(err.value)  # a path is a path: no list of names


def test_eval_takes_the_pretrained_names():
    from chunksel.cli.eval import eval_selector

    assert eval_selector("lambdamart-base").name == "lambdamart"
    assert eval_selector("anchored-base").name == "anchored"
