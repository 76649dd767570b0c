"""The retriever encoder (all-MiniLM-L6-v2) as an ONNX graph, fp32 and int8.

The graph is the sentence-transformers pipeline after tokenisation: the BERT encoder,
mean pooling over the attention mask and L2 normalisation, traced from the
``transformers`` model with the eager attention (no data-dependent mask shortcut) and
dynamic batch and sequence axes. The int8 graph is ONNX Runtime's dynamic quantisation
of it (int8 weights of every weight MatMul, activations quantised per call), after the
few outlier input channels of the FFN output projections were split off into small fp32
MatMuls (:func:`quantize_int8`).

An export is checked before it is kept: on a fixed set of probe texts each graph must
give finite embeddings within cosine 0.99 of the sentence-transformers ones (a model
with NaN or damaged weights is refused, not written). The folder holds the graphs, the
model's ``tokenizer.json`` and ``meta.json`` (source model id, each file's SHA-256, the
probe cosines); :class:`chunksel.retrieval.onnx_encoder.OnnxEncoder` verifies the
digests when it opens them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError, require
from chunksel.export.ops import int8_kernels_saturate

#: minimum cosine between an exported graph's embedding and sentence-transformers' one
MIN_COSINE = 0.99
OPSET = 17
QUANTIZE = ("fp32", "int8")
#: probe texts of varied length (padding inside a batch is part of what is checked)
PROBES = (
    "Who wrote Hamlet?",
    "Hamlet is a tragedy written by William Shakespeare sometime between 1599 and 1601.",
    "The Nile is a major north-flowing river in northeastern Africa. " * 6,
    "what is the capital city of france",
    "PopQA: In what country is Chapel Hill?",
)


def load_tokenizer(path: str | Path, max_seq_length: int) -> Any:
    """The model's fast tokenizer, truncating to ``max_seq_length`` and padding per batch."""
    tokenizers = require("tokenizers", "retrieval")
    tok = tokenizers.Tokenizer.from_file(str(path))
    tok.enable_truncation(max_length=max_seq_length)
    pad_id = tok.token_to_id("[PAD]")
    tok.enable_padding(pad_id=0 if pad_id is None else pad_id, pad_token="[PAD]")
    return tok


def tokenize(tok: Any, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(input_ids, attention_mask) int64 arrays of one padded batch."""
    enc = tok.encode_batch(texts)
    ids = np.asarray([e.ids for e in enc], dtype=np.int64)
    mask = np.asarray([e.attention_mask for e in enc], dtype=np.int64)
    return ids, mask


def graph_file(quantize: str) -> str:
    return f"encoder.{quantize}.onnx"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def default_dir(model_id: str) -> Path:
    """Where the export of encoder ``model_id`` lives: ``CHUNKSEL_CACHE/onnx-encoder/<id>``."""
    from chunksel.config import cache_root

    return cache_root() / "onnx-encoder" / model_id


def _traced_module(model_dir: Path) -> Any:
    torch = require("torch", "retrieval")
    transformers = require("transformers", "retrieval")

    bert = transformers.AutoModel.from_pretrained(str(model_dir), attn_implementation="eager",
                                                  local_files_only=True).eval()

    class MeanPooled(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=torch.zeros_like(input_ids)).last_hidden_state
            mask = attention_mask.unsqueeze(-1).to(out.dtype)
            pooled = (out * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1)

    return MeanPooled(bert)


def reference_embeddings(model_dir: Path, texts: list[str], max_seq_length: int) -> np.ndarray:
    """sentence-transformers' float32, L2-normalised embeddings of ``texts`` by the model
    in ``model_dir`` on the CPU (what an export is checked against)."""
    st = require("sentence_transformers", "retrieval")
    model = st.SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    model.max_seq_length = max_seq_length
    emb = model.encode(texts, batch_size=64, show_progress_bar=False, convert_to_numpy=True,
                       normalize_embeddings=True)
    return np.ascontiguousarray(emb, dtype=np.float32)


def export_encoder(model_dir: str | Path, out: str | Path, model_id: str,
                   quantize: tuple[str, ...] = QUANTIZE, max_seq_length: int = 256) -> Path:
    """Export the encoder in ``model_dir`` as ONNX (fp32 and/or int8) into ``out``; returns
    the folder.

    Args:
        model_dir: a local sentence-transformers directory
            (:class:`~chunksel.retrieval.onnx_encoder.OnnxEncoder` passes its model's).
        out: the folder (the engine's own is :func:`default_dir` of the model's id).
        model_id: the model's id, recorded in ``meta.json`` (the engine checks it:
            :attr:`~chunksel.retrieval.encoder.Encoder.model_id`).
        quantize: which graphs to write (``"fp32"``, ``"int8"``).
        max_seq_length: tokens kept per text (as :class:`~chunksel.retrieval.encoder.Encoder`).

    Raises:
        DataError: a graph's probe embeddings are not finite or fall below
            :data:`MIN_COSINE` against sentence-transformers (nothing is written).
    """
    torch = require("torch", "retrieval")
    require("onnx", "export")
    require("onnxruntime", "export")
    for q in quantize:
        if q not in QUANTIZE:
            raise DataError(f"quantize must be among {QUANTIZE}, got {q!r}")
    model_dir, out = Path(model_dir), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    try:
        module = _traced_module(model_dir)
        ids = torch.tensor([[101, 2040, 2626, 102, 0, 0], [101, 7592, 2003, 1037, 3231, 102]])
        mask = (ids != 0).long()
        fp32 = staging / graph_file("fp32")
        with torch.inference_mode():
            torch.onnx.export(module, (ids, mask), str(fp32), input_names=["input_ids", "attention_mask"],
                              output_names=["embedding"], opset_version=OPSET, dynamo=False,
                              dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                            "attention_mask": {0: "batch", 1: "tokens"}, "embedding": {0: "batch"}})
        shutil.copy(model_dir / "tokenizer.json", staging / "tokenizer.json")
        int8 = (quantize_int8(fp32, staging / graph_file("int8"), staging / "tokenizer.json", max_seq_length)
                if "int8" in quantize else None)
        want = reference_embeddings(model_dir, list(PROBES), max_seq_length)
        cosines: dict[str, list[float]] = {}
        for q in quantize:
            got = _run_graph(staging / graph_file(q), staging / "tokenizer.json", list(PROBES), max_seq_length)
            if not np.isfinite(got).all():
                raise DataError(f"the exported {q} encoder outputs NaN or infinite values (damaged weights?): "
                                "nothing was written")
            cos = (got * want).sum(1)
            if cos.min() < MIN_COSINE:
                raise DataError(f"the exported {q} encoder's embeddings differ from sentence-transformers' "
                                f"(cosine {cos.min():.4f} < {MIN_COSINE}): nothing was written")
            cosines[q] = [round(float(c), 6) for c in cos]
        if "fp32" not in quantize:
            fp32.unlink()
        files = [graph_file(q) for q in quantize] + ["tokenizer.json"]
        meta = {"model_id": model_id, "dim": int(want.shape[1]), "max_seq_length": max_seq_length,
                "opset": OPSET, "quantize": list(quantize), "int8": int8, "probe_cosines": cosines,
                "sha256": {f: _sha256(staging / f) for f in files}}
        (staging / "meta.json").write_text(json.dumps(meta, indent=2))
        mask_ = os.umask(0)
        os.umask(mask_)
        for f in [*files, "meta.json"]:
            os.chmod(staging / f, 0o666 & ~mask_)
        if out.exists():
            shutil.rmtree(out)
        os.replace(staging, out)
        os.chmod(out, 0o777 & ~mask_)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


#: the int8 recipe (part of meta.json: an export made by an older recipe is made again)
INT8_RECIPE = 6
#: ONNX Runtime graph fusions left off for the int8 graph: its fused SkipLayerNormalization
#: kernel took about 12% of an int8 encode here (6 ms of a question and five passages);
#: the unfused Add + LayerNormalization give the same vectors (to float rounding)
INT8_DISABLED_OPTIMIZERS = ("SkipLayerNormFusion",)
#: per layer, the input channels of the FFN output projection kept in fp32: those with the
#: highest calibrated peak |x|
OUTLIER_CHANNELS = 8
#: texts whose activations locate the outlier channels (a property of the model: the same
#: channels stand out on TriviaQA and HotpotQA training passages)
CALIBRATION = PROBES + (
    "Photosynthesis converts light energy into chemical energy stored in glucose.",
    "The 1998 FIFA World Cup was won by France, who beat Brazil 3-0 in the final in Saint-Denis.",
    "how many calories are in a boiled egg",
    "Ludwig van Beethoven was a German composer and pianist whose works span the transition "
    "from the Classical period to the Romantic era in Western music.",
    "Which element has the chemical symbol Fe?",
    "Mount Kilimanjaro is a dormant volcano in Tanzania with three volcanic cones: Kibo, Mawenzi "
    "and Shira. It is the highest mountain in Africa, about 5,895 metres above sea level.",
)


def ffn_output_matmuls(graph: Any) -> list[Any]:
    """The FFN output projections (``layer.<i>/output/dense/MatMul``), in layer order."""
    return [n for n in graph.graph.node if n.op_type == "MatMul" and "/output/dense/" in n.name
            and "/attention/" not in n.name]


def _layer(name: str) -> int:
    return int(name.split("/layer.")[1].split("/")[0])


def outlier_channels(fp32: Path, tokenizer: Path, max_seq_length: int, texts: tuple[str, ...] = CALIBRATION,
                     n: int = OUTLIER_CHANNELS) -> dict[int, list[int]]:
    """Per layer, the ``n`` input channels of the FFN output projection with the highest
    peak |x| over ``texts`` (each run alone, as the int8 encoder runs them), largest
    first. MiniLM has one or two dominant channels in each of the first four layers
    (peaks 14-24 against about 6 for the next); the next ones differ from text to text."""
    onnx = require("onnx", "export")
    ort = require("onnxruntime", "export")
    model = onnx.load(str(fp32))
    ffn = ffn_output_matmuls(model)
    for node in ffn:
        model.graph.output.append(onnx.helper.make_tensor_value_info(node.input[0], onnx.TensorProto.FLOAT, None))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    tok = load_tokenizer(tokenizer, max_seq_length)
    peak: list[np.ndarray | None] = [None] * len(ffn)
    for text in texts:
        ids, mask = tokenize(tok, [text])
        for j, x in enumerate(sess.run(None, {"input_ids": ids, "attention_mask": mask})[1:]):
            m = np.abs(x).reshape(-1, x.shape[-1]).max(0)
            peak[j] = m if peak[j] is None else np.maximum(peak[j], m)
    return {_layer(node.name): [int(c) for c in np.argsort(-m, kind="stable")[:n]] for node, m in zip(ffn, peak)}


def split_outlier_channels(model: Any, channels: dict[int, list[int]]) -> tuple[Any, list[str]]:
    """Rewrite each FFN output projection ``y = x W`` whose layer has outlier channels O as
    ``y = x[:, O] W[O] + (x * keep) (W * keep)`` (keep: 0 on O, 1 elsewhere): the same
    product, but the second MatMul's input no longer holds the outliers, so its per-tensor
    int8 range fits the other channels (mixed-precision decomposition, as in LLM.int8()).
    Returns the model (changed in place) and the names of the small fp32 MatMuls."""
    onnx = require("onnx", "export")
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    ffn = {n.name for n in ffn_output_matmuls(model)}
    nodes, fp32_nodes = [], []
    for n in model.graph.node:
        cols = channels.get(_layer(n.name), []) if n.name in ffn else []
        if not cols:
            nodes.append(n)
            continue
        w = numpy_helper.to_array(inits[n.input[1]]).astype(np.float32)
        idx = np.asarray(cols, dtype=np.int64)
        keep = np.ones(w.shape[0], dtype=np.float32)
        keep[idx] = 0.0
        p = n.name.rsplit("/", 1)[0] + "/outliers"
        model.graph.initializer.extend([numpy_helper.from_array(idx, p + "/idx"),
                                        numpy_helper.from_array(w[idx], p + "/W"),
                                        numpy_helper.from_array(keep, p + "/keep"),
                                        numpy_helper.from_array(w * keep[:, None], p + "/W_rest")])
        nodes += [helper.make_node("Gather", [n.input[0], p + "/idx"], [p + "/x"], axis=-1, name=p + "/Gather"),
                  helper.make_node("MatMul", [p + "/x", p + "/W"], [p + "/y"], name=p + "/MatMul"),
                  helper.make_node("Mul", [n.input[0], p + "/keep"], [p + "/x_rest"], name=p + "/Mul"),
                  helper.make_node("MatMul", [p + "/x_rest", p + "/W_rest"], [p + "/y_rest"], name=n.name),
                  helper.make_node("Add", [p + "/y", p + "/y_rest"], [n.output[0]], name=p + "/Add")]
        fp32_nodes.append(p + "/MatMul")
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    return model, fp32_nodes


def quantize_matmuls(src: Path, out: Path, fp32_nodes: list[str] | tuple[str, ...] = ()) -> bool:
    """ONNX Runtime's dynamic int8 quantisation of the weight MatMuls of ``src`` but
    ``fp32_nodes``, per output channel, 8-bit weights where the CPU's int8 kernels cannot
    saturate (7-bit otherwise: :func:`int8_kernels_saturate`). Returns that reduce_range."""
    onnx = require("onnx", "export")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    reduce_range = int8_kernels_saturate()
    quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     per_channel=True, reduce_range=reduce_range, nodes_to_exclude=list(fp32_nodes),
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    return reduce_range


def quantize_int8(fp32: Path, out: Path, tokenizer: Path, max_seq_length: int) -> dict:
    """ONNX Runtime's dynamic int8 quantisation of every weight MatMul, per output channel,
    8-bit weights where the CPU's int8 kernels cannot saturate (7-bit otherwise), after
    :func:`split_outlier_channels` took the FFN outputs' outlier channels
    (:func:`outlier_channels`) into small fp32 MatMuls. Returns the recipe (kept in
    meta.json).

    Recipe 4 kept the first four FFN output projections whole in fp32 instead; this one
    is about 26% faster at about the same accuracy (``docs/decisions/encoder-int8-recipe.md``)."""
    onnx = require("onnx", "export")

    channels = outlier_channels(fp32, tokenizer, max_seq_length)
    model, keep = split_outlier_channels(onnx.load(str(fp32)), channels)
    split = out.with_name(out.stem + ".split.onnx")
    onnx.save(model, str(split))
    try:
        reduce_range = quantize_matmuls(split, out, fp32_nodes=keep)
    finally:
        split.unlink(missing_ok=True)
    return {"recipe": INT8_RECIPE, "per_channel": True, "reduce_range": reduce_range,
            "outlier_channels": {str(k): v for k, v in channels.items()}, "fp32_nodes": keep,
            "disabled_optimizers": list(INT8_DISABLED_OPTIMIZERS)}


def session(graph: Path, quantize: str, threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session for one graph file (int8: :data:`INT8_DISABLED_OPTIMIZERS`)."""
    from chunksel.export.sessions import cpu_session

    disabled = list(INT8_DISABLED_OPTIMIZERS) if quantize == "int8" else []
    return cpu_session(graph, threads, disabled_optimizers=disabled)


def _run_graph(graph: Path, tokenizer: Path, texts: list[str], max_seq_length: int) -> np.ndarray:
    """Embed ``texts`` with one graph file (the exporter's own check)."""
    sess = session(graph, "int8" if graph.name == graph_file("int8") else "fp32")
    ids, mask = tokenize(load_tokenizer(tokenizer, max_seq_length), texts)
    return sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
