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

import numpy as np
import torch

from chunksel.errors import ConfigError
from chunksel.nn.inputs import FeatureLayout
from chunksel.nn.prototype import cosine_scores
from chunksel.training.losses import multi_positive_contrastive


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
