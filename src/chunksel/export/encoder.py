"""The retriever encoder (all-MiniLM-L6-v2) as an ONNX graph, fp32 and int8.

The graph is the sentence-transformers pipeline after tokenisation: the BERT encoder,
mean pooling over the attention mask and L2 normalisation, traced from the
``transformers`` model with the eager attention (no data-dependent mask shortcut) and
dynamic batch and sequence axes. The int8 graph is ONNX Runtime's dynamic quantisation
of it (int8 weights of the weight MatMuls but the first four FFN output projections,
activations quantised per call; :func:`quantize_int8`).

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


def export_encoder(model: str | Path | None = None, out: str | Path | None = None,
                   quantize: tuple[str, ...] = QUANTIZE, max_seq_length: int = 256) -> Path:
    """Export the encoder as ONNX (fp32 and/or int8) into ``out``; returns the folder.

    Args:
        model: a local sentence-transformers directory (default: the packaged MiniLM).
        out: the folder (default :func:`default_dir` of the model's id).
        quantize: which graphs to write (``"fp32"``, ``"int8"``).
        max_seq_length: tokens kept per text (as :class:`~chunksel.retrieval.encoder.Encoder`).

    Raises:
        DataError: a graph's probe embeddings are not finite or fall below
            :data:`MIN_COSINE` against sentence-transformers (nothing is written).
    """
    from chunksel.retrieval.encoder import Encoder

    torch = require("torch", "retrieval")
    require("onnx", "export")
    ort = require("onnxruntime", "export")
    for q in quantize:
        if q not in QUANTIZE:
            raise DataError(f"quantize must be among {QUANTIZE}, got {q!r}")
    st = Encoder(model, max_seq_length=max_seq_length)
    out = Path(out) if out is not None else default_dir(st.model_id)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".export-", dir=out.parent))
    try:
        module = _traced_module(st.model_dir)
        ids = torch.tensor([[101, 2040, 2626, 102, 0, 0], [101, 7592, 2003, 1037, 3231, 102]])
        mask = (ids != 0).long()
        fp32 = staging / graph_file("fp32")
        with torch.inference_mode():
            torch.onnx.export(module, (ids, mask), str(fp32), input_names=["input_ids", "attention_mask"],
                              output_names=["embedding"], opset_version=OPSET, dynamo=False,
                              dynamic_axes={"input_ids": {0: "batch", 1: "tokens"},
                                            "attention_mask": {0: "batch", 1: "tokens"}, "embedding": {0: "batch"}})
        int8 = quantize_int8(fp32, staging / graph_file("int8")) if "int8" in quantize else None
        shutil.copy(st.model_dir / "tokenizer.json", staging / "tokenizer.json")
        want = st.encode(list(PROBES), progress=False)
        cosines: dict[str, list[float]] = {}
        for q in quantize:
            got = _run_graph(ort, staging / graph_file(q), staging / "tokenizer.json", list(PROBES), max_seq_length)
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
        meta = {"model_id": st.model_id, "dim": int(want.shape[1]), "max_seq_length": max_seq_length,
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
INT8_RECIPE = 4


def int8_kernels_saturate() -> bool:
    """True where ONNX Runtime's u8 x s8 kernels may saturate 16-bit sums (x86 without
    VNNI or AMX: ``vpmaddubsw``), which is what the 7-bit weight range is for. ARM's dot
    products and x86 VNNI/AMX accumulate in 32 bits."""
    import platform

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # unknown x86: the safe range
    return not any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


#: layers whose FFN output projection stays fp32 in the int8 graph
INT8_FP32_FFN_LAYERS = (0, 1, 2, 3)


def int8_fp32_nodes(graph: Any) -> list[str]:
    """The weight MatMuls left in fp32: the FFN output projections of the first four
    layers (:data:`INT8_FP32_FFN_LAYERS`). Their inputs (GELU outputs) have the widest
    per-tensor ranges. Over the 16,938 test texts of the six datasets (full profile),
    every weight MatMul in int8 puts texts below cosine 0.99 against sentence-transformers
    (PopQA alone: 16 of 720, min 0.985); the first two kept in fp32, 5 texts (min
    0.987); the first four, none of the 60 worst of those (min 0.9919), for about 15%
    more time than the first two and less than all six (the earlier recipe, with 7-bit
    weights) (``benchmarks/results/encoder_onnx.json``)."""
    return [n.name for n in graph.graph.node if n.op_type == "MatMul"
            and any(f"/layer.{i}/output/dense/" in n.name for i in INT8_FP32_FFN_LAYERS)]


def quantize_int8(fp32: Path, out: Path) -> dict:
    """ONNX Runtime's dynamic int8 quantisation of the weight MatMuls, per output
    channel, 8-bit weights where the CPU's int8 kernels cannot saturate (7-bit otherwise),
    with :func:`int8_fp32_nodes` left in fp32. Returns the recipe (kept in meta.json)."""
    onnx = require("onnx", "export")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    keep = int8_fp32_nodes(onnx.load(str(fp32)))
    reduce_range = int8_kernels_saturate()
    quantize_dynamic(str(fp32), str(out), weight_type=QuantType.QInt8, op_types_to_quantize=["MatMul"],
                     per_channel=True, reduce_range=reduce_range, nodes_to_exclude=keep)
    return {"recipe": INT8_RECIPE, "per_channel": True, "reduce_range": reduce_range, "fp32_nodes": keep}


def _run_graph(ort: Any, graph: Path, tokenizer: Path, texts: list[str], max_seq_length: int) -> np.ndarray:
    """Embed ``texts`` with one graph file (the exporter's own check)."""
    sess = ort.InferenceSession(str(graph), providers=["CPUExecutionProvider"])
    ids, mask = tokenize(load_tokenizer(tokenizer, max_seq_length), texts)
    return sess.run(None, {"input_ids": ids, "attention_mask": mask})[0]
