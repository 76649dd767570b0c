"""ONNX export of a trained prototype selector, and an ONNX Runtime engine for it.

The exported graph is self-contained: an application with ONNX Runtime alone (no torch,
no chunksel) feeds the warm-up features and the candidates' embeddings and reads the
scores.

Inputs (``n`` instances, only the blocks the selector uses):
    ``h``  (n, d_h) float32: the generator's final-layer last-token hidden state;
    ``r``  (n, d_r) float32: the routing-weighted expert-response scores;
    ``e``  (n, K, d_e) float32: the top-K candidates' L2-normalised retriever
           embeddings in retrieval order, all-zero rows at padded slots.
Outputs:
    ``scores``    (n, K) float32: ``cos(y~, e_k)``, ``-inf`` at all-zero (padded) rows;
    ``prototype`` (n, d_e) float32: the unit evidence prototype ``y~``.

The graph assembles ``x = [h ; r ; vec(E)]``, keeps the feature-budget dims, standardises,
runs the BatchNorm-folded MLP, L2-normalises and scores (Eqs. 7 and 9). The layout, K, the
blocks and the models that gave the features are stored in the file's metadata
(``chunksel.*`` keys).

Two numeric modes:

``"fp32"``
    the scaler is folded into the first Linear layer (as in
    :class:`~chunksel.nn.prototype.InferenceMLP`).
``"int8"``
    dynamic quantisation: int8 weights, symmetric, one scale per output column; each
    layer's input is quantised to uint8 *per row* at run time (asymmetric,
    ``scale = (max(0, max x) - min(0, min x)) / 255``, the ``DynamicQuantizeLinear``
    rule), multiplied with ``MatMulInteger`` in int32 and rescaled. Per-row ranges make
    an instance's scores independent of the other instances in its batch. The MLP is an
    ``If`` on the batch size: a single row takes a branch built from the standard
    ``DynamicQuantizeLinear`` op (under half the nodes, the fastest path at batch 1),
    and computes what ``onnxruntime.quantization.quantize_dynamic`` (per-channel int8
    weights) makes of the fp32 graph; the per-row branch gives a row the same numbers
    inside any batch. The scaler stays in front of the first layer so quantisation sees
    standardised inputs.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError
from chunksel.export.ops import GraphBuilder, dense, int8_weight_max, mlp_int8

OPSET = 17
#: version of the exported graph's input/output contract
EXPORT_FORMAT = 1
MODES = ("fp32", "int8")

@dataclass(frozen=True)
class PrototypeState:
    """What the exporter reads of a fitted prototype selector (its public export state,
    :meth:`chunksel.selectors.prototype.PrototypeSelector.export_state`).

    Attributes:
        layout: the feature layout (``d_h``, ``d_r``, ``k``, ``d_e``, ``blocks``, ``to_dict()``).
        feature_mask: (D,) bool, the input dims kept (feature budget).
        mean, scale: the input scaler over the kept dims.
        model: the trained :class:`~chunksel.nn.prototype.PrototypeMLP`.
        tau, generator_id, encoder_id: recorded in the graph's metadata.
    """

    layout: Any
    feature_mask: np.ndarray
    mean: np.ndarray
    scale: np.ndarray
    model: Any
    tau: float
    generator_id: str
    encoder_id: str


def prototype_graph(selector: Any, quantize: str = "fp32") -> Any:
    """The ONNX ``ModelProto`` of a fitted prototype selector (or its :class:`PrototypeState`)."""
    import torch
    from onnx import TensorProto, helper

    from chunksel.nn.prototype import InferenceMLP

    if quantize in (None, "", "none"):
        quantize = "fp32"
    if quantize not in MODES:
        raise ConfigError(f"ONNX export supports quantize {' or '.join(MODES)}, got {quantize!r}")
    state: PrototypeState = selector if isinstance(selector, PrototypeState) else selector.export_state()
    lay = state.layout
    keep = np.asarray(state.feature_mask, dtype=bool)
    mean = np.asarray(state.mean, dtype=np.float32)
    scale = np.asarray(state.scale, dtype=np.float32)

    g = GraphBuilder()
    inputs, parts = [], []
    if "hs" in lay.blocks:
        inputs.append(helper.make_tensor_value_info("h", TensorProto.FLOAT, ["n", lay.d_h]))
        parts.append("h")
    if "rw" in lay.blocks:
        inputs.append(helper.make_tensor_value_info("r", TensorProto.FLOAT, ["n", lay.d_r]))
        parts.append("r")
    inputs.append(helper.make_tensor_value_info("e", TensorProto.FLOAT, ["n", lay.k, lay.d_e]))
    if "chunk" in lay.blocks:
        parts.append(g.op("Reshape", "e", g.const([-1, lay.k * lay.d_e], "shape", np.int64)))
    x = parts[0] if len(parts) == 1 else g.op("Concat", *parts, axis=1)
    if not keep.all():
        x = g.op("Gather", x, g.const(np.flatnonzero(keep), "kept", np.int64), axis=1)

    if quantize == "fp32":
        engine = InferenceMLP(state.model, torch.from_numpy(mean), torch.from_numpy(scale), "fp32")
        layers = [(w.numpy(), b.numpy()) for w, b in engine.layers]
        for i, (w, b) in enumerate(layers):
            x = dense(g, x, w.astype(np.float32), b.astype(np.float32))
            if i < len(layers) - 1:
                x = g.op("Relu", x)
    else:
        folded = state.model.fold_batchnorm().net
        layers = [
            (m.weight.detach().numpy(), m.bias.detach().numpy()) for m in folded if isinstance(m, torch.nn.Linear)
        ]
        x = g.op("Mul", g.op("Sub", x, g.const(mean, "mean")), g.const(1.0 / scale, "inv_scale"))
        x = mlp_int8(g, x, layers)
    norm = g.op("Max", g.op("ReduceL2", x, axes=[1], keepdims=1), g.const(1e-12))
    proto = g.op("Div", x, norm, out="prototype")

    # Eq. 7 on the candidates: cosine, -inf at all-zero (padded) rows
    dot = g.op("MatMul", "e", g.op("Unsqueeze", proto, g.const([2], "axes", np.int64)))
    dot = g.op("Squeeze", dot, g.const([2], "axes", np.int64))
    e_norm = g.op("ReduceL2", "e", axes=[2], keepdims=0)
    real = g.op("Greater", e_norm, g.const(0.0))
    cos = g.op("Div", dot, e_norm)  # 0/0 at padded rows, replaced next
    g.nodes.append(helper.make_node("Where", [real, cos, g.const(-np.inf)], ["scores"]))
    outputs = [
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["n", lay.k]),
        helper.make_tensor_value_info("prototype", TensorProto.FLOAT, ["n", lay.d_e]),
    ]
    graph = helper.make_graph(g.nodes, "chunksel_prototype", inputs, outputs, g.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="chunksel",
        doc_string="chunksel prototype selector: scores = cos(MLP([h; r; vec(E)]), e_k)",
    )
    model.ir_version = 8
    from chunksel import __version__

    meta = {
        "format": str(EXPORT_FORMAT),
        "version": __version__,
        "quantize": quantize,
        "layout": json.dumps(lay.to_dict()),
        "kept_dims": str(int(keep.sum())),
        "generator_id": state.generator_id,
        "encoder_id": state.encoder_id,
        "tau": str(state.tau),
    }
    if quantize == "int8":  # 64 on x86 without VNNI, where 8-bit weights saturate the kernels
        meta["int8_weight_max"] = str(int8_weight_max())
    helper.set_model_props(model, {f"chunksel.{k}": v for k, v in meta.items()})
    g.onnx.checker.check_model(model)
    return model


def export_prototype(selector: Any, path: str | Path, quantize: str = "fp32") -> Path:
    """Write the selector's ONNX graph to ``path`` (atomically) and return the path."""
    model = prototype_graph(selector, quantize)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(model.SerializeToString())
    tmp.replace(path)
    return path


@dataclass(frozen=True)
class ExportLayout:
    """The input layout recorded in an export (no torch needed to read it)."""

    d_h: int
    d_r: int
    k: int
    d_e: int
    blocks: tuple[str, ...]


class OnnxPrototype:
    """Runs an exported prototype graph with ONNX Runtime (CPU); needs numpy and
    onnxruntime only (no torch, no onnx).

    Args:
        model: a path to an exported ``.onnx`` file, its bytes, or a ``ModelProto``.
        threads: intra-op threads (default: torch's thread count when torch is
            imported, else 1).
    """

    def __init__(self, model: str | Path | bytes | Any, threads: int | None = None) -> None:
        try:
            import onnxruntime  # noqa: F401
        except ImportError as err:  # pragma: no cover - the [export] extra is part of [all]
            raise ImportError("the ONNX engine needs onnxruntime: pip install 'chunksel[export]'") from err
        source = model
        if isinstance(model, (str, Path)):
            path = Path(model)
            if not path.is_file():
                raise DataError(f"no ONNX model at {path}")
            model = path.read_bytes()
        elif not isinstance(model, bytes):
            model = model.SerializeToString()
        from chunksel.export.sessions import cpu_session

        try:
            self.session = cpu_session(model, threads or _default_threads(), quiet=True)
        except Exception as err:  # onnxruntime raises its own error types
            first = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"corrupt ONNX model {source if isinstance(source, (str, Path)) else ''}: {first}") from None
        props = self.session.get_modelmeta().custom_metadata_map
        if "chunksel.layout" not in props:
            raise DataError("not a chunksel prototype export: its metadata has no chunksel.layout")
        if props.get("chunksel.format") != str(EXPORT_FORMAT):
            raise DataError(
                f"ONNX export format {props.get('chunksel.format')!r} is not supported (this chunksel reads {EXPORT_FORMAT})"
            )
        self.metadata = {k.split(".", 1)[1]: v for k, v in props.items() if k.startswith("chunksel.")}
        try:
            lay = json.loads(self.metadata["layout"])
            self.layout = ExportLayout(
                int(lay["d_h"]), int(lay["d_r"]), int(lay["k"]), int(lay["d_e"]), tuple(lay["blocks"])
            )
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"corrupt chunksel.layout metadata in the ONNX model: {err}") from None
        self.quantize = self.metadata.get("quantize", "fp32")
        self.input_names = [i.name for i in self.session.get_inputs()]
        self._uses_h, self._uses_r = "h" in self.input_names, "r" in self.input_names
        self._scores_only = ["scores"]

    def __call__(
        self, h: np.ndarray | None, r: np.ndarray | None, e: np.ndarray
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(scores (n, K), prototypes (n, d_e))`` for full-K embeddings ``e`` (n, K, d_e)."""
        lay = self.layout
        e = np.ascontiguousarray(e, dtype=np.float32)
        if e.ndim != 3 or e.shape[1:] != (lay.k, lay.d_e):
            raise DataError(f"candidate embeddings must be (n, {lay.k}, {lay.d_e}), got shape {e.shape}")
        feeds = {"e": e}
        for name, arr, dim in (("h", h, lay.d_h), ("r", r, lay.d_r)):
            if name not in self.input_names:
                continue
            if arr is None:
                raise DataError(f"this model uses the {'hs' if name == 'h' else 'rw'} block: pass {name}")
            arr = np.ascontiguousarray(arr, dtype=np.float32).reshape(len(e), -1)
            if arr.shape[1] != dim:
                raise DataError(f"{name} has {arr.shape[1]} dims, the model expects {dim}")
            feeds[name] = arr
        scores, proto = self.session.run(None, feeds)
        return scores, proto

    def scores(self, h: np.ndarray | None, r: np.ndarray | None, e: np.ndarray) -> np.ndarray:
        """``scores`` only, for inputs already checked: float32, C-contiguous, 2-D ``h``/``r``
        and (n, K, d_e) ``e`` (the selector's fast path; no conversions)."""
        feeds = {"e": e}
        if self._uses_h:
            feeds["h"] = h
        if self._uses_r:
            feeds["r"] = r
        return self.session.run(self._scores_only, feeds)[0]


def _default_threads() -> int:
    import sys

    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else 1
