"""The benchmark report: markdown tables, plots and ``results.json`` from one dict.

:func:`chunksel.eval.output.write_report` consumes a *results dict* and writes ``report.md``,
``results.json`` (the dict itself, NaN as null) and the PNG plots into ``out_dir``.
Every piece except ``table1`` is optional, and each table also tolerates missing
datasets/selectors: a missing table is skipped, a missing cell prints "–", and an
average is taken over the datasets present in its row (marked ``†`` when that is not
all of the report's datasets).

Units: every accuracy-like figure is in **percent** (0-100), differences in percentage
points; :func:`metrics_to_percent` and :func:`significance_entry` convert the fractions
of :mod:`chunksel.eval.metrics` / :mod:`chunksel.eval.significance`.

Schema (keys in ``<>`` are names chosen by the run)::

    results = {
      "title": str,                              # optional report heading
      "config": {...},                           # the run's config (JSON-ready)
      "git_commit": str,
      "data_checksums": {<file or dataset>: str},
      "datasets": [<dataset>, ...],              # column order; default: DATASET_ORDER
      "strongest_baseline": <selector>,          # optional, named in the text
      "table1": {                                # main comparison (trained: 3 seeds)
        <selector>: {
          "params": int,                         # trainable parameters (0 -> "–")
          "size_bytes": int,                     # saved directory size
          "p50_ms": float, "p95_ms": float,      # batch-1 one-thread scoring latency
          "query_cost": "none" | "bm25" | "warmup",
          "per_dataset": {
            <dataset>: {
              "mean": float,                     # rank-1 accuracy, % (answerable)
              "std": float,                      # sample std over seeds (ddof=1); 0 for 1 seed
              "seeds": [float, ...],             # per-seed accuracies, %
              "n": int,                          # evaluated (answerable) test instances
              "ci": [lo, hi],                    # optional bootstrap 95% interval, %
            }}}},
      "table2": {<variant>: {<dataset>: cell}},  # ablations (HS, RW, Chunk, HS+RW, ...)
      "table3": {<budget %>: {"dims": int, "per_dataset": {<dataset>: cell}}},
                                                 # cell: float, or {"mean", "seeds"}
      "generator_ablation": {"variants": {<label>: {"blocks": [...],
                                         "per_dataset": {<dataset>: cell}}},
                             "delta": {<dataset>: <significance entry>}},
      "pooled": {<selector>: {"per_dataset": {<dataset>: float},   # trained per dataset
                              "pooled": {<dataset>: float}}},      # trained on the pool
      "significance": {<dataset>: entry | [entry, ...]},  # entry: {"a", "b", "diff": pp,
                                   # "lo": pp, "hi": pp, "p": float, "n": int,
                                   # "acc_a": %, "acc_b": %}  (acc_* optional)
      "learning_curve": {<dataset>: {"usable_train": int, "sizes": [int, ...],
                                     "per_selector": {<selector>: {<size>: %}}}},
      "extra_metrics": {<selector>: {<dataset>: {<metric>: float}}},  # e.g. mrr, ndcg,
                                                                       # recall@k, %
    }

``mean``/``std`` are computed from ``seeds`` when absent. Budgets may be ints or
strings (JSON keys); they are sorted numerically.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError

#: default dataset order: the paper's three first
DATASET_ORDER: tuple[str, ...] = ("triviaqa", "popqa", "msmarco", "nq", "squad2", "hotpotqa")

DATASET_NAMES: dict[str, str] = {
    "triviaqa": "TriviaQA",
    "popqa": "PopQA",
    "msmarco": "MS MARCO",
    "nq": "NQ",
    "squad2": "SQuAD 2.0",
    "hotpotqa": "HotpotQA",
    "wikiqa": "WikiQA",
}


DASH = "–"

#: reference rows that never compete for the bold "best" mark nor "strongest baseline"
REFERENCE_SELECTORS: frozenset[str] = frozenset({"oracle"})

PLOT_FILES: dict[str, str] = {
    "latency": "accuracy_vs_latency.png",
    "budget": "accuracy_vs_budget.png",
    "bars": "accuracy_by_dataset.png",
    "significance": "significance.png",
    "curve": "learning_curve.png",
}


# ----------------------------------------------------------------- helpers
def dataset_label(name: str) -> str:
    return DATASET_NAMES.get(name, name)


def selector_label(name: str) -> str:
    """The display name a registered selector declares (its registry name otherwise)."""
    from chunksel.errors import ChunkselError
    from chunksel.selectors.base import REGISTRY, describe

    if name not in REGISTRY:
        return name
    try:
        return describe(name)["display_name"]
    except (ChunkselError, ImportError):
        return name


def as_number(x: Any) -> float | None:
    """A float from a number, or from a seed cell's ``mean`` (or its seeds' mean)."""
    if x is None:
        return None
    if isinstance(x, Mapping):
        return seed_stats(x)[0]
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


def _table(header: Sequence[str], rows: Sequence[Sequence[str]], align: Sequence[str]) -> str:
    sep = ["---:" if a == "r" else ":---" for a in align]
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join(sep) + " |"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _bold_best(
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


def report_datasets(results: Mapping[str, Any]) -> list[str]:
    """The report's dataset order: ``results["datasets"]``, else every dataset seen,
    paper's three first then the rest of DATASET_ORDER, then others by name."""
    if results.get("datasets"):
        return [str(d) for d in results["datasets"]]
    seen: set[str] = set()
    for entry in (results.get("table1") or {}).values():
        seen.update((entry.get("per_dataset") or {}).keys())
    for row in (results.get("table2") or {}).values():
        seen.update(row.keys())
    for row in (results.get("table3") or {}).values():
        seen.update((row.get("per_dataset") or {}).keys())
    seen.update((results.get("significance") or {}).keys())
    seen.update((results.get("learning_curve") or {}).keys())
    ordered = [d for d in DATASET_ORDER if d in seen]
    return ordered + sorted(seen - set(ordered))


def _average(values: Sequence[float | None]) -> tuple[float | None, bool]:
    """Mean over present values and whether every value was present."""
    present = [v for v in values if v is not None]
    if not present:
        return None, False
    return float(np.mean(present)), len(present) == len(values)


def seed_stats(
    cell: Mapping[str, Any] | float | None,
) -> tuple[float | None, float | None, list[float]]:
    """``(mean, std, seeds)`` of a Table 1 cell (a dict, or a bare number)."""
    if cell is None:
        return None, None, []
    if not isinstance(cell, Mapping):
        return as_number(cell), None, []
    seeds = [float(s) for s in cell.get("seeds") or [] if as_number(s) is not None]
    mean = as_number(cell.get("mean"))
    if mean is None and seeds:
        mean = float(np.mean(seeds))
    std = as_number(cell.get("std"))
    if std is None and len(seeds) > 1:
        std = float(np.std(seeds, ddof=1))
    return mean, std, seeds


def _mean_std(mean: float | None, std: float | None, n_seeds: int) -> str:
    if mean is None:
        return DASH
    if std is not None and n_seeds > 1:
        return f"{mean:.2f} ± {std:.2f}"
    return f"{mean:.2f}"


def table1_average(
    entry: Mapping[str, Any], datasets: Sequence[str]
) -> tuple[float | None, float | None, bool]:
    """Average accuracy of one selector over ``datasets`` (those present).

    When every present dataset has the same number (> 1) of seeds, the std is that of
    the per-seed averages; else None. Returns ``(mean, std, complete)``.
    """
    per = entry.get("per_dataset") or {}
    stats = [seed_stats(per.get(d)) for d in datasets]
    mean, complete = _average([s[0] for s in stats])
    present = [s for s in stats if s[0] is not None]
    counts = {len(s[2]) for s in present}
    std = None
    if present and len(counts) == 1 and next(iter(counts)) > 1:
        per_seed = np.mean(np.array([s[2] for s in present]), axis=0)
        mean = float(per_seed.mean())
        std = float(np.std(per_seed, ddof=1))
    return mean, std, complete


# ------------------------------------------------------------------ tables
def format_table1(results: Mapping[str, Any]) -> str:
    """Table 1 in markdown: selectors x datasets (+ average), with cost columns.

    Cells are "mean ± std" over seeds (2 decimals); the best per column is bold.
    """
    t1 = results.get("table1") or {}
    if not t1:
        return ""
    datasets = report_datasets(results)
    header = ["Method", "Params", "Size", "p50 ms", "p95 ms", "Query cost"]
    header += [dataset_label(d) for d in datasets] + ["Avg."]
    rows: list[list[str]] = []
    vals: list[list[float | None]] = []
    any_partial = False
    for name, entry in t1.items():
        per = entry.get("per_dataset") or {}
        cells, row_vals = [], []
        for d in datasets:
            mean, std, seeds = seed_stats(per.get(d))
            cells.append(_mean_std(mean, std, len(seeds)))
            row_vals.append(mean)
        avg, avg_std, complete = table1_average(entry, datasets)
        avg_cell = _mean_std(avg, avg_std, 2 if avg_std is not None else 1)
        if avg is not None and not complete:
            avg_cell += " †"
            any_partial = True
        cells.append(avg_cell)
        row_vals.append(avg if complete else None)
        rows.append(
            [
                selector_label(name),
                fmt_params(entry.get("params")),
                fmt_bytes(entry.get("size_bytes")),
                fmt(entry.get("p50_ms"), 3),
                fmt(entry.get("p95_ms"), 3),
                str(entry.get("query_cost") or DASH),
            ]
        )
        vals.append(row_vals)
        rows[-1] += cells
    acc_cells = [r[6:] for r in rows]
    _bold_best(acc_cells, vals, [name in REFERENCE_SELECTORS for name in t1])
    rows = [r[:6] + a for r, a in zip(rows, acc_cells, strict=True)]
    text = _table(header, rows, ["l", "r", "r", "r", "r", "l"] + ["r"] * (len(datasets) + 1))
    if any_partial:
        text += "\n\n† averaged over the datasets this selector was evaluated on."
    counts = []
    for d in datasets:
        ns = [(e.get("per_dataset") or {}).get(d) for e in t1.values()]
        n = next(
            (c.get("n") for c in ns if isinstance(c, Mapping) and c.get("n") is not None), None
        )
        if n is not None:
            counts.append(f"{dataset_label(d)} {int(n)}")
    if counts:
        text += "\n\nEvaluated (answerable) test instances: " + ", ".join(counts) + "."
    return text


def strongest_baseline(
    results: Mapping[str, Any],
    dataset: str | None = None,
    exclude: Sequence[str] = ("prototype", "anchored"),
) -> str | None:
    """The Table 1 selector with the highest accuracy on ``dataset`` (or, with
    ``dataset=None``, the highest average over the datasets every candidate has),
    leaving out ``exclude`` and the reference rows (oracle). ``None`` if there is none.
    """
    t1 = results.get("table1") or {}
    names = [s for s in t1 if s not in set(exclude) | REFERENCE_SELECTORS]
    if dataset is not None:
        scored = [(seed_stats((t1[s].get("per_dataset") or {}).get(dataset))[0], s) for s in names]
    else:
        common = [
            d
            for d in report_datasets(results)
            if all(d in (t1[s].get("per_dataset") or {}) for s in names)
        ]
        scored = [(table1_average(t1[s], common)[0] if common else None, s) for s in names]
    scored = [(v, s) for v, s in scored if v is not None]
    if not scored:
        return None
    best = max(v for v, _ in scored)
    return next(s for v, s in scored if v == best)  # first in table order on a tie


def _per_dataset_table(
    row_names: Sequence[str],
    getter: Any,
    datasets: Sequence[str],
    first_header: str,
    extra_header: Sequence[str] = (),
    extra_cells: Any = None,
    label: Any = str,
) -> str:
    header = [first_header, *extra_header] + [dataset_label(d) for d in datasets] + ["Avg."]
    rows, vals = [], []
    partial = False
    for name in row_names:
        row_vals = [as_number(getter(name, d)) for d in datasets]
        avg, complete = _average(row_vals)
        cells = [fmt(v) for v in row_vals]
        avg_cell = fmt(avg)
        if avg is not None and not complete:
            avg_cell += " †"
            partial = True
        rows.append([label(name), *(extra_cells(name) if extra_cells else [])] + cells + [avg_cell])
        vals.append(row_vals + [avg if complete else None])
    n_lead = 1 + len(extra_header)
    acc = [r[n_lead:] for r in rows]
    _bold_best(acc, vals)
    rows = [r[:n_lead] + a for r, a in zip(rows, acc, strict=True)]
    text = _table(header, rows, ["l"] + ["r"] * (len(header) - 1))
    if partial:
        text += "\n\n† averaged over the datasets present in this row."
    return text


def format_table2(results: Mapping[str, Any]) -> str:
    """Table 2: ablations of the prototype selector (variant x dataset + average)."""
    t2 = results.get("table2") or {}
    if not t2:
        return ""
    return _per_dataset_table(
        list(t2), lambda v, d: (t2[v] or {}).get(d), report_datasets(results), "Features"
    )


def budget_value(b: Any) -> float:
    try:
        return float(str(b).rstrip("%"))
    except ValueError:
        return math.inf


def format_table3(results: Mapping[str, Any]) -> str:
    """Table 3: the feature-budget curve (budget %, dims kept, per dataset, average)."""
    t3 = results.get("table3") or {}
    if not t3:
        return ""
    budgets = sorted(t3, key=budget_value)
    return _per_dataset_table(
        budgets,
        lambda b, d: (t3[b].get("per_dataset") or {}).get(d),
        report_datasets(results),
        "Feature budget",
        extra_header=["# Dims"],
        extra_cells=lambda b: [str(t3[b].get("dims", DASH))],
        label=lambda b: f"{str(b).rstrip('%')}%",
    )


def format_generator_ablation(results: Mapping[str, Any]) -> str:
    """The flagship with and without the generator's h and r: one row per variant, then
    the paired difference with its 95% bootstrap interval per dataset."""
    ga = results.get("generator_ablation") or {}
    variants = ga.get("variants") or {}
    if not variants:
        return ""
    datasets = report_datasets(results)
    text = _per_dataset_table(
        list(variants), lambda v, d: (variants[v].get("per_dataset") or {}).get(d), datasets, "Anchored prototype"
    )
    delta = ga.get("delta") or {}
    if delta:
        text += "\n\n" + format_significance({"datasets": datasets, "delta": delta}, key="delta")
    return text


def format_learning_curve(results: Mapping[str, Any]) -> str:
    """Per curve dataset: selectors x usable training instances (test rank-1, %)."""
    lc = results.get("learning_curve") or {}
    parts = []
    for d in [d for d in report_datasets(results) if d in lc]:
        entry = lc[d]
        sizes = [str(n) for n in entry.get("sizes") or []]
        header = ["Method"] + [f"{n} (all)" if int(n) == entry.get("usable_train") else n for n in sizes]
        rows = [[selector_label(name)] + [fmt(points.get(n)) for n in sizes]
                for name, points in (entry.get("per_selector") or {}).items()]
        if rows:
            parts.append(f"**{dataset_label(d)}** (usable training instances: {entry.get('usable_train')})\n\n"
                         + _table(header, rows, ["l"] + ["r"] * len(sizes)))
    return "\n\n".join(parts)


def format_pooled(results: Mapping[str, Any]) -> str:
    """Per-dataset vs pooled training: two rows per selector plus their difference."""
    pooled = results.get("pooled") or {}
    if not pooled:
        return ""
    datasets = report_datasets(results)
    header = ["Method", "Training"] + [dataset_label(d) for d in datasets] + ["Avg."]
    rows = []
    for name, entry in pooled.items():
        per = entry.get("per_dataset") or {}
        pool = entry.get("pooled") or {}
        a = [as_number(per.get(d)) for d in datasets]
        b = [as_number(pool.get(d)) for d in datasets]
        diff = [None if x is None or y is None else y - x for x, y in zip(a, b, strict=True)]
        for label, vals in (("per dataset", a), ("pooled", b), ("Δ pooled − per dataset", diff)):
            avg, _ = _average(vals)
            cells = [fmt(v) if label[0] != "Δ" or v is None else f"{v:+.2f}" for v in vals]
            avg_cell = fmt(avg) if label[0] != "Δ" or avg is None else f"{avg:+.2f}"
            rows.append([selector_label(name), label] + cells + [avg_cell])
    return _table(header, rows, ["l", "l"] + ["r"] * (len(datasets) + 1))


def significance_rows(results: Mapping[str, Any], key: str = "significance") -> list[tuple[str, Mapping]]:
    """``(dataset, entry)`` pairs of ``results[key]`` in report order (a dataset may hold
    one entry or a list of them)."""
    sig = results.get(key) or {}
    order = [d for d in report_datasets(results) if d in sig] + [
        d for d in sig if d not in report_datasets(results)
    ]
    out = []
    for d in order:
        entries = sig[d] if isinstance(sig[d], (list, tuple)) else [sig[d]]
        out += [(d, e) for e in entries if isinstance(e, Mapping)]
    return out


def format_significance(results: Mapping[str, Any], key: str = "significance") -> str:
    """Per dataset: A vs B, accuracy difference (pp), 95% bootstrap CI, McNemar p."""
    pairs = significance_rows(results, key)
    if not pairs:
        return ""
    header = ["Dataset", "A", "B", "n", "Acc A", "Acc B", "Δ (pp)", "95% CI", "McNemar p"]
    rows = []
    for d, e in pairs:
        diff = as_number(e.get("diff"))
        lo, hi = as_number(e.get("lo")), as_number(e.get("hi"))
        ci = DASH if lo is None or hi is None else f"[{lo:+.2f}, {hi:+.2f}]"
        rows.append(
            [
                dataset_label(d),
                selector_label(str(e.get("a", DASH))),
                selector_label(str(e.get("b", DASH))),
                str(e.get("n", DASH)),
                fmt(e.get("acc_a")),
                fmt(e.get("acc_b")),
                DASH if diff is None else f"{diff:+.2f}",
                ci,
                fmt_p(e.get("p")),
            ]
        )
    align = ["l", "l", "l"] + ["r"] * 6
    if all(r[4] == DASH and r[5] == DASH for r in rows):  # no accuracies given: drop them
        header, align = header[:4] + header[6:], align[:4] + align[6:]
        rows = [r[:4] + r[6:] for r in rows]
    return _table(header, rows, align)


def format_extra_metrics(results: Mapping[str, Any]) -> str:
    """One table per dataset: selectors x further metrics (MRR, nDCG, recall@k, ...)."""
    extra = results.get("extra_metrics") or {}
    if not extra:
        return ""
    datasets = report_datasets(results)
    seen_ds = {d for per in extra.values() for d in per}
    order = [d for d in datasets if d in seen_ds] + sorted(seen_ds - set(datasets))
    parts = []
    for d in order:
        names = [s for s in extra if d in extra[s]]
        keys: list[str] = []
        for s in names:
            for k in extra[s][d]:
                if k not in keys:
                    keys.append(k)
        rows = [[selector_label(s)] + [fmt(extra[s][d].get(k)) for k in keys] for s in names]
        vals = [[as_number(extra[s][d].get(k)) for k in keys] for s in names]
        body = [r[1:] for r in rows]
        _bold_best(body, vals)
        rows = [[r[0], *b] for r, b in zip(rows, body, strict=True)]
        parts.append(
            f"**{dataset_label(d)}**\n\n"
            + _table(["Method", *keys], rows, ["l"] + ["r"] * len(keys))
        )
    return "\n\n".join(parts)


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


def significance_entry(
    a: str,
    b: str,
    hits_a: Any,
    hits_b: Any,
    n_resamples: int = 10_000,
    seed: int = 0,
    alpha: float = 0.05,
    majority: tuple[Any, Any] | None = None,
) -> dict[str, Any]:
    """A ``results["significance"][dataset]`` entry (percent / percentage points) from
    the paired rank-1 outcomes of selectors ``a`` and ``b`` on the same instances.

    ``hits_a`` / ``hits_b`` may be hit rates averaged over seeds (the bootstrap interval
    is then over instances of the seed-averaged accuracy); McNemar's test then reads the
    0/1 ``majority`` outcomes (e.g. the seeds' majority vote)."""
    from chunksel.eval.significance import compare, mcnemar_exact, paired_bootstrap

    if majority is None:
        c = compare(hits_a, hits_b, n_resamples=n_resamples, seed=seed, alpha=alpha)
    else:
        diff, lo, hi = paired_bootstrap(hits_a, hits_b, n_resamples=n_resamples, seed=seed, alpha=alpha)
        ma, mb = (np.asarray(m, dtype=bool) for m in majority)
        c = {"diff": diff, "lo": lo, "hi": hi, "p": mcnemar_exact(ma, mb), "n": int(len(ma)),
             "n10": int((ma & ~mb).sum()), "n01": int((~ma & mb).sum()),
             "acc_a": float(np.mean(hits_a)), "acc_b": float(np.mean(hits_b))}
    return {
        "a": a,
        "b": b,
        "diff": 100.0 * c["diff"],
        "lo": 100.0 * c["lo"],
        "hi": 100.0 * c["hi"],
        "p": c["p"],
        "n": c["n"],
        "n10": c["n10"],
        "n01": c["n01"],
        "acc_a": 100.0 * c["acc_a"],
        "acc_b": 100.0 * c["acc_b"],
    }


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Mapping):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, Path):
        return str(obj)
    return obj


# ------------------------------------------------------------------- report
def _setup_section(results: Mapping[str, Any]) -> str:
    lines = ["## Setup", ""]
    lines.append(f"- git commit: `{results.get('git_commit') or 'unknown'}`")
    datasets = report_datasets(results)
    if datasets:
        lines.append("- datasets: " + ", ".join(dataset_label(d) for d in datasets))
    if results.get("strongest_baseline"):
        lines.append(f"- strongest baseline: {selector_label(str(results['strongest_baseline']))}")
    sums = results.get("data_checksums") or {}
    if sums:
        lines += [
            "",
            _table(["Data", "sha256"], [[str(k), f"`{v}`"] for k, v in sums.items()], ["l", "l"]),
        ]
    if results.get("config"):
        lines += [
            "",
            "Config:",
            "",
            "```json",
            json.dumps(_jsonable(results["config"]), indent=2, sort_keys=True),
            "```",
        ]
    return "\n".join(lines)


def _seed_note(results: Mapping[str, Any], key: str) -> str:
    seeds = ((results.get("config") or {}).get("profile") or {}).get(key)
    return "seeds " + ", ".join(str(s) for s in seeds) if seeds else "one seed"


def render_markdown(results: Mapping[str, Any], plots: Mapping[str, str] | None = None) -> str:
    """The report text; ``plots`` maps plot kinds (see PLOT_FILES) to relative paths."""
    plots = plots or {}
    title = results.get("title") or "chunksel benchmark report"
    parts = [f"# {title}"]
    sections = [
        (
            "Table 1: rank-1 chunk-selection accuracy (%)",
            format_table1(results),
            "Accuracy over answerable test instances (at least one positive among the K "
            "candidates); trained selectors: mean ± std over seeds. Params: trainable "
            "parameters the selector adds; latency: per query at batch 1, one thread. "
            "Best per column in bold.",
            ["latency", "bars"],
        ),
        (
            "Significance against the strongest baseline",
            format_significance(results),
            "B is the dataset's strongest baseline, chosen by validation accuracy (never "
            "test). Δ = A − B in percentage points. The 95% paired bootstrap interval "
            "resamples test instances of the per-instance hit rate averaged over the "
            "trained selectors' seeds (Table 1's seeds); the exact McNemar p-value (binomial "
            "test on discordant pairs) reads each instance's majority outcome over the seeds.",
            ["significance"],
        ),
        (
            "Does the generator help? The anchored prototype with and without h and r",
            format_generator_ablation(results),
            "Mean over Table 1's seeds; the second table gives the paired difference (with − "
            "without h, r) with its 95% bootstrap interval, seeds combined as above.",
            [],
        ),
        (
            "Table 2: feature ablation of the paper prototype",
            format_table2(results),
            "Mean over the ablation seeds "
            f"({_seed_note(results, 'ablation_seeds')}). HS: question hidden state; RW: routing "
            "weights; Chunk: candidate embeddings.",
            [],
        ),
        (
            "Table 3: feature budget of the paper prototype",
            format_table3(results),
            "Share of input features kept (by gradient importance) and the dimensions left; "
            f"mean over the ablation seeds ({_seed_note(results, 'ablation_seeds')}).",
            ["budget"],
        ),
        (
            "Learning curves",
            format_learning_curve(results),
            "Test rank-1 (%) against the number of usable (contested) training instances; "
            "a smaller set is a subset of a larger one; validation and test splits whole; "
            "one seed (the largest point is Table 1's first seed).",
            ["curve"],
        ),
        ("Per-dataset vs pooled training", format_pooled(results), "", []),
        (
            "Further metrics",
            format_extra_metrics(results),
            "In percent, averaged over answerable instances (contested accuracy: instances "
            "with at least one positive and one negative candidate).",
            [],
        ),
    ]
    for heading, table, note, plot_kinds in sections:
        if not table:
            continue
        parts += [f"## {heading}", table]
        if note:
            parts.append(note)
        for kind in plot_kinds:
            if kind in plots:
                parts.append(f"![{kind}]({plots[kind]})")
    parts.append(_setup_section(results))
    return "\n\n".join(parts) + "\n"
