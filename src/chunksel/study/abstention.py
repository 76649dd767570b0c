"""The abstention stage: calibrated probabilities measured on every test set.

Per dataset and selector, on ALL test sets (answerable and unanswerable; rank-1 accuracy
elsewhere reads the answerable ones only): the selector as Table 1 fitted it (training
split, validation split; the fit also calibrates it on validation,
:mod:`chunksel.selectors.calibration`), measured by
:func:`chunksel.eval.calibration.abstention_summary`: set-level AUROC, per-chunk ECE (15
equal-mass bins) and Brier, abstention on unanswerable sets at the threshold keeping 80%
of answerable ones, risk-coverage, and k="auto" against fixed k=1 and k=2. Baselines
read the same way: retrieval order (whose calibrator reads the retriever's cosine), BM25,
LambdaMART. The LLM selectors have no calibrator and no row.

In the study, :func:`abstention_of` runs inside Table 1's memoised fit (first seed's
result read by :func:`abstention`); :func:`run_abstention` fits and measures on its own
(``benchmarks/abstention.py``). :func:`format_abstention` renders the report's section,
:func:`plot_risk_coverage` and :func:`plot_reliability` its two figures (one panel per
dataset).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.eval.calibration import abstention_summary

#: the per-test-set lists of an abstention result, read by other stages and never reported
PER_SET = ("abstained_auto", "per_set")
#: issue #30's targets
TARGETS = {"auroc": 0.85, "chunk_ece": 0.05, "unanswerable_abstained": 0.5}


def targets_met(s: Mapping[str, Any]) -> dict[str, bool]:
    """Which targets one summary meets (k="auto": fewer chunks than k=2 at >= its recall)."""
    auto, k2 = s["auto"], s["k2"]
    return {
        "auroc": s["auroc"] >= TARGETS["auroc"],
        "chunk_ece": s["chunk_ece"] <= TARGETS["chunk_ece"],
        "abstention": s["abstention"]["unanswerable_abstained"] >= TARGETS["unanswerable_abstained"],
        "auto_vs_k2": auto["mean_kept"] < k2["mean_kept"] and auto["evidence_recall"] >= k2["evidence_recall"],
    }


def abstention_of(sel: Any, test: Sequence[Any], features: Any = None, scores: Any = None) -> dict[str, Any]:
    """The abstention summary of a fitted, calibrated selector on ``test`` (``scores``: its
    scores of ``test`` when already computed)."""
    from chunksel.pipeline.select_rules import choose
    from chunksel.selectors.calibration import calibration_scores
    from chunksel.types import label_matrix

    cal = sel.calibrator_
    if cal is None:
        return {"error": "not calibrated (no usable validation split)"}
    scores = sel.score(test, features) if scores is None else scores
    chunk_p, set_p = sel.probabilities(test, features, scores)
    labels = label_matrix(test, getattr(sel, "label", None) or None, scores.shape[1])
    raw = calibration_scores(sel, test, features) if cal.source != "score" else None
    out = abstention_summary(scores, labels, chunk_p, set_p, cal.auto_threshold, raw_scores=raw)
    out["calibrator"] = {"chunk_method": cal.chunk.method, "set_method": cal.set.method, "source": cal.source,
                         "label_source": cal.label_source, **cal.info}
    out["targets_met"] = targets_met(out)
    # per test instance (not reported; read by other stages): k="auto" kept no chunk (Table 4's
    # "I don't know" row); the chunks k="auto" kept, the top two and the set probability (the
    # semantic-label stage, chunksel.study.semantic)
    chosen = [choose(row, p, None, "auto", None, None, cal.auto_threshold)
              for row, p in zip(scores, chunk_p, strict=True)]
    out["abstained_auto"] = [c[1] for c in chosen]
    out["per_set"] = {"kept_auto": [[int(j) for j in c[0]] for c in chosen],
                      "top2": [[int(j) for j in row] for row in np.argsort(-scores, axis=1, kind="stable")[:, :2]],
                      "set_p": [float(p) for p in np.asarray(set_p, dtype=np.float64)]}
    return out


def run_abstention(
    splits: Mapping[str, Mapping[str, Sequence[Any]]],
    selectors: Sequence[str],
    make: Callable[[str], Any],
    features: Any = None,
    say: Callable[[str], None] = print,
) -> dict[str, dict[str, Any]]:
    """``{dataset: {selector: summary}}``: each selector made by ``make(name)``, fitted on
    the dataset's ``train`` and ``val`` splits and summarised on its ``test`` split."""
    out: dict[str, dict[str, Any]] = {}
    for ds, sp in splits.items():
        out[ds] = {}
        for name in selectors:
            t0 = time.time()
            sel = make(name)
            if getattr(sel, "query_cost", "") == "llm":
                continue
            sel.fit(sp["train"], features, sp["val"])
            s = abstention_of(sel, sp["test"], features)
            s["seconds"] = round(time.time() - t0, 1)
            out[ds][name] = s
            say(summary_line(ds, name, s))
    return out


def summary_line(ds: str, name: str, s: Mapping[str, Any]) -> str:
    """One progress line."""
    if "error" in s:
        return f"abstention: {ds:<9} {name:<11} {s['error']}"
    return (f"abstention: {ds:<9} {name:<11} AUROC {s['auroc']:.3f} (top score {s['auroc_top_score']:.3f})  "
            f"ECE {s['chunk_ece']:.3f}  Brier {s['chunk_brier']:.3f}  "
            f"abstain@80% {100 * s['abstention']['unanswerable_abstained']:.1f}%  "
            f"auto {s['auto']['mean_kept']:.2f} / {100 * s['auto']['evidence_recall']:.1f}%  "
            f"k=2 {s['k2']['mean_kept']:.2f} / {100 * s['k2']['evidence_recall']:.1f}%  "
            f"[{s['calibrator']['chunk_method']}/{s['calibrator']['set_method']}]")


def _f(x: Any, digits: int = 3, pct: bool = False) -> str:
    if x is None or (isinstance(x, float) and not np.isfinite(x)):
        return "–"
    return f"{100 * x:.1f}" if pct else f"{x:.{digits}f}"


def format_abstention(results: Mapping[str, Mapping[str, Any]], label: Callable[[str], str] = str) -> str:
    """The report's abstention section (markdown): one row per dataset and selector."""
    head = ("| Dataset | Selector | Sets (unans.) | AUROC | AUROC top score | Chunk ECE | Chunk Brier | "
            "Abstain @80% (%) | k=auto chunks / recall (%) | k=2 chunks / recall (%) | Calibrator |")
    lines = [head, "|" + "|".join(["---"] * 11) + "|"]
    for ds, per in results.items():
        for name, s in per.items():
            if "error" in s:
                lines.append(f"| {ds} | {label(name)} | " + " | ".join(["–"] * 8) + f" | {s['error']} |")
                continue
            n_un = round(s["n_sets"] * (1 - s["answerable_rate"]))
            auto, k2 = s["auto"], s["k2"]
            lines.append(
                f"| {ds} | {label(name)} | {s['n_sets']} ({n_un}) | {_f(s['auroc'])} | {_f(s['auroc_top_score'])} | "
                f"{_f(s['chunk_ece'])} | {_f(s['chunk_brier'])} | "
                f"{_f(s['abstention']['unanswerable_abstained'], pct=True)} | "
                f"{_f(auto['mean_kept'], 2)} / {_f(auto['evidence_recall'], pct=True)} | "
                f"{_f(k2['mean_kept'], 2)} / {_f(k2['evidence_recall'], pct=True)} | "
                f"{s['calibrator']['chunk_method']} / {s['calibrator']['set_method']} |")
    notes = [
        "",
        "Every test set counts here, answerable or not. AUROC: the calibrated P(some chunk holds the "
        "evidence) separating answerable from unanswerable sets (AUROC top score: the raw top score alone, "
        "uncalibrated). ECE over 15 equal-mass bins of the per-chunk P(evidence). Abstain @80%: the share of "
        "unanswerable sets below the threshold that keeps 80% of the answerable ones. k=auto keeps the chunks "
        "whose P(evidence) reaches the operating point chosen on validation; recall is the share of answerable "
        "sets with a kept positive. Calibrators are fitted on the validation split only (chunk map / set model "
        f"chosen there by out-of-fold Brier score). Targets: AUROC >= {TARGETS['auroc']}, ECE <= "
        f"{TARGETS['chunk_ece']}, abstention >= {int(100 * TARGETS['unanswerable_abstained'])}%, k=auto fewer "
        "chunks than k=2 at equal or higher recall. The utility selector's empty selection, the LLM baseline, "
        "is measured on Table 5's sample (below Table 5).",
    ]
    return "\n".join(lines + notes)


def abstention(study: Any) -> dict[str, dict[str, Any]]:
    """``{dataset: {selector: summary}}`` from Table 1's fits (each selector's first seed;
    read from the memo, so after :func:`chunksel.study.table1.table1` nothing is refitted)."""
    from chunksel.selectors import get_selector_class

    out: dict[str, dict[str, Any]] = {}
    for ds in study.datasets:
        for name in study.selectors:
            cls = get_selector_class(name)
            if cls.query_cost == "llm":
                continue
            s = study.seeds_of(name)[0]
            res = study.table1_result(name, s, ds)
            if res is None:  # a pooled row a bench --jobs worker leaves to the whole study
                continue
            if res.get("abstention") is not None:
                out.setdefault(ds, {})[name] = {k: v for k, v in res["abstention"].items() if k not in PER_SET}
    return out


def auto_abstained(study: Any, name: str, ds: str) -> list[bool] | None:
    """Per test instance of ``ds``: whether ``name`` (its first seed, as Table 1 fitted it)
    abstained with ``k="auto"``; None when it has no calibrator."""
    from chunksel.selectors import get_selector_class

    cls = get_selector_class(name)
    if cls.query_cost == "llm":
        return None
    s = study.seeds_of(name)[0]
    res = study.table1_result(name, s, ds)
    ab = (res or {}).get("abstention") or {}
    flags = ab.get("abstained_auto")
    return None if flags is None else [bool(f) for f in flags]


def _panels(results: Mapping[str, Mapping[str, Any]]) -> tuple[Any, list[Any], list[str]] | None:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return None
    dss = [ds for ds, per in results.items() if any("error" not in s for s in per.values())]
    if not dss:
        return None
    cols = min(3, len(dss))
    rows = -(-len(dss) // cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows), dpi=110)
    FigureCanvasAgg(fig)
    return fig, [fig.add_subplot(rows, cols, n + 1) for n in range(len(dss))], dss


def _selectors(results: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Every selector of any panel, in first-seen order (Table 1's row order)."""
    return list(dict.fromkeys(name for per in results.values() for name in per))


def _finish(fig: Any, axes: list[Any], path: str | Path) -> Path:
    """One legend for every panel, under them (the panels share their selectors and colours;
    each panel's AUROC or ECE is in the table above the plot)."""
    from chunksel.study.plotstyle import legend_below, save_png

    handles: dict[str, Any] = {}
    for ax in axes:
        for h, lab in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(lab, h)
    fig.tight_layout()  # the panels first, then the legend under them
    legend_below(fig, list(handles.values()), list(handles), ncol=5)
    return Path(save_png(fig, path))


def plot_risk_coverage(results: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path | None:
    """Selective rank-1 accuracy against coverage, one panel per dataset (None: nothing to draw)."""
    from chunksel.study.names import dataset_label
    from chunksel.study.plotstyle import line_style, selector_colors

    made = _panels(results)
    if made is None:
        return None
    fig, axes, dss = made
    colors = selector_colors(_selectors(results))
    for ax, ds in zip(axes, dss):
        for name, s in results[ds].items():
            if "error" not in s:
                ax.plot(s["risk_coverage"]["coverage"], s["risk_coverage"]["accuracy"],
                        **line_style(name, colors))
        ax.set(title=dataset_label(ds), xlabel="coverage (most confident sets first)",
               ylabel="selective rank-1", ylim=(0, 1.02))
        ax.grid(True, alpha=0.3)
    return _finish(fig, axes, path)


def plot_reliability(results: Mapping[str, Mapping[str, Any]], path: str | Path) -> Path | None:
    """Per-chunk reliability diagrams (15 equal-mass bins), one panel per dataset."""
    from chunksel.study.names import dataset_label
    from chunksel.study.plotstyle import line_style, selector_colors

    made = _panels(results)
    if made is None:
        return None
    fig, axes, dss = made
    colors = selector_colors(_selectors(results))
    for ax, ds in zip(axes, dss):
        ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
        for name, s in results[ds].items():
            if "error" not in s:
                ax.plot(s["reliability"]["mean_probability"], s["reliability"]["frequency"], marker="o",
                        markersize=2, **line_style(name, colors))
        ax.set(title=dataset_label(ds), xlabel="calibrated P(evidence)", ylabel="observed share",
               xlim=(0, 1), ylim=(0, 1))
        ax.grid(True, alpha=0.3)
    return _finish(fig, axes, path)


def plot_abstention(results: Mapping[str, Mapping[str, Any]], out_dir: str | Path) -> list[Path]:
    """Both figures into ``out_dir`` (``abstention_risk_coverage.png``, ``abstention_reliability.png``)."""
    out = Path(out_dir)
    made = [plot_risk_coverage(results, out / "abstention_risk_coverage.png"),
            plot_reliability(results, out / "abstention_reliability.png")]
    return [p for p in made if p is not None]
