"""The real-world path end to end: a small saved prototype selector, the real MiniLM
encoder and the real SmolLM2 warm-up pass."""

from __future__ import annotations

import numpy as np
import pytest
from tests.conftest import make_toy_instances

from chunksel.errors import DataError
from chunksel.features.base import InMemoryFeatures
from chunksel.selectors import make_selector

pytestmark = [pytest.mark.model]

QUESTION = "What is the capital of France?"
CHUNKS = [
    "Berlin is the capital and largest city of Germany.",
    "Paris is the capital and most populous city of France.",
    "The Loire is the longest river in France.",
]


@pytest.fixture(scope="module")
def saved_selector(tmp_path_factory):
    from chunksel.llm.models import load_generator

    model, tokenizer, gen_id = load_generator()
    d_h = model.config.hidden_size
    d_r = model.config.num_hidden_layers * 64
    insts = make_toy_instances(n=30, dim=384, seed=3)
    rng = np.random.default_rng(0)
    ids = [i.id for i in insts]
    feats = InMemoryFeatures(ids, h=rng.normal(size=(len(ids), d_h)), r=rng.random((len(ids), d_r)))
    sel = make_selector("prototype", hidden=32, max_epochs=3, patience=2, progress=False, generator_id=gen_id)
    sel.fit([i for i in insts if i.split == "train"], feats)
    path = tmp_path_factory.mktemp("sel") / "prototype"
    sel.save(path)
    return path, (model, tokenizer, gen_id)


def test_select_runs_encoder_and_warmup(saved_selector):
    from chunksel.pipeline.chunk_selector import ChunkSelector

    path, generator = saved_selector
    cs = ChunkSelector.load(path)
    cs._generator = generator  # reuse the loaded SmolLM2 (same generator id)
    out = cs.select(QUESTION, CHUNKS, k=2)
    assert len(out.indices) == 2 and len(set(out.indices)) == 2
    assert all(np.isfinite(out.all_scores)) and len(out.all_scores) == 3
    assert out.chunks == [CHUNKS[i] for i in out.indices]
    assert out.scores[0] == max(out.all_scores)

    # the caller's own warm-up features and chunk embeddings give the same scores
    emb = cs.encoder.encode(CHUNKS, progress=False)
    again = cs.select(QUESTION, CHUNKS, chunk_embeddings=emb,
                      features={"h": out.warm_up.h, "r": out.warm_up.r}, k=2)
    np.testing.assert_allclose(again.all_scores, out.all_scores, rtol=1e-5, atol=1e-6)
    # and the selector's raw-array path agrees
    raw = cs.selector.score_arrays(out.warm_up.h[None], out.warm_up.r[None], emb[None])
    np.testing.assert_allclose(raw[0], out.all_scores, rtol=1e-5, atol=1e-6)


def test_answer_continues_from_the_warmup_cache(saved_selector):
    from chunksel.pipeline.chunk_selector import ChunkSelector

    path, generator = saved_selector
    cs = ChunkSelector.load(path)
    cs._generator = generator
    text, sel = cs.answer(QUESTION, CHUNKS, max_new_tokens=8)
    assert isinstance(text, str) and text.strip()
    assert sel.indices[0] in range(3)


def test_bad_inputs(saved_selector):
    from chunksel.pipeline.chunk_selector import ChunkSelector

    path, generator = saved_selector
    cs = ChunkSelector.load(path)
    cs._generator = generator
    with pytest.raises(DataError, match="no candidate chunks"):
        cs.select(QUESTION, [])
    with pytest.raises(DataError, match="2 chunks but 3 embeddings"):
        cs.select(QUESTION, CHUNKS[:2], chunk_embeddings=np.ones((3, 384)), features={"h": 0, "r": 0})
    with pytest.raises(DataError):
        cs.select(QUESTION, CHUNKS, features={"h": np.ones(7), "r": np.ones(3)})


def test_onnxruntime_engine_and_exported_graph_agree_with_torch(saved_selector, tmp_path):
    """The same real question through the torch engine, the onnxruntime engine and the
    exported file run by ONNX Runtime alone."""
    pytest.importorskip("onnxruntime")
    from chunksel.export.prototype import OnnxPrototype
    from chunksel.pipeline.chunk_selector import ChunkSelector

    path, generator = saved_selector
    cs = ChunkSelector.load(path)
    cs._generator = generator
    ref = cs.select(QUESTION, CHUNKS, k=3)
    emb = cs.encoder.encode(CHUNKS, progress=False)
    feats = {"h": ref.warm_up.h, "r": ref.warm_up.r}
    ort_cs = ChunkSelector.load(path, engine="onnxruntime", encoder=cs.encoder)
    got = ort_cs.select(QUESTION, CHUNKS, chunk_embeddings=emb, features=feats, k=3)
    np.testing.assert_allclose(got.all_scores, ref.all_scores, rtol=1e-4, atol=1e-5)
    assert got.indices == ref.indices

    from chunksel.cli import main

    out = tmp_path / "proto.onnx"
    assert main(["export", "--model", str(path), "--out", str(out), "--quantize", "int8"]) == 0
    runner = OnnxPrototype(out)
    assert runner.quantize == "int8" and runner.metadata["generator_id"] == generator[2]
    e = np.zeros((1, runner.layout.k, runner.layout.d_e), dtype=np.float32)
    e[0, :3] = emb
    scores, _ = runner(ref.warm_up.h[None], ref.warm_up.r[None], e)
    assert np.isneginf(scores[0, 3:]).all()
    np.testing.assert_allclose(scores[0, :3], ref.all_scores, atol=0.05)
