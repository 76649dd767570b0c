"""The report's plots (PNG, matplotlib's Agg canvas; pyplot's global state is never used).

- accuracy vs latency: one labelled bubble per selector, x = p50 latency (log scale),
  y = average rank-1 accuracy, bubble area proportional to trainable parameters;
- accuracy vs feature budget: one line per dataset plus the average (Table 3);
- accuracy by dataset: grouped bars per dataset, one bar per selector, with the
  bootstrap 95% interval (``ci``) as error bar where given, else the std over seeds;
- significance: per dataset, the difference A − B with its bootstrap interval.

- answer F1 vs prefill tokens: per Table 4 dataset, one point per condition.

Every function takes the typed results (:class:`~chunksel.study.results.BenchResults`, or a
dict in its JSON layout) and returns the written path, or ``None`` when the results hold
nothing to draw.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import require
from chunksel.study.abstention import plot_reliability, plot_risk_coverage
from chunksel.study.format import PLOT_FILES, Results, as_number, table1_average
from chunksel.study.generation_tables import answer_condition_label
from chunksel.study.names import dataset_label, selector_label
from chunksel.study.plotstyle import legend_below, place_labels, save_png, selector_colors
from chunksel.study.results import as_results
from chunksel.study.tables import budget_value, significance_rows


def _figure(width: float = 7.0, height: float = 4.5) -> Any:
    require("matplotlib", "eval")
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=120)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    return save_png(fig, path)


def plot_accuracy_vs_latency(results: Results, path: str | Path) -> Path | None:
    """Bubble chart of average accuracy against p50 latency (log x)."""
    res = as_results(results)
    pts = []
    for name, row in res.table1.items():
        lat = as_number(row.p50_ms)
        avg, _, _ = table1_average(row, res.datasets)
        if lat is None or lat <= 0 or avg is None:
            continue
        pts.append((name, lat, avg, as_number(row.params) or 0.0))
    if not pts:
        return None
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    params = np.array([p[3] for p in pts])
    top = params.max() if params.max() > 0 else 1.0
    sizes = 30.0 + 900.0 * np.sqrt(params / top)
    colors = selector_colors(list(res.table1))
    ax.scatter([p[1] for p in pts], [p[2] for p in pts], s=sizes, alpha=0.5, edgecolors="black",
               c=[colors[p[0]] for p in pts])
    ax.set_xscale("log")
    ax.margins(0.15)
    ax.set_xlabel("p50 latency per query, batch 1, one thread (ms, log scale)")
    ax.set_ylabel("average rank-1 accuracy (%)")
    ax.set_title("Accuracy vs latency (bubble area ~ trainable parameters)")
    ax.grid(True, which="both", alpha=0.3)
    place_labels(ax, [(selector_label(name), lat, avg) for name, lat, avg, _ in pts])
    return _save(fig, Path(path))


def plot_accuracy_vs_budget(results: Results, path: str | Path) -> Path | None:
    """One line per dataset (and the average) over the feature budgets of Table 3."""
    res = as_results(results)
    t3 = res.table3
    if not t3:
        return None
    budgets = sorted(t3, key=budget_value)
    x = np.array([budget_value(b) for b in budgets])
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    rows = []
    for d in res.datasets:
        y = np.array([as_number(t3[b].per_dataset.get(d)) for b in budgets], dtype=float)
        if np.isnan(y).all():
            continue
        rows.append(y)
        ax.plot(x, y, marker="o", label=dataset_label(d))
    if not rows:
        return None
    avg = np.nanmean(np.vstack(rows), axis=0)
    ax.plot(x, avg, marker="s", color="black", linestyle="--", label="Average")
    ax.set_xlabel("feature budget (% of input features kept)")
    ax.set_ylabel("rank-1 accuracy (%)")
    ax.set_title("Accuracy vs feature budget")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, Path(path))


def plot_accuracy_by_dataset(results: Results, path: str | Path) -> Path | None:
    """Grouped bars: datasets x selectors, with interval error bars."""
    res = as_results(results)
    t1 = res.table1
    datasets = [d for d in res.datasets if any(d in row.per_dataset for row in t1.values())]
    if not t1 or not datasets:
        return None
    names = list(t1)
    width = 0.8 / len(names)
    fig = _figure(max(7.0, 1.4 * len(datasets) + 2), 4.5)
    ax = fig.add_subplot(1, 1, 1)
    xs = np.arange(len(datasets))
    colors = selector_colors(names)  # one colour per row (the default cycle repeats after ten)
    for i, name in enumerate(names):
        per = t1[name].per_dataset
        means, lo_err, hi_err = [], [], []
        for d in datasets:
            cell = per.get(d)
            mean, std = (cell.mean, cell.std) if cell else (None, None)
            ci = cell.ci if cell else None
            m = np.nan if mean is None else mean
            if ci is not None and len(ci) == 2 and mean is not None:
                lo_err.append(max(0.0, mean - float(ci[0])))
                hi_err.append(max(0.0, float(ci[1]) - mean))
            else:
                e = 0.0 if std is None else std
                lo_err.append(e)
                hi_err.append(e)
            means.append(m)
        ax.bar(
            xs - 0.4 + width * (i + 0.5),
            means,
            width,
            yerr=[lo_err, hi_err],
            capsize=2,
            color=colors[name],
            label=selector_label(name),
        )
    ax.set_xticks(xs)
    ax.set_xticklabels([dataset_label(d) for d in datasets])
    ax.set_ylabel("rank-1 accuracy (%)")
    ax.set_title("Accuracy by dataset (error bars: bootstrap 95% CI, else std over seeds)")
    legend_below(fig, *ax.get_legend_handles_labels(), ncol=5)  # under the bars, never over them
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, Path(path))


def plot_significance(results: Results, path: str | Path) -> Path | None:
    """Per dataset: the accuracy difference A − B (pp) with its 95% bootstrap interval."""
    rows = significance_rows(results)
    first_a = rows[0][1].a if rows else None
    seen: set[str] = set()
    pts, sig = [], {}
    for d, e in rows:  # the first entry of each dataset with the first entry's A
        if d in seen or e.a != first_a:
            continue
        seen.add(d)
        sig[d] = e
        pts.append((d, as_number(e.diff), as_number(e.lo), as_number(e.hi)))
    pts = [p for p in pts if None not in p]
    if not pts:
        return None
    fig = _figure()
    ax = fig.add_subplot(1, 1, 1)
    xs = np.arange(len(pts))
    diffs = np.array([p[1] for p in pts])
    err = [diffs - np.array([p[2] for p in pts]), np.array([p[3] for p in pts]) - diffs]
    ax.bar(xs, diffs, 0.6, yerr=np.clip(err, 0.0, None), capsize=4, color="tab:blue")
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xticks(xs)
    first = sig[pts[0][0]]
    bs = {sig[p[0]].b for p in pts}
    if len(bs) == 1:
        ax.set_xticklabels([dataset_label(p[0]) for p in pts])
        ax.set_title(f"{selector_label(first.a)} − {selector_label(first.b)}, 95% paired bootstrap CI")
    else:  # B is each dataset's strongest baseline: name it under the dataset
        import textwrap

        ax.set_xticklabels([dataset_label(p[0]) + "\n" + textwrap.fill(f"vs {selector_label(sig[p[0]].b)}", 14)
                            for p in pts], fontsize=7)
        ax.set_title(f"{selector_label(first.a)} − each dataset's strongest baseline\n"
                     "(chosen on validation), 95% paired bootstrap CI", fontsize=10)
    ax.set_ylabel("accuracy difference (pp)")
    ax.grid(True, axis="y", alpha=0.3)
    return _save(fig, Path(path))


def plot_learning_curve(results: Results, path: str | Path) -> Path | None:
    """Test rank-1 against usable training instances: one panel per curve dataset."""
    res = as_results(results)
    lc = res.learning_curve
    dss = [d for d in res.datasets if d in lc and lc[d].per_selector]
    if not dss:
        return None
    fig = _figure()
    for i, d in enumerate(dss):
        ax = fig.add_subplot(1, len(dss), i + 1)
        for name, points in lc[d].per_selector.items():
            xs = sorted(int(n) for n in points)
            ax.plot(xs, [as_number(points[str(n)]) for n in xs], marker="o", label=selector_label(name))
        ax.set_xscale("log")
        ax.set_xlabel("usable training instances")
        ax.set_ylabel("test rank-1 accuracy (%)")
        ax.set_title(dataset_label(d))
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
    return _save(fig, Path(path))


def plot_answers(results: Results, path: str | Path) -> Path | None:
    """Table 4: answer F1 (%) against mean prefill tokens, one panel per dataset, one
    labelled point per condition (with its 95% interval)."""
    res = as_results(results)
    dss = [d for d in res.datasets if (res.answers.get(d) or {}).get("conditions")]
    if not dss:
        return None
    fig = _figure(max(7.0, 4.0 * len(dss)), 4.5)
    for i, d in enumerate(dss):
        ax = fig.add_subplot(1, len(dss), i + 1)
        for name, c in res.answers[d]["conditions"].items():
            f1, x = c.get("f1") or {}, as_number(c.get("prefill_tokens"))
            if f1.get("mean") is None or x is None:
                continue
            y = 100 * f1["mean"]
            ax.errorbar([max(x, 1.0)], [y], yerr=[[y - 100 * f1["lo"]], [100 * f1["hi"] - y]], fmt="o", capsize=3)
            ax.annotate(answer_condition_label(name), (max(x, 1.0), y), textcoords="offset points",
                        xytext=(5, 4), fontsize=7)
        ax.set_xscale("log")
        ax.set_xlabel("prefill tokens per answer (log scale)")
        ax.set_ylabel("answer token F1 (%)")
        ax.set_title(dataset_label(d))
        ax.grid(True, which="both", alpha=0.3)
    return _save(fig, Path(path))


def write_plots(results: Results, out_dir: str | Path) -> dict[str, Path]:
    """Draw every plot the results allow into ``out_dir``; returns kind -> path."""
    results = as_results(results)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    makers = {
        "latency": plot_accuracy_vs_latency,
        "budget": plot_accuracy_vs_budget,
        "bars": plot_accuracy_by_dataset,
        "significance": plot_significance,
        "curve": plot_learning_curve,
        "answers": plot_answers,
        "abstention_risk_coverage": lambda r, p: plot_risk_coverage(r.abstention, p),
        "abstention_reliability": lambda r, p: plot_reliability(r.abstention, p),
    }
    made: dict[str, Path] = {}
    for kind, maker in makers.items():
        p = maker(results, out / PLOT_FILES[kind])
        if p is not None:
            made[kind] = p
    return made
