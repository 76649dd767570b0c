"""The prototype selector's ONNX export, under its application-facing name.

The graph builder and the ONNX Runtime runner live in :mod:`chunksel.nn.onnx_prototype`
(below the selectors, which use the runner as an engine); this module re-exports them.
"""

from chunksel.nn.onnx_prototype import (  # noqa: F401
    EXPORT_FORMAT,
    MODES,
    OPSET,
    OnnxPrototype,
    PrototypeState,
    export_prototype,
    prototype_graph,
)
