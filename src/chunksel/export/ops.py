"""A small ONNX graph builder and the dense / int8 layers the exported graphs are made of.

The int8 layers quantise each layer's input at run time (``DynamicQuantizeLinear``-style
uint8, per row or per batch), multiply with ``MatMulInteger`` in int32 and rescale;
weights are int8 with one scale per output column (see :mod:`chunksel.export.prototype`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

_TINY = np.float32(1e-30)


def require_onnx():
    try:
        import onnx
    except ImportError as err:  # pragma: no cover - the [export] extra is part of [all]
        raise ImportError("ONNX export needs the 'onnx' package: pip install 'chunksel[export]'") from err
    return onnx


class GraphBuilder:
    """A small ONNX graph builder (unique names, constants as initializers).

    A branch (:meth:`branch`) shares its parent's names and puts its constants among the
    parent's initializers, so two branches of an ``If`` can use one copy of the weights.
    """

    def __init__(self, parent: GraphBuilder | None = None) -> None:
        self.onnx = require_onnx()
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

    def branch(self) -> GraphBuilder:
        return GraphBuilder(self)

    def subgraph(self, output: str, name: str) -> Any:
        """This branch as a graph (no inputs, one float output) for an ``If`` node."""
        from onnx import TensorProto, helper

        out = helper.make_tensor_value_info(output, TensorProto.FLOAT, None)
        return helper.make_graph(self.nodes, name, [], [out])


def dense(g: GraphBuilder, x: str, w: np.ndarray, b: np.ndarray) -> str:
    """fp32 ``x @ w.T + b`` for a torch-layout weight ``w`` (out, in)."""
    wt = g.const(np.ascontiguousarray(w.T), "W")
    return g.op("Add", g.op("MatMul", x, wt), g.const(b, "b"))


def int8_kernels_saturate() -> bool:
    """True where ONNX Runtime's u8 x s8 kernels may saturate 16-bit sums (x86 without
    VNNI or AMX: ``vpmaddubsw`` adds two u8 x s8 products into an int16, and 255 x 127 x 2
    overflows it), which is what the 7-bit weight range is for. ARM's dot products and x86
    VNNI/AMX accumulate in 32 bits. Every int8 export reads it (``reduce_range`` of
    ``quantize_dynamic``, :func:`int8_layer`'s weight range)."""
    import platform
    from pathlib import Path

    if platform.machine().lower() not in ("x86_64", "amd64", "i386", "i686"):
        return False
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # unknown x86: the safe range
    return not any(f in flags for f in ("avx512_vnni", "avx_vnni", "amx_int8"))


def int8_weight_max(reduce_range: bool | None = None) -> int:
    """The largest |int8 weight| of a symmetric layer: 127, or 64 where the kernels
    saturate (``reduce_range``, ONNX Runtime's reduced int8 range [-64, 64]; None:
    :func:`int8_kernels_saturate`). 255 x 64 x 2 fits an int16."""
    return 64 if (int8_kernels_saturate() if reduce_range is None else reduce_range) else 127


@dataclass(frozen=True)
class Int8Layer:
    """Initializer names of one int8 layer: weights (in, out), their column scales, the
    fp32 bias, and the weights' column sums (for a zero-point correction; ``None`` for a
    layer whose input is nonnegative)."""

    wq: str
    w_scale: str
    bias: str
    col_sum: str | None


def int8_layer(g: GraphBuilder, w: np.ndarray, b: np.ndarray, nonnegative: bool,
               reduce_range: bool | None = None) -> Int8Layer:
    """Symmetric int8 weights, one scale per output column, for a torch-layout ``w``; in
    ONNX Runtime's reduced range (|q| <= 64) where the kernels saturate (:func:`int8_weight_max`)."""
    qmax = int8_weight_max(reduce_range)
    wt = np.ascontiguousarray(w.T, dtype=np.float32)  # (in, out)
    w_scale = np.maximum(np.abs(wt).max(axis=0), 1e-12) / float(qmax)
    wq = np.clip(np.round(wt / w_scale), -qmax, qmax).astype(np.int8)
    col_sum = None if nonnegative else g.const(wq.astype(np.int32).sum(axis=0, keepdims=True), "colsum", np.int32)
    return Int8Layer(g.const(wq, "Wq", np.int8), g.const(w_scale, "ws"), g.const(b, "b"), col_sum)


def dense_int8(g: GraphBuilder, x: str, layer: Int8Layer, per_row: bool) -> str:
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


def mlp_int8(g: GraphBuilder, x: str, layers: list[tuple[np.ndarray, np.ndarray]]) -> str:
    """The int8 MLP as an ``If`` on the batch size: one row takes the
    ``DynamicQuantizeLinear`` branch (fewer nodes, the fastest at batch 1), more rows the
    per-row branch. Both compute the same numbers for a row and share one copy of the weights."""
    params = [int8_layer(g, w.astype(np.float32), b.astype(np.float32), i > 0) for i, (w, b) in enumerate(layers)]
    one_row = g.op("Equal", g.op("Shape", x, start=0, end=1), g.const([1], "one", np.int64))
    branches = []
    for per_row in (False, True):
        sub = g.branch()
        y = x
        for i, layer in enumerate(params):
            y = dense_int8(sub, y, layer, per_row=per_row)
            if i < len(params) - 1:
                y = sub.op("Relu", y)
        branches.append(sub.subgraph(y, "per_row" if per_row else "one_row"))
    return g.op("If", one_row, then_branch=branches[0], else_branch=branches[1])


__all__ = ["GraphBuilder", "Int8Layer", "dense", "dense_int8", "int8_kernels_saturate", "int8_layer",
           "int8_weight_max", "mlp_int8", "require_onnx"]
