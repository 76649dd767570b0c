"""ONNX Runtime CPU sessions for chunksel's graphs (the prototype, the anchored scorer, the
cross-encoder, the serving encoder): one place for their thread settings."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def cpu_session(model: str | Path | bytes, threads: int | None = 1, *, disabled_optimizers: Sequence[str] = (),
                quiet: bool = False) -> Any:
    """An ``onnxruntime.InferenceSession`` on the CPU provider for a graph file or its bytes.

    Args:
        threads: intra-op threads, with one inter-op thread (the graphs are sequential);
            None or 0 leaves ONNX Runtime's defaults.
        disabled_optimizers: graph optimisers to leave out (the int8 encoder's recipe).
        quiet: log errors only (not ONNX Runtime's warnings).

    ONNX Runtime's own error propagates: each caller names what it was loading.
    """
    import onnxruntime as ort

    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = int(threads)
        opts.inter_op_num_threads = 1
    if quiet:
        opts.log_severity_level = 3
    return ort.InferenceSession(model if isinstance(model, bytes) else str(model), sess_options=opts,
                                providers=["CPUExecutionProvider"], disabled_optimizers=list(disabled_optimizers))
