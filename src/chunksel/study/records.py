"""The cells and rows of the typed benchmark results (:mod:`chunksel.study.results`):
per-seed accuracies, paired comparisons and the rows of each table, each with its JSON
reader (bad values raise :class:`~chunksel.errors.DataError` naming the field)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from chunksel.errors import DataError


def _num(x: Any, what: str) -> float | None:
    if x is None:
        return None
    try:
        v = float(x)
    except (TypeError, ValueError):
        raise DataError(f"results: {what} must be a number, got {x!r}") from None
    return None if math.isnan(v) else v


def _map(x: Any, what: str) -> Mapping[str, Any]:
    if x is None:
        return {}
    if not isinstance(x, Mapping):
        raise DataError(f"results: {what} must be an object, got {type(x).__name__}")
    return x


# ------------------------------------------------------------------ cells
@dataclass
class Cell:
    """One selector (or variant) on one dataset: per-seed accuracies (%).

    ``mean`` is the mean of the seeds, ``std`` their sample std (ddof=1; None for one
    seed). ``val_seeds`` are the validation accuracies of the same fits (model choice
    reads them, never test); ``ci`` an optional 95% interval; ``n`` the evaluated
    instances.
    """

    seeds: list[float]
    n: int | None = None
    val_seeds: list[float] = field(default_factory=list)
    ci: tuple[float, float] | None = None

    @property
    def mean(self) -> float | None:
        return float(np.mean(self.seeds)) if self.seeds else None

    @property
    def std(self) -> float | None:
        return float(np.std(self.seeds, ddof=1)) if len(self.seeds) > 1 else None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"mean": self.mean, "std": self.std if self.std is not None else 0.0,
                               "seeds": list(self.seeds)}
        if self.n is not None:
            out["n"] = self.n
        if self.val_seeds:
            out["val_seeds"] = list(self.val_seeds)
        if self.ci is not None:
            out["ci"] = [self.ci[0], self.ci[1]]
        return out

    @classmethod
    def from_json(cls, x: Any, what: str = "cell") -> Cell | None:
        if x is None:
            return None
        if not isinstance(x, Mapping):
            v = _num(x, what)
            return None if v is None else cls([v])
        seeds = [v for v in (_num(s, f"{what}.seeds") for s in x.get("seeds") or []) if v is not None]
        if not seeds and x.get("mean") is not None:
            mean = _num(x.get("mean"), f"{what}.mean")
            seeds = [] if mean is None else [mean]
        ci = x.get("ci")
        return cls(
            seeds=seeds,
            n=None if x.get("n") is None else int(x["n"]),
            val_seeds=[float(v) for v in x.get("val_seeds") or [] if v is not None],
            ci=None if ci is None else (float(ci[0]), float(ci[1])),
        )

    @classmethod
    def of(cls, seeds: Sequence[float], n: int | None = None, val_seeds: Sequence[float] = ()) -> Cell:
        return cls([float(s) for s in seeds], n=n, val_seeds=[float(v) for v in val_seeds])


def _cells(x: Any, what: str) -> dict[str, Cell]:
    out = {}
    for d, v in _map(x, what).items():
        c = Cell.from_json(v, f"{what}.{d}")
        if c is not None:
            out[str(d)] = c
    return out


@dataclass
class Comparison:
    """A paired comparison of A and B on the same instances (percent / points): the
    difference with its 95% paired bootstrap interval and McNemar's exact p."""

    a: str
    b: str
    diff: float
    lo: float
    hi: float
    p: float | None
    n: int
    n10: int | None = None
    n01: int | None = None
    acc_a: float | None = None
    acc_b: float | None = None

    def verdict(self, alpha: float = 0.05) -> str:
        """``"better"`` / ``"worse"`` only when both tests agree: the 95% interval excludes 0
        on that side *and* McNemar's p < ``alpha``; else ``"tie"`` (the project's rule for
        calling a row significantly different)."""
        from chunksel.eval.significance import verdict

        return verdict(self.lo, self.hi, self.p, alpha)

    def to_dict(self) -> dict[str, Any]:
        out = {"a": self.a, "b": self.b, "diff": self.diff, "lo": self.lo, "hi": self.hi, "p": self.p,
               "n": self.n}
        for k in ("n10", "n01", "acc_a", "acc_b"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out

    @classmethod
    def from_json(cls, x: Any, what: str = "comparison") -> Comparison:
        x = _map(x, what)
        for k in ("a", "b"):
            if k not in x:
                raise DataError(f"results: {what} has no {k!r}")

        def num(k: str) -> float | None:
            return _num(x.get(k), f"{what}.{k}")

        return cls(
            a=str(x["a"]), b=str(x["b"]), diff=num("diff"), lo=num("lo"), hi=num("hi"), p=num("p"),
            n=int(x.get("n") or 0),
            n10=None if x.get("n10") is None else int(x["n10"]),
            n01=None if x.get("n01") is None else int(x["n01"]),
            acc_a=num("acc_a"), acc_b=num("acc_b"),
        )


# ------------------------------------------------------------------ tables
@dataclass
class Table1Row:
    """One selector's row of Table 1: per-dataset cells and its cost columns."""

    per_dataset: dict[str, Cell] = field(default_factory=dict)
    params: int | None = None
    size_bytes: int | None = None
    p50_ms: float | None = None
    p95_ms: float | None = None
    query_cost: str | None = None
    text_p50_ms: float | None = None
    text_p95_ms: float | None = None
    #: one model per seed trained on the pooled training splits (not one per dataset)
    pooled: bool = False
    #: a stacked row (``anchored-ce``): dataset -> the stacking weight each seed chose on validation
    stack_weights: dict[str, list[float]] = field(default_factory=dict)

    COST_KEYS = ("params", "size_bytes", "p50_ms", "p95_ms", "query_cost", "text_p50_ms", "text_p95_ms")

    def set_cost(self, cost: Mapping[str, Any]) -> None:
        for k in self.COST_KEYS:
            if k in cost:
                setattr(self, k, cost[k])

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"per_dataset": {d: c.to_dict() for d, c in self.per_dataset.items()}}
        for k in self.COST_KEYS:
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        if self.pooled:
            out["pooled"] = True
        if self.stack_weights:
            out["stack_weights"] = {d: list(w) for d, w in self.stack_weights.items()}
        return out

    @classmethod
    def from_json(cls, x: Any, what: str) -> Table1Row:
        x = _map(x, what)
        row = cls(per_dataset=_cells(x.get("per_dataset"), f"{what}.per_dataset"), pooled=bool(x.get("pooled", False)))
        row.set_cost({k: x[k] for k in cls.COST_KEYS if x.get(k) is not None})
        weights = x.get("stack_weights") or {}
        if not isinstance(weights, Mapping):
            raise DataError(f"{what}.stack_weights must be an object")
        row.stack_weights = {str(d): [float(v) for v in w] for d, w in weights.items()}
        return row


@dataclass
class BudgetRow:
    """Table 3: one feature budget (% of the input kept) and the dimensions left."""

    dims: int | None
    per_dataset: dict[str, Cell] = field(default_factory=dict)


@dataclass
class Variant:
    """A variant of the generator ablation: its feature blocks and per-dataset cells."""

    blocks: list[str]
    per_dataset: dict[str, Cell] = field(default_factory=dict)


@dataclass
class GeneratorAblation:
    """The flagship with and without the generator's h and r, and the paired difference;
    ``parts``: per further variant (:data:`~chunksel.study.profiles.PARTS_ABLATION`),
    the paired difference of the full flagship against it, per dataset."""

    variants: dict[str, Variant] = field(default_factory=dict)
    delta: dict[str, Comparison] = field(default_factory=dict)
    parts: dict[str, dict[str, Comparison]] = field(default_factory=dict)


@dataclass
class PooledRow:
    """A selector trained per dataset and on the pool of every training split."""

    per_dataset: dict[str, float]
    pooled: dict[str, float]


@dataclass
class TransferRow:
    """Leave one dataset out (:mod:`chunksel.study.transfer`): test rank-1 (%) on each
    held-out dataset of the selector trained on the other datasets, its 95% bootstrap
    interval and answerable test questions, and (``vs_reference``) its paired difference
    ``[diff, lo, hi]`` (points) against ``reference`` over the left-out study datasets'
    questions together."""

    held_out: dict[str, float]
    ci: dict[str, list[float]] = field(default_factory=dict)
    answerable: dict[str, int] = field(default_factory=dict)
    vs_reference: list[float] | None = None
    reference: str | None = None
    #: per held-out dataset, the paired difference ``[diff, lo, hi]`` against ``reference``
    diff: dict[str, list[float]] = field(default_factory=dict)
    #: held-out datasets never trained on by any row (e.g. WikiQA), trained on every study dataset;
    #: not part of ``vs_reference`` or the average
    never_trained: list[str] = field(default_factory=list)


@dataclass
class LearningCurve:
    """Test rank-1 (%) against usable training instances on one dataset."""

    usable_train: int
    sizes: list[int]
    per_selector: dict[str, dict[str, float]] = field(default_factory=dict)
