"""Number formatting and markdown helpers of the benchmark report (:mod:`.report`).

Units: every accuracy-like figure is in **percent** (0-100), differences in percentage
points; :func:`metrics_to_percent` converts the fractions of :mod:`chunksel.eval.metrics`.
A missing value prints "–".
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chunksel.errors import DataError
from chunksel.study.names import DASH
from chunksel.study.records import Cell, Table1Row
from chunksel.study.results import BenchResults, as_results

PLOT_FILES: dict[str, str] = {
    "latency": "accuracy_vs_latency.png",
    "budget": "accuracy_vs_budget.png",
    "bars": "accuracy_by_dataset.png",
    "significance": "significance.png",
    "curve": "learning_curve.png",
    "answers": "answer_f1_vs_prefill.png",
    "abstention_risk_coverage": "abstention_risk_coverage.png",
    "abstention_reliability": "abstention_reliability.png",
}

Results = BenchResults | Mapping[str, Any]


# ----------------------------------------------------------------- helpers
def as_number(x: Any) -> float | None:
    """A float from a number or a :class:`Cell` (its mean); None when missing/NaN."""
    if x is None:
        return None
    if isinstance(x, Cell):
        return x.mean
    try:
        v = float(x)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def fmt(x: Any, digits: int = 2) -> str:
    """A number to ``digits`` decimals, or "–" when missing/NaN."""
    v = as_number(x)
    return DASH if v is None else f"{v:.{digits}f}"


def fmt_params(n: Any) -> str:
    """7_012_345 -> "7.0M", 48_000_000 -> "48M", 12_300 -> "12k", 0/None -> "–"."""
    v = as_number(n)
    if not v:
        return DASH
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if v >= div:
            q = v / div
            return f"{q:.0f}{unit}" if q >= 10 else f"{q:.1f}{unit}"
    return f"{v:.0f}"


def fmt_bytes(n: Any) -> str:
    v = as_number(n)
    if v is None:
        return DASH
    for div, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if v >= div:
            return f"{v / div:.1f} {unit}"
    return f"{v:.0f} B"


def fmt_p(p: Any) -> str:
    v = as_number(p)
    if v is None:
        return DASH
    return f"{v:.1e}" if v < 1e-4 else f"{v:.4f}"


def md_table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> str:
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def bold_best(
    cells: list[list[str]], values: list[list[float | None]], skip: Sequence[bool] = ()
) -> None:
    """Bold, per column, every cell whose value (rounded to 2 decimals) is the max;
    rows flagged in ``skip`` (reference rows such as the oracle) take no part."""
    if not values:
        return
    skip = list(skip) or [False] * len(values)
    for j in range(len(values[0])):
        col = [None if s else row[j] for row, s in zip(values, skip, strict=True)]
        present = [round(v, 2) for v in col if v is not None]
        if len(present) < 2:
            continue
        best = max(present)
        for i, v in enumerate(col):
            if v is not None and round(v, 2) == best:
                cells[i][j] = f"**{cells[i][j]}**"


def report_datasets(results: Results) -> list[str]:
    """The report's dataset order (the results' ``datasets``)."""
    return list(as_results(results).datasets)


def average(values: Sequence[float | None]) -> tuple[float | None, bool]:
    """Mean over present values and whether every value was present."""
    present = [v for v in values if v is not None]
    if not present:
        return None, False
    return float(np.mean(present)), len(present) == len(values)


def mean_std(mean: float | None, std: float | None, n_seeds: int) -> str:
    if mean is None:
        return DASH
    if std is not None and n_seeds > 1:
        return f"{mean:.2f} ± {std:.2f}"
    return f"{mean:.2f}"


def table1_average(row: Table1Row, datasets: Sequence[str]) -> tuple[float | None, float | None, bool]:
    """Average accuracy of one Table 1 row over ``datasets`` (those present).

    When every present dataset has the same number (> 1) of seeds, the std is that of
    the per-seed averages; else None. Returns ``(mean, std, complete)``.
    """
    cells = [row.per_dataset.get(d) for d in datasets]
    mean, complete = average([c.mean if c else None for c in cells])
    present = [c for c in cells if c is not None and c.mean is not None]
    counts = {len(c.seeds) for c in present}
    std = None
    if present and len(counts) == 1 and next(iter(counts)) > 1:
        per_seed = np.mean(np.array([c.seeds for c in present]), axis=0)
        mean = float(per_seed.mean())
        std = float(np.std(per_seed, ddof=1))
    return mean, std, complete


def ordered(datasets: Sequence[str], keyed: Mapping[str, Any]) -> list[str]:
    return [d for d in datasets if d in keyed] + [d for d in keyed if d not in datasets]


# --------------------------------------------------------------- converters
def metrics_to_percent(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """:func:`chunksel.eval.metrics.evaluate`'s dict with metric fractions x 100 (the
    counts ``n``, ``answerable``, ``contested`` unchanged)."""
    out: dict[str, Any] = {}
    for k, v in metrics.items():
        out[k] = (
            v
            if k in ("n", "answerable", "contested")
            else (None if as_number(v) is None else 100.0 * float(v))
        )
    return out


def seed_cell(
    seed_accuracies: Sequence[float],
    n: int | None = None,
    ci: Sequence[float] | None = None,
) -> dict[str, Any]:
    """A Table 1 cell from per-seed accuracies (%): mean, sample std (ddof=1; 0 for one
    seed), the seeds, and optionally ``n`` and a bootstrap ``ci`` [lo, hi] (%)."""
    seeds = [float(s) for s in seed_accuracies]
    if not seeds:
        raise DataError("seed_cell needs at least one per-seed accuracy")
    cell: dict[str, Any] = {
        "mean": float(np.mean(seeds)),
        "std": float(np.std(seeds, ddof=1)) if len(seeds) > 1 else 0.0,
        "seeds": seeds,
    }
    if n is not None:
        cell["n"] = int(n)
    if ci is not None:
        cell["ci"] = [float(ci[0]), float(ci[1])]
    return cell
