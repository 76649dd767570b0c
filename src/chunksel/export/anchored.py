"""ONNX export of a trained anchored prototype selector, and an ONNX Runtime runner.

The graph takes what the selector reads per query, in the order below (only the inputs
its blocks use), and returns the scores:

    ``h``   (n, d_h) float32: the generator's final-layer last-token hidden state;
    ``r``   (n, d_r) float32: the routing-weighted expert-response scores;
    ``q``   (n, d) float32: the question's retriever embedding;
    ``e``   (n, K, d) float32: the candidates' retriever embeddings, retrieval order,
            all-zero rows at padded slots;
    (with ``anchor="lambdamart"`` the candidates of ``e`` and ``phi`` come in the internal
    LambdaMART's order; :class:`OnnxAnchored` maps the scores back with ``order``)
    ``phi`` (n, K, F) float32: the raw interaction features (the LETOR features, which
            need the corpus's BM25 statistics, and with the ``lambdamart`` block the
            internal LambdaMART's scores, so they are computed outside the graph).

The selector is the one front door: its public
:meth:`~chunksel.selectors.anchored.AnchoredPrototypeSelector.export_state` gives what the
graph is built from (:class:`AnchoredState`: the scorer, the scalers' arrays, the
dimensions) and :meth:`~chunksel.selectors.anchored.AnchoredPrototypeSelector.graph_inputs`
the arrays fed to it; nothing here reads the selector's internals.

Output ``scores`` (n, K): the anchored logits, ``-inf`` at padded slots. Inside the graph:
unit-normalisation of ``q`` and ``e``, assembly of ``x``, both standard scalers, the
scorer (:class:`~chunksel.nn.anchored.AnchoredScorer`), the mask.

It is traced with torch's TorchScript-based exporter (``dynamo=False``: the scorer has no
data-dependent control flow, and that exporter needs nothing beyond torch). ``int8``
applies ONNX Runtime's dynamic quantisation (``quantize_dynamic``, int8 weights per
channel) to the fp32 graph. The layout is stored in the file's metadata (``chunksel.*``).
"""

from __future__ import annotations

import io
import json
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError

OPSET = 17
EXPORT_FORMAT = 1


@dataclass(frozen=True)
class AnchoredState:
    """What the exporter reads of a fitted anchored selector (its public export state,
    :meth:`chunksel.selectors.anchored.AnchoredPrototypeSelector.export_state`).

    Attributes:
        model: the trained scorer (:class:`~chunksel.nn.anchored.AnchoredScorer` or
            :class:`~chunksel.nn.anchored.AnchoredEnsemble`).
        blocks: the selector's input blocks.
        k: the fixed candidate count (the ``chunk`` block's K), None for any K;
            emb_dim: the retriever embeddings' size.
        h_dim, r_dim: the generator features' sizes (0 for a block not used).
        x_mean, x_scale: the question-side input's scaler (None: no prototype term).
        phi_mean, phi_scale: the interaction features' scaler (None: no interaction term).
        anchor: the order the scorer is anchored on (``"retrieval"``, ``"lambdamart"``).
        generator_id, encoder_id: recorded in the graph's metadata.
    """

    model: Any
    blocks: tuple[str, ...]
    k: int | None
    emb_dim: int
    h_dim: int
    r_dim: int
    x_mean: np.ndarray | None
    x_scale: np.ndarray | None
    phi_mean: np.ndarray | None
    phi_scale: np.ndarray | None
    anchor: str
    generator_id: str
    encoder_id: str


def anchored_state(selector: Any) -> AnchoredState:
    """``selector`` itself if it is an :class:`AnchoredState`, else the public export state
    of a trained anchored selector."""
    if isinstance(selector, AnchoredState):
        return selector
    if getattr(selector, "onnx_graph", None) != "anchored":
        raise ConfigError("anchored_graph_bytes needs a trained anchored selector")
    return selector.export_state()


def input_names(state: AnchoredState) -> list[str]:
    """The graph's inputs for this selector's blocks, in order."""
    names = [n for n, blk in (("h", "hs"), ("r", "rw")) if blk in state.blocks]
    names += ["q", "e"]
    if state.phi_mean is not None:  # any interaction block (letor, lambdamart)
        names.append("phi")
    return names


def graph_module(state: AnchoredState):
    """The torch module the graph is traced from (the inputs of :func:`input_names`)."""
    import torch
    from torch import nn
    from torch.nn import functional as F

    def buffer(a: np.ndarray | None, default: np.ndarray):
        return torch.as_tensor(default if a is None else a, dtype=torch.float32)

    class Graph(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = state.model
            self.blocks = tuple(state.blocks)
            self.register_buffer("x_mean", buffer(state.x_mean, np.zeros(1)))
            self.register_buffer("x_scale", buffer(state.x_scale, np.ones(1)))
            self.register_buffer("p_mean", buffer(state.phi_mean, np.zeros(1)))
            self.register_buffer("p_scale", buffer(state.phi_scale, np.ones(1)))
            self.has_x = state.x_mean is not None
            self.has_phi = state.phi_mean is not None

        def forward(self, *inputs):
            it = iter(inputs)
            h = next(it) if "hs" in self.blocks else None
            r = next(it) if "rw" in self.blocks else None
            q = F.normalize(next(it), dim=-1)
            e_raw = next(it)
            mask = e_raw.abs().sum(-1) > 0
            e = F.normalize(e_raw, dim=-1)
            x = None
            if self.has_x:
                parts = [t for t in (h, r) if t is not None]
                if "q" in self.blocks:
                    parts.append(q)
                if "chunk" in self.blocks:
                    parts.append(e.reshape(e.shape[0], -1))
                x = (torch.cat(parts, dim=1) - self.x_mean) / self.x_scale
            phi = None
            if self.has_phi:
                phi = ((next(it) - self.p_mean) / self.p_scale) * mask.unsqueeze(-1).to(e.dtype)
            s = self.model(q, e, x, phi)
            return torch.where(mask, s, torch.full_like(s, float("-inf")))

    return Graph().eval()


def _example(state: AnchoredState, n: int = 2):
    import torch

    lay = {"h": state.h_dim, "r": state.r_dim}
    k, d = state.k or 5, state.emb_dim  # any K: 5 is only the example's
    out = []
    for name in input_names(state):
        if name in lay:
            out.append(torch.randn(n, lay[name]))
        elif name == "q":
            out.append(torch.randn(n, d))
        elif name == "e":
            out.append(torch.randn(n, k, d))
        else:
            out.append(torch.randn(n, k, state.phi_mean.shape[0]))
    return tuple(out)


def anchored_graph_bytes(selector: Any, quantize: str = "fp32") -> bytes:
    """The serialised ONNX graph of a fitted anchored selector (or its :class:`AnchoredState`)."""
    import torch

    state = anchored_state(selector)
    if quantize not in ("fp32", "int8"):
        raise ConfigError(f"quantize must be 'fp32' or 'int8', got {quantize!r}")
    names = input_names(state)
    dyn = {n: {0: "n"} for n in names}
    dyn["scores"] = {0: "n"}
    if state.k is None:  # no chunk block: any number of candidates
        for n in ("e", "phi", "scores"):
            if n in dyn:
                dyn[n] = {0: "n", 1: "k"}
    buf = io.BytesIO()
    with torch.no_grad():
        torch.onnx.export(graph_module(state), _example(state), buf, dynamo=False, input_names=names,
                          output_names=["scores"], dynamic_axes=dyn, opset_version=OPSET)
    import onnx

    model = onnx.load_from_string(buf.getvalue())
    meta = {
        "chunksel.selector": "anchored",
        "chunksel.format": str(EXPORT_FORMAT),
        "chunksel.inputs": json.dumps(names),
        "chunksel.blocks": json.dumps(list(state.blocks)),
        "chunksel.k": str(state.k or 0),  # 0: any K
        "chunksel.anchor": state.anchor,
        "chunksel.quantize": quantize,
        "chunksel.generator_id": state.generator_id,
        "chunksel.encoder_id": state.encoder_id,
    }
    for key, value in meta.items():
        p = model.metadata_props.add()
        p.key, p.value = key, value
    data = model.SerializeToString()
    if quantize == "int8":
        import tempfile

        from onnxruntime.quantization import QuantType, quantize_dynamic

        from chunksel.export.ops import int8_kernels_saturate

        with tempfile.TemporaryDirectory() as tmp:
            fp32, int8 = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
            fp32.write_bytes(data)
            quantize_dynamic(str(fp32), str(int8), per_channel=True, weight_type=QuantType.QInt8,
                             reduce_range=int8_kernels_saturate())
            data = int8.read_bytes()
    return data


def export_anchored(selector: Any, path: str | Path, quantize: str = "fp32") -> Path:
    """Write the selector's ONNX graph to ``path`` (atomically) and return the path."""
    data = anchored_graph_bytes(selector, quantize)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)
    return path


class OnnxAnchored:
    """Runs an exported anchored graph with ONNX Runtime (numpy and onnxruntime only).

    Args:
        model: a path to the ``.onnx`` file or its bytes.
        threads: intra-op threads (default 1).
    """

    def __init__(self, model: str | Path | bytes, threads: int = 1) -> None:
        from chunksel.export.sessions import cpu_session

        data = model if isinstance(model, bytes) else Path(model).read_bytes()
        try:
            self.session = cpu_session(data, threads)
        except Exception as err:
            raise DataError(f"not a valid ONNX graph: {str(err).splitlines()[0][:200]}") from None
        meta = self.session.get_modelmeta().custom_metadata_map
        if meta.get("chunksel.selector") != "anchored":
            raise DataError("this ONNX graph is not an exported anchored selector")
        self.inputs = json.loads(meta["chunksel.inputs"])
        # an input the traced scorer never reads (``q`` without a prototype term) is not
        # a graph input: it is checked for, but not fed
        self._fed = {i.name for i in self.session.get_inputs()}
        #: the fixed candidate count, None for any K
        self.k = int(meta["chunksel.k"]) or None
        self.meta = dict(meta)

    def scores(self, **arrays: np.ndarray) -> np.ndarray:
        """(n, K) scores from the named inputs (``h``, ``r``, ``q``, ``e``, ``phi`` as used),
        in the candidates' input order: a graph anchored on LambdaMART's order takes them in
        that order and ``order`` (each position's input index, from ``graph_inputs``) maps
        the scores back."""
        missing = [n for n in self.inputs if n not in arrays]
        if self.meta.get("chunksel.anchor", "retrieval") != "retrieval" and "order" not in arrays:
            missing.append("order")
        if missing:
            raise DataError(f"the anchored graph needs inputs {self.inputs}; missing {missing}")
        feed = {n: np.ascontiguousarray(arrays[n], dtype=np.float32) for n in self.inputs if n in self._fed}
        out = self.session.run(["scores"], feed)[0]
        if arrays.get("order") is not None:
            back = np.empty_like(out)
            np.put_along_axis(back, np.asarray(arrays["order"], dtype=np.int64), out, axis=1)
            out = back
        return out


#: per selector: (the weights its sessions were built from, {thread count: OnnxAnchored})
_SESSIONS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def onnx_scores(selector: Any, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """A fitted anchored selector's scores from its fp32 graph in ONNX Runtime (its
    ``engine="onnxruntime"``), given the graph's ``inputs`` (the selector's
    :meth:`~chunksel.selectors.anchored.AnchoredPrototypeSelector.graph_inputs`): the graph
    is exported in memory once per fit or load (from the selector's public export state)
    and run in a session for the current thread budget
    (:func:`~chunksel.threads.thread_budget`: one thread in a cost measurement)."""
    from chunksel.errors import require
    from chunksel.threads import thread_budget

    require("onnx", "export")  # a clear error naming the extra when it is not installed
    require("onnxruntime", "export")
    model, runners = _SESSIONS.get(selector, (None, {}))
    if model is not selector.model_:  # new weights: a new graph
        runners = {}
        _SESSIONS[selector] = (selector.model_, runners)
    threads = thread_budget()
    if threads not in runners:
        graph = runners.get("graph") or anchored_graph_bytes(selector, "fp32")
        runners["graph"] = graph
        runners[threads] = OnnxAnchored(graph, threads=threads)
    return runners[threads].scores(**inputs)
