"""The abstention stage: calibrated probabilities measured on every test set.

Per dataset and selector, on ALL test sets (answerable and unanswerable; rank-1 accuracy
elsewhere reads the answerable ones only): the selector is fitted as the study fits it
(training split, validation split; the fit now also calibrates it on validation,
:mod:`chunksel.selectors.calibration`), then :func:`chunksel.eval.calibration.abstention_summary`
gives set-level AUROC, per-chunk ECE (15 equal-mass bins) and Brier, abstention on
unanswerable sets at the threshold keeping 80% of answerable ones, risk-coverage, and
k="auto" against fixed k=1 and k=2. Baselines read the same way: retrieval order (whose
calibrator reads the retriever's cosine), BM25, LambdaMART.

:func:`run_abstention` computes it, :func:`format_abstention` renders the report's
section, :func:`plot_abstention` draws a risk-coverage plot and a reliability diagram
per dataset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.eval.calibration import abstention_summary

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


def evaluate_selector(sel: Any, test: Sequence[Any], features: Any = None) -> dict[str, Any]:
    """The abstention summary of a fitted, calibrated selector on ``test``."""
    from chunksel.selectors.calibration import calibration_scores
    from chunksel.types import label_matrix

    cal = sel.calibrator_
    if cal is None:
        return {"error": "not calibrated (no usable validation split)"}
    scores = sel.score(test, features)
    chunk_p, set_p = sel.probabilities(test, features, scores)
    labels = label_matrix(test, getattr(sel, "label", None) or None, scores.shape[1])
    raw = calibration_scores(sel, test, features) if cal.source != "score" else None
    out = abstention_summary(scores, labels, chunk_p, set_p, cal.auto_threshold, raw_scores=raw)
    out["calibrator"] = {"chunk_method": cal.chunk.method, "set_method": cal.set.method, "source": cal.source,
                         "label_source": cal.label_source, **cal.info}
    out["targets_met"] = targets_met(out)
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
            s = evaluate_selector(sel, sp["test"], features)
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
        "chunks than k=2 at equal or higher recall.",
    ]
    return "\n".join(lines + notes)


def plot_abstention(results: Mapping[str, Mapping[str, Any]], out_dir: str | Path, prefix: str = "abstention") -> list[Path]:
    """Per dataset: ``<prefix>_<ds>_risk_coverage.png`` and ``<prefix>_<ds>_reliability.png``
    (matplotlib's Agg canvas; nothing without matplotlib)."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return []
    out_dir = Path(out_dir)
    written = []
    for ds, per in results.items():
        for kind in ("risk_coverage", "reliability"):
            fig = Figure(figsize=(6, 4.2), dpi=120)
            FigureCanvasAgg(fig)
            ax = fig.add_subplot()
            for name, s in per.items():
                if "error" in s:
                    continue
                if kind == "risk_coverage":
                    ax.plot(s["risk_coverage"]["coverage"], s["risk_coverage"]["accuracy"],
                            label=f"{name} (AUROC {s['auroc']:.2f})")
                else:
                    ax.plot(s["reliability"]["mean_probability"], s["reliability"]["frequency"], marker="o",
                            markersize=3, label=f"{name} (ECE {s['chunk_ece']:.3f})")
            if kind == "risk_coverage":
                ax.set(xlabel="coverage (share of test sets answered, most confident first)",
                       ylabel="selective rank-1 accuracy", title=f"{ds}: risk-coverage", ylim=(0, 1.02))
            else:
                ax.plot([0, 1], [0, 1], color="grey", linestyle=":", linewidth=1)
                ax.set(xlabel="calibrated P(evidence), 15 equal-mass bins", ylabel="observed share with evidence",
                       title=f"{ds}: reliability (chunks)", xlim=(0, 1), ylim=(0, 1))
            ax.legend(fontsize=8)
            fig.tight_layout()
            path = out_dir / f"{prefix}_{ds}_{kind}.png"
            fig.savefig(path, format="png")
            written.append(path)
    return written
