"""Studies of the paper prototype selector: the feature-budget curve (Table 3) and the
temperature sweep. They fit and score selectors, so they sit above ``selectors/``."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chunksel.errors import DataError
from chunksel.eval.metrics import rank1_accuracy
from chunksel.selectors.base import QuestionFeatures
from chunksel.selectors.prototype import PrototypeSelector
from chunksel.types import Instance, label_matrix


@dataclass
class BudgetResult:
    """One operating point of the Table 3 curve."""

    budget: float  #: percent X
    dims: int  #: input dims kept (a chunk coordinate counts K)
    selector: PrototypeSelector


def run_budgets(
    train: Sequence[Instance],
    features: QuestionFeatures | None = None,
    val: Sequence[Instance] | None = None,
    budgets: Sequence[float] = (10, 20, 30, 40, 50, 60, 70, 80, 90, 100),
    **settings: Any,
) -> list[BudgetResult]:
    """Train the full selector once, then one masked selector per budget (Table 3).

    The full model's gradient importance (Eq. 4) is computed once and every budget's
    mask comes from it; 100% reuses the full model. ``settings`` are
    :class:`~chunksel.selectors.prototype.PrototypeSelector` settings (``budget`` is
    set per point).

    Returns:
        One :class:`BudgetResult` per budget, in the given order.
    """
    settings = {k: v for k, v in settings.items() if k != "budget"}
    full = PrototypeSelector(budget=None, **settings).fit(train, features, val)
    out = []
    for pct in budgets:
        if float(pct) >= 100:
            sel = PrototypeSelector(budget=100, **settings)
            sel.adopt(full)
        else:
            sel = PrototypeSelector(budget=pct, **settings)
            sel.fit_from_full(full, train, features, val)
        out.append(BudgetResult(float(pct), int(sel.feature_mask_.sum()), sel))
    return out


def sweep_tau(
    train: Sequence[Instance],
    val: Sequence[Instance],
    features: QuestionFeatures | None = None,
    taus: Sequence[float] = (0.02, 0.05, 0.1, 0.2),
    seeds: Sequence[int] = (0,),
    **settings: Any,
) -> dict[float, list[float]]:
    """Rank-1 accuracy on the contested ``val`` instances for each temperature and seed.

    Early stopping uses a split carved from ``train``, so ``val`` is only scored.
    """
    contested = [i for i in val if i.contested(settings.get("label"))]
    if not contested:
        raise DataError("no validation instance has both a positive and a negative candidate")
    out: dict[float, list[float]] = {}
    for tau in taus:
        for seed in seeds:
            sel = PrototypeSelector(tau=tau, seed=seed, **settings).fit(train, features)
            scores = sel.score(contested, features)[:, : sel.k]
            labels = label_matrix(contested, sel.label, k=scores.shape[1])
            out.setdefault(float(tau), []).append(rank1_accuracy(scores, labels, subset="all"))
    return out

