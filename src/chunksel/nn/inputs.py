"""The learned selectors' inputs, numpy only: the prototype selector's feature layout
(:class:`FeatureLayout`, ``x = [h ; r ; vec(E)]`` restricted to the kept blocks) and the
per-dimension standard scaler fitted on the training split (:class:`StandardScaler`).

Training fits them (:mod:`chunksel.training`), the selectors apply them at query time and
save them with their weights, and the ONNX exporters fold them into the graphs
(:mod:`chunksel.export`): all three import them from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from chunksel.errors import ConfigError

BLOCKS = ("hs", "rw", "chunk")


@dataclass(frozen=True)
class FeatureLayout:
    """Layout of the selector input ``x = [h ; r ; E]`` restricted to ``blocks``.

    Attributes:
        d_h: hidden-state size (576 for SmolLM2-135M, 2048 for OLMoE-1B-7B).
        d_r: routing-score size (layers x experts: 30 x 64 = 1920 for SmolLM2-135M).
        k: candidates per instance (K).
        d_e: chunk-embedding size (384 for all-MiniLM-L6-v2).
        blocks: the kept blocks, in the fixed order ("hs", "rw", "chunk").
    """

    d_h: int
    d_r: int
    k: int
    d_e: int
    blocks: tuple[str, ...] = BLOCKS

    def __post_init__(self) -> None:
        blocks = tuple(b for b in BLOCKS if b in self.blocks)
        bad = sorted(set(self.blocks) - set(BLOCKS))
        if bad or not blocks:
            raise ConfigError(
                f"blocks must be a non-empty subset of {', '.join(BLOCKS)}; got {list(self.blocks)}"
            )
        object.__setattr__(self, "blocks", blocks)

    @property
    def sizes(self) -> dict[str, int]:
        full = {"hs": self.d_h, "rw": self.d_r, "chunk": self.k * self.d_e}
        return {b: full[b] for b in self.blocks}

    @property
    def dim(self) -> int:
        """D, the full input size (4992 in the paper, 4416 for SmolLM2-135M with K=5)."""
        return sum(self.sizes.values())

    def slices(self) -> dict[str, slice]:
        out, start = {}, 0
        for b, n in self.sizes.items():
            out[b] = slice(start, start + n)
            start += n
        return out

    def to_dict(self) -> dict[str, Any]:
        return {"d_h": self.d_h, "d_r": self.d_r, "k": self.k, "d_e": self.d_e, "blocks": list(self.blocks)}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> FeatureLayout:
        return cls(int(d["d_h"]), int(d["d_r"]), int(d["k"]), int(d["d_e"]), tuple(d["blocks"]))

    def assemble(self, h: np.ndarray | None, r: np.ndarray | None, e: np.ndarray) -> np.ndarray:
        """(B, D) float32 ``[h ; r ; vec(E)]`` with only the kept blocks."""
        parts = []
        if "hs" in self.blocks:
            parts.append(np.asarray(h, dtype=np.float32))
        if "rw" in self.blocks:
            parts.append(np.asarray(r, dtype=np.float32))
        if "chunk" in self.blocks:
            e = np.asarray(e, dtype=np.float32)
            parts.append(e.reshape(e.shape[0], -1))
        return np.concatenate(parts, axis=1) if len(parts) > 1 else np.ascontiguousarray(parts[0])


class StandardScaler:
    """Per-dimension ``(x - mean) / std`` fitted on the training split (std 0 -> 1)."""

    def __init__(self, mean: np.ndarray | None = None, scale: np.ndarray | None = None) -> None:
        self.mean_ = None if mean is None else np.asarray(mean, dtype=np.float32)
        self.scale_ = None if scale is None else np.asarray(scale, dtype=np.float32)

    def fit(self, x: np.ndarray) -> StandardScaler:
        x = np.asarray(x, dtype=np.float64)
        self.mean_ = x.mean(axis=0).astype(np.float32)
        std = x.std(axis=0)
        self.scale_ = np.where(std > 1e-12, std, 1.0).astype(np.float32)
        return self

    def transform(self, x: np.ndarray) -> np.ndarray:
        if self.mean_ is None or self.scale_ is None:
            raise RuntimeError("StandardScaler is not fitted")
        return ((np.asarray(x, dtype=np.float32) - self.mean_) / self.scale_).astype(np.float32)

    def subset(self, keep: np.ndarray) -> StandardScaler:
        """The scaler restricted to the dims where ``keep`` is True."""
        return StandardScaler(self.mean_[keep], self.scale_[keep])
