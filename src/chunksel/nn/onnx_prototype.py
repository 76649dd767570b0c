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

OPSET = 17
#: version of the exported graph's input/output contract
EXPORT_FORMAT = 1
MODES = ("fp32", "int8")
_TINY = np.float32(1e-30)


def _require_onnx():
    try:
        import onnx
    except ImportError as err:  # pragma: no cover - the [export] extra is part of [all]
        raise ImportError("ONNX export needs the 'onnx' package: pip install 'chunksel[export]'") from err
    return onnx


class _Graph:
    """A small ONNX graph builder (unique names, constants as initializers).

    A branch (:meth:`branch`) shares its parent's names and puts its constants among the
    parent's initializers, so two branches of an ``If`` can use one copy of the weights.
    """

    def __init__(self, parent: _Graph | None = None) -> None:
        self.onnx = _require_onnx()
        self.nodes: list[Any] = []
        self.root = parent.root if parent is not None else self
        self.inits: list[Any] = [] if parent is None else self.root.inits
        self._n = 0

    def name(self, stem: str) -> str:
        self.root._n += 1
        return f"{stem}_{self.root._n}"

    def const(self, value: Any, stem: str = "c", dtype: Any = np.float32) -> str:
        from onnx import numpy_helper

        name = self.name(stem)
        self.inits.append(numpy_helper.from_array(np.asarray(value, dtype=dtype), name))
        return name

    def op(self, op_type: str, *inputs: str, stem: str | None = None, out: str | None = None, **attrs: Any) -> str:
        out = out or self.name(stem or op_type.lower())
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def ops(self, op_type: str, *inputs: str, n_out: int) -> list[str]:
        outs = [self.name(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(self.onnx.helper.make_node(op_type, list(inputs), outs))
        return outs

    def branch(self) -> _Graph:
        return _Graph(self)

    def subgraph(self, output: str, name: str) -> Any:
        """This branch as a graph (no inputs, one float output) for an ``If`` node."""
        from onnx import TensorProto, helper

        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
        return helper.make_graph(self.nodes, name, [], [out])


def _dense(g: _Graph, x: str, w: np.ndarray, b: np.ndarray) -> str:
    """fp32 ``x @ w.T + b`` for a torch-layout weight ``w`` (out, in)."""
    wt = g.const(np.ascontiguousarray(w.T), "W")
    return g.op("Add", g.op("MatMul", x, wt), g.const(b, "b"))


@dataclass(frozen=True)
class _Int8Layer:
    """Initializer names of one int8 layer: weights (in, out), their column scales, the
    fp32 bias, and the weights' column sums (for a zero-point correction; ``None`` for a
    layer whose input is nonnegative)."""

    wq: str
    w_scale: str
    bias: str
    col_sum: str | None


def _int8_layer(g: _Graph, w: np.ndarray, b: np.ndarray, nonnegative: bool) -> _Int8Layer:
    """Symmetric int8 weights, one scale per output column, for a torch-layout ``w``."""
    wt = np.ascontiguousarray(w.T, dtype=np.float32)  # (in, out)
    w_scale = np.maximum(np.abs(wt).max(axis=0), 1e-12) / 127.0
    wq = np.clip(np.round(wt / w_scale), -127, 127).astype(np.int8)
    col_sum = None if nonnegative else g.const(wq.astype(np.int32).sum(axis=0, keepdims=True), "colsum", np.int32)
    return _Int8Layer(g.const(wq, "Wq", np.int8), g.const(w_scale, "ws"), g.const(b, "b"), col_sum)


def _dense_int8(g: _Graph, x: str, layer: _Int8Layer, per_row: bool) -> str:
    """Dynamic-int8 ``x @ w.T + b``: uint8 activations, per-column int8 weights.

    ``per_row=False`` quantises the whole input with ``DynamicQuantizeLinear`` (the graph
    uses it for one row, where the two coincide); ``per_row=True`` applies the same rule
    to each row with elementwise ops. For a nonnegative input (a ReLU output, no
    ``layer.col_sum``) each row's minimum is 0, so the zero point is 0 and its correction
    drops out.
    """
    from onnx import TensorProto

    if not per_row:
        q, scale, zp = g.ops("DynamicQuantizeLinear", x, n_out=3)
        acc = g.op("MatMulInteger", q, layer.wq, zp)
    else:
        c255 = g.const(255.0)
        hi = g.op("ReduceMax", x, axes=[1], keepdims=1)
        if layer.col_sum is None:
            scale = g.op("Max", g.op("Div", hi, c255), g.const(_TINY))
            q = g.op("Round", g.op("Div", x, scale))  # in [0, 255] by construction
            acc = g.op("MatMulInteger", g.op("Cast", q, to=TensorProto.UINT8), layer.wq)
        else:
            zero = g.const(0.0)
            lo = g.op("Min", g.op("ReduceMin", x, axes=[1], keepdims=1), zero)
            hi = g.op("Max", hi, zero)
            scale = g.op("Max", g.op("Div", g.op("Sub", hi, lo), c255), g.const(_TINY))
            zp = g.op("Clip", g.op("Round", g.op("Div", g.op("Neg", lo), scale)), zero, c255)
            q = g.op("Clip", g.op("Add", g.op("Round", g.op("Div", x, scale)), zp), zero, c255)
            acc = g.op("MatMulInteger", g.op("Cast", q, to=TensorProto.UINT8), layer.wq)
            # subtract the zero point's share: sum_k (q_k - zp) w_kj = acc_j - zp * sum_k w_kj
            acc = g.op("Sub", acc, g.op("Mul", g.op("Cast", zp, to=TensorProto.INT32), layer.col_sum))
    # (acc * scale) * w_scale + b, in this order in both branches so that they agree bit for
    # bit. (acc * (scale * w_scale) would let ONNX Runtime fuse the layer, but its fused
    # kernel mishandles per-row scales: 1e-3 errors in a batch.)
    y = g.op("Mul", g.op("Mul", g.op("Cast", acc, to=TensorProto.FLOAT), scale), layer.w_scale)
    return g.op("Add", y, layer.bias)


def _mlp_int8(g: _Graph, x: str, layers: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """The int8 MLP as an ``If`` on the batch size: one row takes the
    ``DynamicQuantizeLinear`` branch (fewer nodes, the fastest at batch 1), more rows the
    per-row branch. Both compute the same numbers for a row and share one copy of the weights."""
    params = [_int8_layer(g, w.astype(np.float32), b.astype(np.float32), i > 0) for i, (w, b) in enumerate(layers)]
    one_row = g.op("Equal", g.op("Shape", x, start=0, end=1), g.const([1], "one", np.int64))
    branches = []
    for per_row in (False, True):
        sub = g.branch()
        y = x
        for i, layer in enumerate(params):
            y = _dense_int8(sub, y, layer, per_row=per_row)
            if i < len(params) - 1:
                y = sub.op("Relu", y)
        branches.append(sub.subgraph(y, "per_row" if per_row else "one_row"))
    return g.op("If", one_row, then_branch=branches[0], else_branch=branches[1])


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

    g = _Graph()
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
            x = _dense(g, x, w.astype(np.float32), b.astype(np.float32))
            if i < len(layers) - 1:
                x = g.op("Relu", x)
    else:
        folded = state.model.fold_batchnorm().net
        layers = [
            (m.weight.detach().numpy(), m.bias.detach().numpy()) for m in folded if isinstance(m, torch.nn.Linear)
        ]
        x = g.op("Mul", g.op("Sub", x, g.const(mean, "mean")), g.const(1.0 / scale, "inv_scale"))
        x = _mlp_int8(g, x, layers)
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
            import onnxruntime as ort
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
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads or _default_threads()
        opts.inter_op_num_threads = 1
        opts.log_severity_level = 3
        try:
            self.session = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
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
