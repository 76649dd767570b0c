"""Every ONNX graph chunksel exports, and the ONNX Runtime runners that read them back.

A selector class declares the graph it can be exported as in its ``onnx_graph`` class
attribute (``"prototype"``, ``"anchored"``); :func:`export_selector` picks the exporter
from it, :func:`open_graph` the runner. The graphs:

- :mod:`chunksel.export.prototype`: the prototype selector (features and candidate
  embeddings in, scores and the prototype out; fp32 or int8), also the selector's own
  ``onnxruntime`` engine;
- :mod:`chunksel.export.anchored`: the anchored prototype selector (traced from torch);
- :mod:`chunksel.export.ops`: the graph builder and int8 layers they share.

Nothing here imports onnx, onnxruntime or torch until a graph is built or opened
(``pip install 'chunksel[export]'``).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any, NamedTuple

from chunksel.errors import ConfigError, DataError


class Graph(NamedTuple):
    """Where one kind of graph's exporter and runner live."""

    module: str
    exporter: str
    runner: str


#: the exportable graphs, by the name a selector class declares in ``onnx_graph``
GRAPHS: dict[str, Graph] = {
    "prototype": Graph("chunksel.export.prototype", "export_prototype", "OnnxPrototype"),
    "anchored": Graph("chunksel.export.anchored", "export_anchored", "OnnxAnchored"),
}


def graph_kind(selector: Any) -> str | None:
    """The graph ``selector`` can be exported as (its class's ``onnx_graph``), or None."""
    kind = getattr(selector, "onnx_graph", None)
    return kind if kind in GRAPHS else None


def export_selector(selector: Any, path: str | Path, quantize: str = "fp32") -> Path:
    """Write the ONNX graph of a fitted ``selector`` to ``path`` (atomically); the path.

    Raises:
        ConfigError: the selector declares no exportable graph, or ``quantize`` is not
            one its graph supports.
        DataError: its weights hold NaN (the file is not kept).
    """
    kind = graph_kind(selector)
    if kind is None:
        raise ConfigError(
            f"a {getattr(selector, 'name', '?')!r} selector has no ONNX graph; export needs a "
            f"{' or '.join(GRAPHS)} selector"
        )
    graph = GRAPHS[kind]
    out = getattr(importlib.import_module(graph.module), graph.exporter)(selector, path, quantize=quantize)
    check_finite_weights(out)
    return out


def check_finite_weights(path: str | Path) -> None:
    """Refuse (and delete) a graph whose weights hold NaN: a checkpoint can
    carry a valid checksum over damaged weights, and such a graph only outputs NaN.

    Raises:
        DataError: naming the first non-finite initializer.
    """
    import numpy as np
    import onnx
    from onnx import numpy_helper

    path = Path(path)
    for init in onnx.load(str(path)).graph.initializer:
        arr = numpy_helper.to_array(init)
        if arr.dtype.kind == "f" and np.isnan(arr).any():  # (-inf is a legitimate mask constant)
            path.unlink(missing_ok=True)
            raise DataError(f"the selector's weights hold NaN values ({init.name}): its ONNX graph "
                            f"would output NaN; nothing was written (retrain or restore the checkpoint)")


def open_graph(kind: str, model: str | Path | bytes) -> Any:
    """The ONNX Runtime runner of an exported ``kind`` graph (reading it back checks it)."""
    graph = GRAPHS[kind]
    return getattr(importlib.import_module(graph.module), graph.runner)(model)


__all__ = ["GRAPHS", "Graph", "check_finite_weights", "export_selector", "graph_kind", "open_graph"]
