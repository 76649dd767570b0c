"""The cross-encoder as an ONNX graph, and its ONNX Runtime runner.

The graph is the fine-tuned BERT sequence classifier itself: word-piece ids, attention
mask and token types in, the one relevance logit per pair out. ``quantize=True`` applies
ONNX Runtime's dynamic quantisation (int8 weights per channel, activations quantised per
call). The runner tokenises with the model's own fast tokenizer, so the graph and
:class:`~chunksel.selectors.crossencoder.CrossEncoderSelector`'s torch path see the same
inputs.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError

OPSET = 17
INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def _classifier(model: Any) -> Any:
    """The transformers sequence classifier inside a sentence-transformers CrossEncoder."""
    inner = model[0] if hasattr(model, "__getitem__") else model
    net = getattr(inner, "auto_model", None) or getattr(inner, "model", None)
    if net is None:
        raise DataError(f"cannot find the transformers model inside {type(model).__name__}")
    return net


def export_crossencoder(model: Any, path: str | Path, quantize: bool = False) -> Path:
    """Write ``model`` (a CrossEncoder) as an ONNX graph at ``path``; returns the path."""
    import torch

    net = _classifier(model).eval()

    class _Logits(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids, attention_mask, token_type_ids):
            out = self.inner(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids)
            return out.logits[:, 0]

    ids = torch.ones((2, 8), dtype=torch.long)
    example = (ids, torch.ones_like(ids), torch.zeros_like(ids))
    dyn = {name: {0: "pairs", 1: "tokens"} for name in INPUTS} | {"logits": {0: "pairs"}}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = Path(tmp) / "fp32.onnx"
        # the tracer warns about the attention mask's shape checks and the index op: the
        # graph takes dynamic pairs and tokens, which a test checks against torch's scores
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore", category=torch.jit.TracerWarning)
            warnings.filterwarnings("ignore", message=".*aten::index.*")
            torch.onnx.export(_Logits(net), example, str(fp32), dynamo=False, input_names=list(INPUTS),
                              output_names=["logits"], dynamic_axes=dyn, opset_version=OPSET)
        src = fp32
        if quantize:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            from chunksel.export.ops import int8_kernels_saturate

            src = Path(tmp) / "int8.onnx"
            quantize_dynamic(str(fp32), str(src), per_channel=True, weight_type=QuantType.QInt8,
                             reduce_range=int8_kernels_saturate())
        tmp_out = path.with_suffix(path.suffix + ".tmp")
        tmp_out.write_bytes(src.read_bytes())
        os.replace(tmp_out, path)
    return path


class OnnxCrossEncoder:
    """Scores (question, chunk) pairs with an exported cross-encoder graph.

    Args:
        path: the ``.onnx`` file.
        tokenizer: the model's tokenizer (``CrossEncoder.tokenizer``).
        max_length: word pieces per pair (as in training).
        threads: ONNX Runtime intra-op threads (1: the latency setting).
    """

    def __init__(self, path: str | Path, tokenizer: Any, max_length: int, threads: int = 1) -> None:
        from chunksel.export.sessions import cpu_session

        self.session = cpu_session(path, threads)
        self.tokenizer = tokenizer
        self.max_length = max_length
        #: pairs per run: a whole evaluation split in one padded batch would hold gigabytes
        #: of attention maps; a query's K pairs are one batch
        self.batch_pairs = 32

    def score(self, pairs: list[tuple[str, str]]) -> np.ndarray:
        """One logit per pair, float64."""
        if not pairs:
            return np.zeros(0)
        out = []
        for start in range(0, len(pairs), self.batch_pairs):
            part = pairs[start:start + self.batch_pairs]
            enc = self.tokenizer([q for q, _ in part], [d for _, d in part], padding=True,
                                 truncation=True, max_length=self.max_length, return_tensors="np")
            feeds = {name: np.asarray(enc[name], dtype=np.int64) for name in INPUTS if name in enc}
            if "token_type_ids" not in feeds:
                feeds["token_type_ids"] = np.zeros_like(feeds["input_ids"])
            (logits,) = self.session.run(["logits"], feeds)
            out.append(np.asarray(logits, dtype=np.float64).reshape(-1))
        return np.concatenate(out)
