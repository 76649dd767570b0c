"""The report's tables from typed results: Table 1 (with the cost columns), Tables 2
and 3 (the paper prototype's ablations and feature budgets), the generator ablation, the
learning curves, pooled training, the significance table and the further metrics.

Every table except Table 1 is optional, and each tolerates missing datasets/selectors: a
missing table is skipped, a missing cell prints "–", and an average is taken over the
datasets present in its row (marked ``†`` when that is not all of the report's datasets).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from chunksel.study.format import (
    Results,
    as_number,
    average,
    bold_best,
    fmt,
    fmt_bytes,
    fmt_p,
    fmt_params,
    md_table,
    mean_std,
    ordered,
    table1_average,
)
from chunksel.study.names import DASH, REFERENCE_SELECTORS, dataset_label, selector_label
from chunksel.study.records import Comparison
from chunksel.study.results import as_results


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
    # results measured since the cold cost stage also time the path from raw text
    has_text = any(row.text_p50_ms is not None for row in t1.values())
    header = ["Method", "Params", "Size", "p50 ms", "p95 ms"] + (["Text p50 ms"] if has_text else []) + ["Query cost"]
    lead = len(header)
    header += [dataset_label(d) for d in datasets] + ["Avg."]
    rows: list[list[str]] = []
    vals: list[list[float | None]] = []
    any_partial = False
    for name, row in t1.items():
        cells, row_vals = [], []
        for d in datasets:
            c = row.per_dataset.get(d)
            mean = c.mean if c else None
            cells.append(mean_std(mean, c.std if c else None, len(c.seeds) if c else 0))
            row_vals.append(mean)
        avg, avg_std, complete = table1_average(row, datasets)
        avg_cell = mean_std(avg, avg_std, 2 if avg_std is not None else 1)
        if avg is not None and not complete:
            avg_cell += " †"
            any_partial = True
        cells.append(avg_cell)
        row_vals.append(avg if complete else None)
        rows.append([
            selector_label(name) + (" ‡" if row.pooled else "") + (" §" if row.stack_weights else ""), fmt_params(row.params), fmt_bytes(row.size_bytes),
            fmt(row.p50_ms, 3), fmt(row.p95_ms, 3),
        ] + ([fmt(row.text_p50_ms, 3)] if has_text else []) + [str(row.query_cost or DASH)] + cells)
        vals.append(row_vals)
    acc_cells = [r[lead:] for r in rows]
    bold_best(acc_cells, vals, [name in REFERENCE_SELECTORS for name in t1])
    rows = [r[:lead] + a for r, a in zip(rows, acc_cells, strict=True)]
    text = md_table(header, rows, ["l"] + ["r"] * (lead - 2) + ["l"] + ["r"] * (len(datasets) + 1))
    if any_partial:
        text += "\n\n† averaged over the datasets this selector was evaluated on."
    pooled_rows = [row for row in t1.values() if row.pooled]
    if pooled_rows:
        one = all(len(c.seeds) <= 1 for row in pooled_rows for c in row.per_dataset.values())
        many = any(len(c.seeds) > 1 for row in t1.values() for c in row.per_dataset.values())
        what = ("one model (its first seed; every seed of a stacked row reads it)" if one and many
                else "one model per seed")
        text += (f"\n\n‡ {what} trained on the pooled training splits of every dataset "
                 "(validation: the pooled validation splits), evaluated on each dataset's test split.")
    for name, row in t1.items():
        if row.stack_weights:
            chosen = ", ".join(f"{dataset_label(d)} {'/'.join(f'{w:g}' for w in ws)}"
                               for d, ws in row.stack_weights.items() if d in datasets)
            text += (f"\n\n§ {selector_label(name)}: z(anchored) + w z(cross-encoder) within each set, the "
                     "per-dataset anchored fit and the pooled cross-encoder above; w chosen on each dataset's "
                     f"validation split (0: the anchored row's ranking, the cross-encoder not run): {chosen}.")
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
        avg, complete = average(row_vals)
        cells = [fmt(v) for v in row_vals]
        avg_cell = fmt(avg)
        if avg is not None and not complete:
            avg_cell += " †"
            partial = True
        rows.append([label(name), *(extra_cells(name) if extra_cells else [])] + cells + [avg_cell])
        vals.append(row_vals + [avg if complete else None])
    n_lead = 1 + len(extra_header)
    acc = [r[n_lead:] for r in rows]
    bold_best(acc, vals)
    rows = [r[:n_lead] + a for r, a in zip(rows, acc, strict=True)]
    text = md_table(header, rows, ["l"] + ["r"] * (len(header) - 1))
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
    val = _validation_line(ga, res.datasets)
    if val:
        text += "\n\n" + val
    if ga.delta:
        text += "\n\n" + significance_table([(d, ga.delta[d]) for d in ordered(res.datasets, ga.delta)])
    for cmp in ga.parts.values():
        text += "\n\n" + significance_table([(d, cmp[d]) for d in ordered(res.datasets, cmp)])
    return text


def _validation_line(ga: Any, datasets: Sequence[str]) -> str:
    """The variants' validation rank-1 averaged over the datasets (what a choice between
    them may read; the test figures above may not)."""
    parts = []
    for label, v in ga.variants.items():
        means = [sum(c.val_seeds) / len(c.val_seeds) for d in datasets
                 if (c := v.per_dataset.get(d)) and c.val_seeds]
        if means and len(means) == len(datasets):
            parts.append(f"{label} {sum(means) / len(means):.2f}")
    return ("Validation rank-1, averaged over the datasets (what a choice between the variants "
            "may read): " + "; ".join(parts) + ".") if parts else ""


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
                         + md_table(header, rows, ["l"] + ["r"] * len(sizes)))
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
            avg, _ = average(vals)
            cells = [fmt(v) if label[0] != "Δ" or v is None else f"{v:+.2f}" for v in vals]
            avg_cell = fmt(avg) if label[0] != "Δ" or avg is None else f"{avg:+.2f}"
            rows.append([selector_label(name), label] + cells + [avg_cell])
    return md_table(header, rows, ["l", "l"] + ["r"] * (len(datasets) + 1))


def format_transfer(results: Results) -> str:
    """Leave one dataset out: each row's test rank-1 on every held-out dataset (95% bootstrap
    interval), the average over them, and the paired difference against the reference row
    over all held-out questions together; a headline sentence first."""
    res = as_results(results)
    if not res.transfer:
        return ""
    datasets = [d for d in res.datasets if any(d in r.held_out for r in res.transfer.values())]
    never = [d for d in dict.fromkeys(x for r in res.transfer.values() for x in r.never_trained)
             if any(d in r.held_out for r in res.transfer.values())]
    ref = next((r.reference for r in res.transfer.values() if r.reference), None)
    header = (["Method"] + [dataset_label(d) for d in datasets] + ["Avg."]
              + ([f"Δ vs {selector_label(ref)} [95% CI]"] if ref else [])
              + [f"{dataset_label(d)} (never trained on)" for d in never])
    rows, avgs = [], {}

    def cell(r, d):
        v, ci = as_number(r.held_out.get(d)), r.ci.get(d) or []
        return DASH if v is None else f"{fmt(v)} [{ci[0]:.1f}, {ci[1]:.1f}]" if len(ci) == 2 else fmt(v)

    for name, r in res.transfer.items():
        avgs[name], _ = average([as_number(r.held_out.get(d)) for d in datasets])
        row = [selector_label(name)] + [cell(r, d) for d in datasets] + [fmt(avgs[name])]
        if ref:
            vs = r.vs_reference
            row.append("(reference)" if name == ref else DASH if not vs else f"{vs[0]:+.2f} [{vs[1]:+.2f}, {vs[2]:+.2f}]")
        rows.append(row + [cell(r, d) for d in never])
    lead = max((n for n in avgs if avgs[n] is not None), key=lambda n: avgs[n], default=None)
    head = ""
    if lead is not None:
        head = f"Held out, **{selector_label(lead)}** leads on average ({fmt(avgs[lead])})"
        vs = res.transfer[lead].vs_reference
        if ref and lead != ref and vs:
            head += f"; against {selector_label(ref)} {vs[0]:+.2f} points [{vs[1]:+.2f}, {vs[2]:+.2f}] over every held-out question"
        for d in never:
            held = {n: as_number(r.held_out.get(d)) for n, r in res.transfer.items()}
            best = max((n for n in held if held[n] is not None), key=lambda n: held[n], default=None)
            if best is not None:
                head += f". On {dataset_label(d)}, never trained on, **{selector_label(best)}** leads ({fmt(held[best])})"
                dd = res.transfer[best].diff.get(d)
                if ref and best != ref and dd:
                    head += f", {dd[0]:+.2f} [{dd[1]:+.2f}, {dd[2]:+.2f}] against {selector_label(ref)}"
        head += ".\n\n"
    return head + md_table(header, rows, ["l"] + ["r"] * (len(header) - 1))


def significance_rows(results: Results) -> list[tuple[str, Comparison]]:
    """``(dataset, comparison)`` pairs of the significance table in report order."""
    res = as_results(results)
    return [(d, c) for d in ordered(res.datasets, res.significance) for c in res.significance[d]]


def significance_table(pairs: Sequence[tuple[str, Comparison]]) -> str:
    if not pairs:
        return ""
    header = ["Dataset", "A", "B", "n", "Acc A", "Acc B", "Δ (pp)", "95% CI", "McNemar p", "Both tests"]
    rows = []
    for d, e in pairs:
        ci = DASH if e.lo is None or e.hi is None else f"[{e.lo:+.2f}, {e.hi:+.2f}]"
        v = e.verdict()
        rows.append([
            dataset_label(d), selector_label(e.a), selector_label(e.b), str(e.n),
            fmt(e.acc_a), fmt(e.acc_b), DASH if e.diff is None else f"{e.diff:+.2f}", ci, fmt_p(e.p),
            "A better" if v == "better" else "A worse" if v == "worse" else DASH,
        ])
    align = ["l", "l", "l"] + ["r"] * 7
    if all(r[4] == DASH and r[5] == DASH for r in rows):  # no accuracies given: drop them
        header, align = header[:4] + header[6:], align[:4] + align[6:]
        rows = [r[:4] + r[6:] for r in rows]
    return md_table(header, rows, align)


def format_significance(results: Results) -> str:
    """Per dataset: A vs B, accuracy difference (pp), 95% bootstrap CI, McNemar p."""
    return significance_table(significance_rows(results))


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
        bold_best(body, vals)
        rows = [[r[0], *b] for r, b in zip(rows, body, strict=True)]
        parts.append(f"**{dataset_label(d)}**\n\n" + md_table(["Method", *keys], rows, ["l"] + ["r"] * len(keys)))
    return "\n\n".join(parts)
