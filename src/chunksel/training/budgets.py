"""Gradient-based feature budgets for the prototype selector (paper Sec. 3.2, Eqs. 4-5).

1. Train the full selector on ``x = [h ; r ; E]`` (the kept blocks), freeze it.
2. Importance of input dim d: ``I_d = sum_{t in train} |dL_t / dx_d|`` (Eq. 4), taken on
   the *scaled* input with the model in eval mode (BatchNorm running statistics, no
   dropout), so each sample's gradient is its own.
3. Hidden-state and routing dims are ranked by ``I_d``; a chunk-embedding coordinate p
   by ``I^chunk_p = (1/K) sum_k I_{E_{k,p}}`` (Eq. 5) and kept or dropped for all K
   chunks at once.
4. Budget ``floor(D * X / 100)`` units, D the full input size; an HS/RW dim costs 1 unit,
   a chunk coordinate K units. Greedy: units are taken in decreasing order of
   *importance per budget unit* (``I_d`` for a dim; ``I^chunk_p``, the mean over its K
   dims, for a coordinate -- Eq. 5's mean is exactly total importance / cost) and
   each is kept if it still fits; one that does not fit is skipped and cheaper units
   further down can still fill the remainder. The budget is never exceeded.
5. Retrain on the masked input; the mask is saved with the selector and applied at
   inference.

:func:`run_budgets` produces the operating curve of Table 3 (10%, 20%, ..., 100%).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from chunksel.errors import ConfigError
from chunksel.nn.prototype import cosine_scores
from chunksel.training.losses import multi_positive_contrastive

if TYPE_CHECKING:  # pragma: no cover
    pass

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


def gradient_importance(
    model: torch.nn.Module,
    x_scaled: np.ndarray,
    e: np.ndarray,
    labels: np.ndarray,
    mask: np.ndarray,
    tau: float,
    batch_size: int = 1024,
) -> np.ndarray:
    """Eq. 4: ``I_d = sum_t |dL_t / dx_d|`` over the rows of ``x_scaled`` (D,) float64.

    The model is frozen and in eval mode, so the gradient of ``sum_t L_t`` with respect
    to the batch input has row t equal to ``dL_t/dx_t``; absolute values are summed.
    """
    was_training = model.training
    model.eval()
    for p in model.parameters():
        p.requires_grad_(False)
    total = np.zeros(x_scaled.shape[1], dtype=np.float64)
    try:
        for start in range(0, x_scaled.shape[0], batch_size):
            sl = slice(start, start + batch_size)
            x = torch.tensor(x_scaled[sl], dtype=torch.float32, requires_grad=True)
            y = torch.as_tensor(np.asarray(labels[sl]) >= 1)
            m = torch.as_tensor(np.asarray(mask[sl], dtype=bool))
            ee = torch.as_tensor(np.asarray(e[sl], dtype=np.float32))
            loss = multi_positive_contrastive(cosine_scores(model(x), ee), y, m, tau, "sum")
            (grad,) = torch.autograd.grad(loss, x)
            total += grad.abs().sum(dim=0).double().numpy()
    finally:
        for p in model.parameters():
            p.requires_grad_(True)
        model.train(was_training)
    return total


def budget_units(layout: FeatureLayout, percent: float) -> int:
    """``floor(D * X / 100)``."""
    if not 0 < percent <= 100:
        raise ConfigError(f"feature budget must be in (0, 100] percent, got {percent}")
    return int(np.floor(layout.dim * percent / 100 + 1e-9))


def budget_mask(importance: np.ndarray, layout: FeatureLayout, percent: float) -> np.ndarray:
    """(D,) bool feature mask keeping the most important units within the budget.

    Args:
        importance: (D,) ``I_d`` from :func:`gradient_importance`.
        layout: the input layout (which dims are chunk coordinates).
        percent: retention ratio X in (0, 100].

    Returns:
        The mask; ``mask.sum() <= floor(D * X / 100)``, and a chunk coordinate is kept
        at all K positions or at none.
    """
    importance = np.asarray(importance, dtype=np.float64)
    if importance.shape != (layout.dim,):
        raise ConfigError(f"importance has shape {importance.shape}, layout expects ({layout.dim},)")
    budget = budget_units(layout, percent)
    sl = layout.slices()
    # units: (score per budget unit, cost, dims)
    scores, costs, dims = [], [], []
    for b in ("hs", "rw"):
        if b in sl:
            idx = np.arange(sl[b].start, sl[b].stop)
            scores.append(importance[idx])
            costs.append(np.ones(len(idx), dtype=np.int64))
            dims.extend(idx[:, None])
    if "chunk" in sl:
        base = sl["chunk"].start
        grid = base + np.arange(layout.k)[:, None] * layout.d_e + np.arange(layout.d_e)[None, :]  # (K, d_e)
        scores.append(importance[grid].mean(axis=0))  # Eq. 5
        costs.append(np.full(layout.d_e, layout.k, dtype=np.int64))
        dims.extend(grid.T)
    score = np.concatenate(scores)
    cost = np.concatenate(costs)
    order = np.lexsort((np.arange(len(score)), -score))  # importance desc, then position
    mask = np.zeros(layout.dim, dtype=bool)
    left = budget
    for u in order:
        if cost[u] <= left:
            mask[dims[u]] = True
            left -= int(cost[u])
            if left == 0:
                break
    return mask
