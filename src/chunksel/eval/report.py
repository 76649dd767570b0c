"""The benchmark report: markdown tables from typed results (:mod:`chunksel.eval.results`).

:func:`chunksel.eval.output.write_report` takes a :class:`~chunksel.eval.results.BenchResults`
(or a dict in its JSON layout, read and checked by ``BenchResults.from_dict``) and writes
``report.md``, ``results.json`` and the PNG plots. Every table except Table 1 is optional,
and each tolerates missing datasets/selectors: a missing table is skipped, a missing cell
prints "–", and an average is taken over the datasets present in its row (marked ``†``
when that is not all of the report's datasets).

Units: every accuracy-like figure is in **percent** (0-100), differences in percentage
points; :func:`metrics_to_percent` and :func:`significance_entry` convert the fractions
of :mod:`chunksel.eval.metrics` / :mod:`chunksel.eval.significance`. Table 4 (answers)
shows EM / F1 in percent of :func:`chunksel.eval.answers.answer_table`'s fractions.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from chunksel.errors import DataError
from chunksel.eval.names import (  # noqa: F401  (re-exported)
    DASH,
    DATASET_NAMES,
    DATASET_ORDER,
    REFERENCE_SELECTORS,
    dataset_label,
    selector_label,
)
from chunksel.eval.results import BenchResults, Cell, Comparison, Table1Row, _jsonable, as_results

PLOT_FILES: dict[str, str] = {
    "latency": "accuracy_vs_latency.png",
    "budget": "accuracy_vs_budget.png",
    "bars": "accuracy_by_dataset.png",
    "significance": "significance.png",
    "curve": "learning_curve.png",
    "answers": "answer_f1_vs_prefill.png",
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


def report_datasets(results: Results) -> list[str]:
    """The report's dataset order (the results' ``datasets``)."""
    return list(as_results(results).datasets)


def _average(values: Sequence[float | None]) -> tuple[float | None, bool]:
    """Mean over present values and whether every value was present."""
    present = [v for v in values if v is not None]
    if not present:
        return None, False
    return float(np.mean(present)), len(present) == len(values)


def _mean_std(mean: float | None, std: float | None, n_seeds: int) -> str:
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
    mean, complete = _average([c.mean if c else None for c in cells])
    present = [c for c in cells if c is not None and c.mean is not None]
    counts = {len(c.seeds) for c in present}
    std = None
    if present and len(counts) == 1 and next(iter(counts)) > 1:
        per_seed = np.mean(np.array([c.seeds for c in present]), axis=0)
        mean = float(per_seed.mean())
        std = float(np.std(per_seed, ddof=1))
    return mean, std, complete


# ------------------------------------------------------------------ tables
def format_table1(results: Results) -> str:
    """Table 1 in markdown: selectors x datasets (+ average), with cost columns.

    Cells are "mean ± std" over seeds (2 decimals); the best per column is bold.
    """
    res = as_results(results)
    t1 = res.table1
    if not t1:
        return ""
    datasets = res.datasets
    header = ["Method", "Params", "Size", "p50 ms", "p95 ms", "Query cost"]
    header += [dataset_label(d) for d in datasets] + ["Avg."]
    rows: list[list[str]] = []
    vals: list[list[float | None]] = []
    any_partial = False
    for name, row in t1.items():
        cells, row_vals = [], []
        for d in datasets:
            c = row.per_dataset.get(d)
            mean = c.mean if c else None
            cells.append(_mean_std(mean, c.std if c else None, len(c.seeds) if c else 0))
            row_vals.append(mean)
        avg, avg_std, complete = table1_average(row, datasets)
        avg_cell = _mean_std(avg, avg_std, 2 if avg_std is not None else 1)
        if avg is not None and not complete:
            avg_cell += " †"
            any_partial = True
        cells.append(avg_cell)
        row_vals.append(avg if complete else None)
        rows.append([
            selector_label(name), fmt_params(row.params), fmt_bytes(row.size_bytes),
            fmt(row.p50_ms, 3), fmt(row.p95_ms, 3), str(row.query_cost or DASH),
        ] + cells)
        vals.append(row_vals)
    acc_cells = [r[6:] for r in rows]
    _bold_best(acc_cells, vals, [name in REFERENCE_SELECTORS for name in t1])
    rows = [r[:6] + a for r, a in zip(rows, acc_cells, strict=True)]
    text = _table(header, rows, ["l", "r", "r", "r", "r", "l"] + ["r"] * (len(datasets) + 1))
    if any_partial:
        text += "\n\n† averaged over the datasets this selector was evaluated on."
    counts = []
    for d in datasets:
        n = next((r.per_dataset[d].n for r in t1.values() if d in r.per_dataset and r.per_dataset[d].n is not None),
                 None)
        if n is not None:
            counts.append(f"{dataset_label(d)} {int(n)}")
    if counts:
        text += "\n\nEvaluated (answerable) test instances: " + ", ".join(counts) + "."
    return text


def strongest_baseline(
    results: Results,
    dataset: str | None = None,
    exclude: Sequence[str] = ("prototype", "anchored"),
) -> str | None:
    """The Table 1 selector with the highest *test* accuracy on ``dataset`` (or, with
    ``dataset=None``, the highest average over the datasets every candidate has),
    leaving out ``exclude`` and the reference rows (oracle). ``None`` if there is none.

    A descriptive helper for finished tables; the benchmark itself chooses its strongest
    baseline on validation (``BenchResults.strongest_baseline``).
    """
    res = as_results(results)
    t1 = res.table1
    names = [s for s in t1 if s not in set(exclude) | REFERENCE_SELECTORS]
    if dataset is not None:
        scored = [(as_number(t1[s].per_dataset.get(dataset)), s) for s in names]
    else:
        common = [d for d in res.datasets if all(d in t1[s].per_dataset for s in names)]
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


def format_table2(results: Results) -> str:
    """Table 2: ablations of the prototype selector (variant x dataset + average)."""
    res = as_results(results)
    t2 = res.table2
    if not t2:
        return ""
    return _per_dataset_table(list(t2), lambda v, d: t2[v].get(d), res.datasets, "Features")


def budget_value(b: Any) -> float:
    try:
        return float(str(b).rstrip("%"))
    except ValueError:
        return math.inf


def format_table3(results: Results) -> str:
    """Table 3: the feature-budget curve (budget %, dims kept, per dataset, average)."""
    res = as_results(results)
    t3 = res.table3
    if not t3:
        return ""
    budgets = sorted(t3, key=budget_value)
    return _per_dataset_table(
        budgets,
        lambda b, d: t3[b].per_dataset.get(d),
        res.datasets,
        "Feature budget",
        extra_header=["# Dims"],
        extra_cells=lambda b: [DASH if t3[b].dims is None else str(t3[b].dims)],
        label=lambda b: f"{str(b).rstrip('%')}%",
    )


def format_generator_ablation(results: Results) -> str:
    """The flagship with and without the generator's h and r: one row per variant, then
    the paired difference with its 95% bootstrap interval per dataset."""
    res = as_results(results)
    ga = res.generator_ablation
    if ga is None or not ga.variants:
        return ""
    text = _per_dataset_table(
        list(ga.variants), lambda v, d: ga.variants[v].per_dataset.get(d), res.datasets, "Anchored prototype"
    )
    if ga.delta:
        text += "\n\n" + _significance_table([(d, ga.delta[d]) for d in _ordered(res.datasets, ga.delta)])
    return text


def format_learning_curve(results: Results) -> str:
    """Per curve dataset: selectors x usable training instances (test rank-1, %)."""
    res = as_results(results)
    parts = []
    for d in [d for d in res.datasets if d in res.learning_curve]:
        curve = res.learning_curve[d]
        sizes = [str(n) for n in curve.sizes]
        header = ["Method"] + [f"{n} (all)" if int(n) == curve.usable_train else n for n in sizes]
        rows = [[selector_label(name)] + [fmt(points.get(n)) for n in sizes]
                for name, points in curve.per_selector.items()]
        if rows:
            parts.append(f"**{dataset_label(d)}** (usable training instances: {curve.usable_train})\n\n"
                         + _table(header, rows, ["l"] + ["r"] * len(sizes)))
    return "\n\n".join(parts)


def format_pooled(results: Results) -> str:
    """Per-dataset vs pooled training: two rows per selector plus their difference."""
    res = as_results(results)
    if not res.pooled:
        return ""
    datasets = res.datasets
    header = ["Method", "Training"] + [dataset_label(d) for d in datasets] + ["Avg."]
    rows = []
    for name, entry in res.pooled.items():
        a = [as_number(entry.per_dataset.get(d)) for d in datasets]
        b = [as_number(entry.pooled.get(d)) for d in datasets]
        diff = [None if x is None or y is None else y - x for x, y in zip(a, b, strict=True)]
        for label, vals in (("per dataset", a), ("pooled", b), ("Δ pooled − per dataset", diff)):
            avg, _ = _average(vals)
            cells = [fmt(v) if label[0] != "Δ" or v is None else f"{v:+.2f}" for v in vals]
            avg_cell = fmt(avg) if label[0] != "Δ" or avg is None else f"{avg:+.2f}"
            rows.append([selector_label(name), label] + cells + [avg_cell])
    return _table(header, rows, ["l", "l"] + ["r"] * (len(datasets) + 1))


def _ordered(datasets: Sequence[str], keyed: Mapping[str, Any]) -> list[str]:
    return [d for d in datasets if d in keyed] + [d for d in keyed if d not in datasets]


def significance_rows(results: Results) -> list[tuple[str, Comparison]]:
    """``(dataset, comparison)`` pairs of the significance table in report order."""
    res = as_results(results)
    return [(d, c) for d in _ordered(res.datasets, res.significance) for c in res.significance[d]]


def _significance_table(pairs: Sequence[tuple[str, Comparison]]) -> str:
    if not pairs:
        return ""
    header = ["Dataset", "A", "B", "n", "Acc A", "Acc B", "Δ (pp)", "95% CI", "McNemar p"]
    rows = []
    for d, e in pairs:
        ci = DASH if e.lo is None or e.hi is None else f"[{e.lo:+.2f}, {e.hi:+.2f}]"
        rows.append([
            dataset_label(d), selector_label(e.a), selector_label(e.b), str(e.n),
            fmt(e.acc_a), fmt(e.acc_b), DASH if e.diff is None else f"{e.diff:+.2f}", ci, fmt_p(e.p),
        ])
    align = ["l", "l", "l"] + ["r"] * 6
    if all(r[4] == DASH and r[5] == DASH for r in rows):  # no accuracies given: drop them
        header, align = header[:4] + header[6:], align[:4] + align[6:]
        rows = [r[:4] + r[6:] for r in rows]
    return _table(header, rows, align)


def format_significance(results: Results) -> str:
    """Per dataset: A vs B, accuracy difference (pp), 95% bootstrap CI, McNemar p."""
    return _significance_table(significance_rows(results))


#: the flagship's acceptance criteria (mean of Table 1's seeds): never significantly below
#: the validation-chosen strongest baseline, an average margin over it, an average margin
#: over retrieval order, and (on the large profile) significantly better on some datasets
FLAGSHIP_TARGETS: dict[str, float] = {
    "margin_over_strongest": 1.0,
    "margin_over_retrieval": 8.0,
    "significantly_better_large": 3,
}


def _verdict(ok: bool | None) -> str:
    return DASH if ok is None else ("met" if ok else "not met")


def flagship_targets(results: Results) -> dict[str, Any] | None:
    """The flagship (``results.flagship``) against :data:`FLAGSHIP_TARGETS`, measured.

    Reads Table 1 and the significance table (whose ``b`` is the per-dataset strongest
    baseline, chosen on validation). Returns None when the flagship or its comparisons are
    missing. Per dataset: the paired difference and its 95% interval, classed ``better``
    (interval above 0), ``worse`` (below 0) or ``tie``.
    """
    res = as_results(results)
    flag = res.flagship
    if not flag or flag not in res.table1:
        return None
    per_ds: dict[str, Comparison] = {}
    for d in res.datasets:
        best = res.strongest_per_dataset.get(d)
        for c in res.significance.get(d, []):
            if c.a == flag and c.b == best and c.b != "retrieval":
                per_ds[d] = c
    if not per_ds:
        return None
    rows = {d: {"baseline": c.b, "diff": c.diff, "lo": c.lo, "hi": c.hi,
                "class": "better" if c.lo > 0 else "worse" if c.hi < 0 else "tie"}
            for d, c in per_ds.items()}
    datasets = [d for d in res.datasets if d in per_ds]
    flag_avg = table1_average(res.table1[flag], datasets)[0]
    out: dict[str, Any] = {"flagship": flag, "per_dataset": rows, "datasets": datasets,
                           "flagship_average": flag_avg}
    sb = res.strongest_baseline
    if sb in res.table1 and flag_avg is not None:
        sb_avg = table1_average(res.table1[sb], datasets)[0]
        out["strongest_baseline"] = sb
        out["margin_over_strongest"] = None if sb_avg is None else flag_avg - sb_avg
    per_best = [per_ds[d].acc_b for d in datasets]
    if flag_avg is not None and all(v is not None for v in per_best):
        out["margin_over_per_dataset_best"] = flag_avg - float(np.mean(per_best))
    if "retrieval" in res.table1 and flag_avg is not None:
        r_avg = table1_average(res.table1["retrieval"], datasets)[0]
        out["margin_over_retrieval"] = None if r_avg is None else flag_avg - r_avg
    out["n_worse"] = sum(r["class"] == "worse" for r in rows.values())
    out["n_better"] = sum(r["class"] == "better" for r in rows.values())
    out["large"] = res.profile_name == "large"
    return out


def _curve_sentences(res: BenchResults, flag: str, baseline: str | None) -> list[str]:
    """Per learning-curve dataset: the flagship's and the baseline's gain from the smallest
    training set to all of it, and the gap between them at both ends."""
    out = []
    for d in [d for d in res.datasets if d in res.learning_curve]:
        curve = res.learning_curve[d]
        sizes = [str(n) for n in curve.sizes]
        f = curve.per_selector.get(flag, {})
        others = [b for b in (baseline, "lambdamart") if b and b in curve.per_selector and b != flag]
        if not sizes or sizes[0] not in f or sizes[-1] not in f or not others:
            continue
        b = curve.per_selector[others[0]]
        lo_n, hi_n = sizes[0], sizes[-1]
        if lo_n not in b or hi_n not in b:
            continue
        out.append(
            f"{dataset_label(d)}: {selector_label(flag)} {f[lo_n]:.2f} at {lo_n} usable training "
            f"instances, {f[hi_n]:.2f} at all {hi_n} ({f[hi_n] - f[lo_n]:+.2f}); "
            f"{selector_label(others[0])} {b[lo_n]:.2f} to {b[hi_n]:.2f} ({b[hi_n] - b[lo_n]:+.2f}); "
            f"the gap goes from {f[lo_n] - b[lo_n]:+.2f} to {f[hi_n] - b[hi_n]:+.2f} points."
        )
    return out


def format_flagship_targets(results: Results) -> str:
    """The flagship's acceptance criteria: measured value, target, verdict and shortfall;
    then, where one is missed, the learning curves and the generator ablation that bear on
    why (as measured figures, one seed for the curves)."""
    res = as_results(results)
    t = flagship_targets(res)
    if t is None:
        return ""
    T = FLAGSHIP_TARGETS
    rows: list[list[str]] = []
    worse = [dataset_label(d) for d, r in t["per_dataset"].items() if r["class"] == "worse"]
    rows.append(["Not significantly below the strongest baseline on any dataset",
                 f"{t['n_worse']} below" + (f" ({', '.join(worse)})" if worse else ""), "0 below",
                 _verdict(t["n_worse"] == 0), DASH if not t["n_worse"] else f"{t['n_worse']} dataset(s)"])
    for key, label, target in (
        ("margin_over_strongest", f"Average above the strongest baseline ({selector_label(str(t.get('strongest_baseline')))})",
         T["margin_over_strongest"]),
        ("margin_over_per_dataset_best", "Average above each dataset's strongest baseline", T["margin_over_strongest"]),
        ("margin_over_retrieval", "Average above retrieval order", T["margin_over_retrieval"]),
    ):
        m = t.get(key)
        if m is not None:
            rows.append([label, f"{m:+.2f}", f"≥ +{target:.2f}", _verdict(m >= target),
                         DASH if m >= target else f"{target - m:.2f} pp"])
    need = int(T["significantly_better_large"])
    n_ds = len(t["datasets"])
    rows.append([f"Significantly better than the strongest baseline (large profile: ≥ {need} of {n_ds})",
                 f"{t['n_better']} of {n_ds}", f"≥ {need}" if t["large"] else "(large profile)",
                 _verdict(t["n_better"] >= need) if t["large"] else DASH,
                 DASH if not t["large"] or t["n_better"] >= need else f"{need - t['n_better']} dataset(s)"])
    text = _table(["Criterion", "Measured", "Target", "Verdict", "Short by"], rows, ["l", "r", "r", "l", "r"])
    per = ", ".join(f"{dataset_label(d)} {r['diff']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}] vs "
                    f"{selector_label(r['baseline'])}" for d, r in t["per_dataset"].items())
    text += f"\n\nPer dataset (Δ and 95% interval, pp): {per}."
    missed = any(r[3] == "not met" for r in rows)
    if missed:
        why = _curve_sentences(res, t["flagship"], res.strongest_baseline)
        if why:
            text += "\n\nLearning curves (one seed): " + " ".join(why)
        ga = res.generator_ablation
        if ga is not None and ga.delta:
            diffs = [c.diff for c in ga.delta.values()]
            sig = [dataset_label(d) for d, c in ga.delta.items() if c.lo > 0 or c.hi < 0]
            text += (f"\n\nGenerator features: with − without h, r averages {float(np.mean(diffs)):+.2f} pp; "
                     + (f"the interval excludes 0 on {', '.join(sig)}." if sig else "no interval excludes 0."))
    return text


def format_extra_metrics(results: Results) -> str:
    """One table per dataset: selectors x further metrics (MRR, nDCG, recall@k, ...)."""
    res = as_results(results)
    extra = res.extra_metrics
    if not extra:
        return ""
    seen_ds = {d for per in extra.values() for d in per}
    order = [d for d in res.datasets if d in seen_ds] + sorted(seen_ds - set(res.datasets))
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
        parts.append(f"**{dataset_label(d)}**\n\n" + _table(["Method", *keys], rows, ["l"] + ["r"] * len(keys)))
    return "\n\n".join(parts)


#: reference conditions of Table 4, in display order, and their names
ANSWER_REFERENCES: dict[str, str] = {
    "no_context": "No context", "top1": "Top-1 (retrieval)", "top5": "All top-5", "oracle": "Oracle chunk",
}


def answer_condition_label(name: str) -> str:
    return ANSWER_REFERENCES.get(name) or selector_label(name)


def _pct_interval(x: Mapping[str, Any] | None) -> str:
    if not x or x.get("mean") is None:
        return DASH
    return f"{100 * x['mean']:.1f} [{100 * x['lo']:.1f}, {100 * x['hi']:.1f}]"


def format_answers(results: Results) -> str:
    """Table 4: answer EM / F1 (%, 95% bootstrap interval) and prefill cost per condition
    (the references and each Table 1 selector's pick), one table per dataset."""
    res = as_results(results)
    parts = []
    for d in _ordered(res.datasets, res.answers):
        table = res.answers[d]
        conds = table.get("conditions") or {}
        if not conds:
            continue
        header = ["Context", "EM", "F1", "F1 (answerable)", "Prefill tokens", "TTFT ms", "Peak RSS MiB"]
        rows = []
        for name, c in conds.items():
            ans = c.get("answerable") or {}
            rows.append([
                answer_condition_label(name), _pct_interval(c.get("em")), _pct_interval(c.get("f1")),
                _pct_interval(ans.get("f1")), fmt(c.get("prefill_tokens"), 1), fmt(c.get("ttft_ms"), 1),
                fmt(c.get("peak_rss_mb"), 1),
            ])
        n_ans = next((c["answerable"]["questions"] for c in conds.values() if c.get("answerable")), 0)
        head = (f"**{dataset_label(d)}** ({table.get('questions')} test questions, {n_ans} with a positive "
                f"candidate; {table.get('generator')}, greedy, at most {table.get('max_new_tokens')} new tokens)")
        text = head + "\n\n" + _table(header, rows, ["l"] + ["r"] * 6)
        kv = table.get("kv_reuse")
        if kv:
            text += (f"\n\nKV reuse on {kv['pairs']} pairs: time to first token {fmt(kv['ttft_ms_reuse'], 1)} ms "
                     f"with the warm-up cache vs {fmt(kv['ttft_ms_noreuse'], 1)} ms prefilling the whole prompt "
                     f"({fmt(kv['saving_pct'], 1)}% saved; {fmt(kv['prefill_tokens_reuse'], 1)} vs "
                     f"{fmt(kv['prefill_tokens_full'], 1)} tokens prefilled).")
        parts.append(text)
    return "\n\n".join(parts)


def format_llm(results: Results) -> str:
    """Table 5: the LLM selectors on a sample of test questions, beside every Table 1
    row's pick on the same questions (rank-1 %, 95% bootstrap interval), and the LLM
    selectors' cost per query (calls, prompt tokens, seconds, repairs, k)."""
    res = as_results(results)
    parts = []
    for d in _ordered(res.datasets, res.llm):
        t = res.llm[d]
        rows_in = t.get("rows") or {}
        if not rows_in:
            continue
        cost = t.get("cost") or {}
        llm_first = [n for n in rows_in if n in cost] + [n for n in rows_in if n not in cost]
        rows, vals = [], []
        for n in llm_first:
            r = rows_in[n]
            ci = r.get("ci") or [None, None]
            cell = fmt(r.get("accuracy"))
            if ci[0] is not None and as_number(r.get("accuracy")) is not None:
                cell += f" [{ci[0]:.1f}, {ci[1]:.1f}]"
            rows.append([selector_label(n), cell])
            vals.append([as_number(r.get("accuracy"))])
        acc = [r[1:] for r in rows]
        _bold_best(acc, vals, [n in REFERENCE_SELECTORS for n in llm_first])
        rows = [[r[0], *a] for r, a in zip(rows, acc, strict=True)]
        text = (f"**{dataset_label(d)}** ({t.get('questions')} test questions, {t.get('answerable')} with a "
                "positive candidate)\n\n" + _table(["Method", "Rank-1 % [95% CI]"], rows, ["l", "r"]))
        if cost:
            crow = []
            for n, c in cost.items():
                ks = ", ".join(f"{k}: {v}" for k, v in (c.get("k_distribution") or {}).items())
                crow.append([selector_label(n), fmt(c.get("calls_per_query"), 1), fmt(c.get("prompt_tokens_per_query"), 0),
                             fmt(c.get("output_tokens_per_query"), 0), fmt(c.get("seconds_per_query"), 2),
                             str(c.get("repairs", DASH)), str(c.get("empty", DASH)), ks or DASH, str(c.get("read", DASH))])
            text += "\n\n" + _table(["LLM selector", "Calls/query", "Prompt tokens/query", "Output tokens/query",
                                      "s/query", "Repairs", "Empty", "k (count)", "Read"], crow,
                                     ["l"] + ["r"] * 7 + ["l"])
        parts.append(text)
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


# ------------------------------------------------------------------- report
def _setup_section(res: BenchResults) -> str:
    lines = ["## Setup", ""]
    lines.append(f"- git commit: `{res.git_commit or 'unknown'}`")
    if res.datasets:
        lines.append("- datasets: " + ", ".join(dataset_label(d) for d in res.datasets))
    if res.strongest_baseline:
        lines.append(f"- strongest baseline: {selector_label(str(res.strongest_baseline))}")
    if res.data_checksums:
        lines += [
            "",
            _table(["Data", "sha256"], [[str(k), f"`{v}`"] for k, v in res.data_checksums.items()], ["l", "l"]),
        ]
    if res.config:
        lines += ["", "Config:", "", "```json", json.dumps(_jsonable(res.config), indent=2, sort_keys=True), "```"]
    return "\n".join(lines)


def _seed_note(res: BenchResults, key: str) -> str:
    seeds = res.profile_seeds(key)
    return "seeds " + ", ".join(str(s) for s in seeds) if seeds else "one seed"


def render_markdown(results: Results, plots: Mapping[str, str] | None = None) -> str:
    """The report text; ``plots`` maps plot kinds (see PLOT_FILES) to relative paths."""
    res = as_results(results)
    plots = plots or {}
    parts = [f"# {res.title}"]
    sections = [
        (
            "Table 1: rank-1 chunk-selection accuracy (%)",
            format_table1(res),
            "Accuracy over answerable test instances (at least one positive among the K "
            "candidates); trained selectors: mean ± std over seeds. Params: trainable "
            "parameters the selector adds; latency: per query at batch 1, one thread. "
            "Best per column in bold.",
            ["latency", "bars"],
        ),
        (
            "Significance against the strongest baseline",
            format_significance(res),
            "B is the dataset's strongest baseline, chosen by validation accuracy (never "
            "test). Δ = A − B in percentage points. The 95% paired bootstrap interval "
            "resamples test instances of the per-instance hit rate averaged over the "
            "trained selectors' seeds (Table 1's seeds); the exact McNemar p-value (binomial "
            "test on discordant pairs) reads each instance's majority outcome over the seeds.",
            ["significance"],
        ),
        (
            "The flagship against its targets",
            format_flagship_targets(res),
            "Means of Table 1's seeds; the strongest baseline is chosen on validation "
            "(overall for the average, per dataset for the intervals, as in the significance "
            "table). Where a target is missed, the measured learning curves and generator "
            "ablation follow the table.",
            [],
        ),
        (
            "Does the generator help? The anchored prototype with and without h and r",
            format_generator_ablation(res),
            "Mean over Table 1's seeds; the second table gives the paired difference (with − "
            "without h, r) with its 95% bootstrap interval, seeds combined as above.",
            [],
        ),
        (
            "Table 2: feature ablation of the paper prototype",
            format_table2(res),
            "Mean over the ablation seeds "
            f"({_seed_note(res, 'ablation_seeds')}). HS: question hidden state; RW: routing "
            "weights; Chunk: candidate embeddings.",
            [],
        ),
        (
            "Table 3: feature budget of the paper prototype",
            format_table3(res),
            "Share of input features kept (by gradient importance) and the dimensions left; "
            f"mean over the ablation seeds ({_seed_note(res, 'ablation_seeds')}).",
            ["budget"],
        ),
        (
            "Table 4: answers generated from the selected chunk",
            format_answers(res),
            "The generator answers from the question and the chosen chunk(s), continuing the "
            "question's warm-up KV cache; EM and token F1 (SQuAD normalisation, best alias), "
            "in %, with 95% bootstrap intervals over questions; F1 (answerable): the questions "
            "with at least one positive candidate, where the pick can matter. A selector's "
            "row uses its Table 1 fit (first seed). Prefill tokens, time to first token and "
            "peak RSS growth are means per answer.",
            ["answers"],
        ),
        (
            "Table 5: LLM selectors on a sample of test questions",
            format_llm(res),
            "Rank-1 accuracy on the sample's answerable questions (a selection's first "
            "chunk; an empty utility selection is a miss) with a 95% bootstrap interval; the "
            "Table 1 rows are their first seed's picks on the same questions. Cost per query "
            "on this machine with the local generator (LLM calls, prompt and output tokens, "
            "backend seconds; answered from the response cache on a re-run, where seconds are "
            "those of the original call). k: how many passages utility kept (dynamic k).",
            [],
        ),
        (
            "Learning curves",
            format_learning_curve(res),
            "Test rank-1 (%) against the number of usable (contested) training instances; "
            "a smaller set is a subset of a larger one; validation and test splits whole; "
            "one seed (the largest point is Table 1's first seed).",
            ["curve"],
        ),
        ("Per-dataset vs pooled training", format_pooled(res), "", []),
        (
            "Further metrics",
            format_extra_metrics(res),
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
    parts.append(_setup_section(res))
    return "\n\n".join(parts) + "\n"
