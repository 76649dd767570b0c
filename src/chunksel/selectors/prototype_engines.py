"""Inference engines of the paper prototype selector (:mod:`chunksel.selectors.prototype`).

- ``torch`` fp32: the BatchNorm layers and the input scaler folded into the Linear layers,
  run as plain tensors (:class:`~chunksel.nn.prototype.InferenceMLP`);
- ``torch`` ``int8``: the folded model with int8 dynamically quantised Linear layers
  (``torch.ao.quantization.quantize_dynamic``, per-channel weights, per-batch activation
  ranges) after standard scaling (:class:`Scaled`);
- ``torch`` ``int8w``: int8 weights (one scale per output row), bfloat16 compute
  (``torch._weight_int8pack_mm``; faster at batch 1 on CPUs with AVX-512);
- ``onnxruntime`` fp32 / int8: the exported ONNX graph (:mod:`chunksel.export.prototype`),
  with per-row dynamic int8 activations (an instance's scores do not depend on its batch).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

from chunksel.errors import ConfigError
from chunksel.nn.prototype import InferenceMLP

ENGINES = ("torch", "onnxruntime")


def quant_mode(q: str | None) -> str:
    """``None``/"fp32" -> "fp32"; "int8", "int8w" as given; anything else is refused."""
    if q in (None, "", "none", "fp32"):
        return "fp32"
    if q in ("int8", "int8w"):
        return q
    raise ConfigError(f"quantize must be None, 'fp32', 'int8' or 'int8w', got {q!r}")


def check_engine(engine: str, quantize: str | None) -> str:
    """The numerics mode of ``quantize`` on ``engine``; refuses unknown engines and
    torch-only modes on ONNX Runtime."""
    mode = quant_mode(quantize)
    if engine not in ENGINES:
        raise ConfigError(f"engine must be one of {', '.join(ENGINES)}, got {engine!r}")
    if engine == "onnxruntime" and mode == "int8w":
        raise ConfigError("quantize='int8w' is a torch-engine mode; the onnxruntime engine runs fp32 or int8")
    return mode


def build_engine(selector: Any, engine: str, quantize: str | None) -> Any:
    """The inference callable of a fitted prototype selector.

    torch engine: unscaled kept inputs -> unit prototypes. onnxruntime engine: an
    :class:`~chunksel.export.prototype.OnnxPrototype` (h, r, e -> scores, prototypes),
    built from the selector's public :meth:`export_state`.
    """
    mode = check_engine(engine, quantize)
    state = selector.export_state()
    if engine == "onnxruntime":  # the graph carries the scaler and the mask itself
        from chunksel.export.prototype import OnnxPrototype, prototype_graph

        return OnnxPrototype(prototype_graph(selector, mode))
    if mode == "int8":
        from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

        folded = quantize_dynamic(
            state.model.fold_batchnorm(), {nn.Linear: per_channel_dynamic_qconfig}, dtype=torch.qint8
        )
        return Scaled(state.mean, state.scale, folded).eval()
    return InferenceMLP(state.model, torch.from_numpy(state.mean), torch.from_numpy(state.scale), mode)


class Scaled(nn.Module):
    """``(x - mean) / scale`` then the folded MLP.

    The scaler stays outside the Linear layers so that int8 dynamic quantisation sees
    standardised activations (raw hidden states have a few huge dims).
    """

    def __init__(self, mean: np.ndarray, scale: np.ndarray, net: nn.Module) -> None:
        super().__init__()
        self.register_buffer("mean", torch.as_tensor(mean, dtype=torch.float32))
        self.register_buffer("inv_scale", torch.as_tensor(1.0 / scale, dtype=torch.float32))
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net((x - self.mean) * self.inv_scale)


__all__ = ["ENGINES", "Scaled", "build_engine", "check_engine", "quant_mode"]
