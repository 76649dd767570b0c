"""The flagship against its acceptance criteria: measured value, target, verdict and
shortfall, from Table 1 and the significance table (whose ``b`` is each dataset's
strongest baseline, chosen on validation)."""

from __future__ import annotations

from typing import Any

import numpy as np

from chunksel.study.format import DASH, Results, fmt_p, md_table, table1_average
from chunksel.study.names import dataset_label, selector_label
from chunksel.study.profiles import AGREEMENT_ROWS, LAMBDAMART, STACKED
from chunksel.study.records import Comparison
from chunksel.study.results import BenchResults, as_results

#: the flagship's acceptance criteria (mean of Table 1's seeds): never significantly below
#: the validation-chosen strongest baseline, an average margin over it, an average margin
#: over retrieval order, and (on the large profile) significantly better on some datasets
FLAGSHIP_TARGETS: dict[str, float] = {
    "margin_over_strongest": 1.0,
    "margin_over_retrieval": 8.0,
    "significantly_better_large": 3,
}
#: the stacked flagship's (``anchored-ce``, the accurate operating point): a larger average
#: margin over the strongest baseline, significantly better on at least 2 datasets (large)
STACKED_TARGETS: dict[str, float] = {
    "margin_over_strongest": 2.5,
    "margin_over_retrieval": 8.0,
    "significantly_better_large": 2,
}


def _verdict(ok: bool | None) -> str:
    return DASH if ok is None else ("met" if ok else "not met")


def targets_of(flag: str | None) -> dict[str, float]:
    return STACKED_TARGETS if flag == STACKED else FLAGSHIP_TARGETS


def flagship_targets(results: Results, flag: str | None = None) -> dict[str, Any] | None:
    """The flagship (``results.flagship``, or the row ``flag``) against its targets
    (:data:`FLAGSHIP_TARGETS`; the stacked row's :data:`STACKED_TARGETS`), measured.

    Reads Table 1 and the significance table (whose ``b`` is the per-dataset strongest
    baseline, chosen on validation; retrieval order where it is the strongest). Returns
    None when the flagship or its comparisons are missing. The averages are Table 1's,
    over every dataset of the report; per dataset: the paired difference and its 95%
    interval, classed ``better`` or ``worse`` only when the interval excludes 0 on that side and
    McNemar's p < 0.05 both hold (:meth:`~chunksel.study.records.Comparison.verdict`), else
    ``tie`` (``interval_only`` marks a tie whose interval alone excludes 0). ``better`` also
    needs the same against LambdaMART where the significance table compares with it (the
    dataset's strongest baseline is another row); that comparison is ``vs_lambdamart``.
    """
    res = as_results(results)
    flag = flag or res.flagship
    if not flag or flag not in res.table1:
        return None
    per_ds: dict[str, Comparison] = {}
    vs_lm: dict[str, Comparison] = {}
    for d in res.datasets:
        best = res.strongest_per_dataset.get(d)
        for c in res.significance.get(d, []):
            if c.a == flag and c.b == best:
                per_ds[d] = c
            elif c.a == flag and c.b == LAMBDAMART:
                vs_lm[d] = c
    if not per_ds:
        return None
    rows = {d: {"baseline": c.b, "diff": c.diff, "lo": c.lo, "hi": c.hi, "p": c.p, "class": c.verdict(),
                "interval_only": c.verdict() == "tie" and (c.lo > 0 or c.hi < 0)}
            for d, c in per_ds.items()}
    for d, c in vs_lm.items():  # better only when better than LambdaMART too
        if d in rows:
            rows[d]["vs_lambdamart"] = {"diff": c.diff, "lo": c.lo, "hi": c.hi, "p": c.p, "class": c.verdict()}
            if rows[d]["class"] == "better" and c.verdict() != "better":
                rows[d]["class"] = "tie"
    datasets = list(res.datasets)
    flag_avg = table1_average(res.table1[flag], datasets)[0]
    out: dict[str, Any] = {"flagship": flag, "per_dataset": rows, "datasets": datasets,
                           "flagship_average": flag_avg}
    sb = res.strongest_baseline
    if sb in res.table1 and flag_avg is not None:
        sb_avg = table1_average(res.table1[sb], datasets)[0]
        out["strongest_baseline"] = sb
        out["margin_over_strongest"] = None if sb_avg is None else flag_avg - sb_avg
    per_best = [per_ds[d].acc_b if d in per_ds else None for d in datasets]
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


def format_flagship_targets(results: Results, flag: str | None = None) -> str:
    """The flagship's (or the row ``flag``'s) acceptance criteria: measured value, target,
    verdict and shortfall; then, where one is missed, the learning curves and the generator
    ablation that bear on why (as measured figures, one seed for the curves)."""
    res = as_results(results)
    t = flagship_targets(res, flag)
    if t is None:
        return ""
    T = targets_of(t["flagship"])
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
            # a value that misses by less than the last shown digit gets one more digit each
            short = target - m
            dig = 2 if m >= target or short >= 0.005 else 3 if short >= 0.0005 else 4
            rows.append([label, f"{m:+.{dig}f}", f"≥ +{target:.2f}", _verdict(m >= target),
                         DASH if m >= target else f"{short:.{dig}f} pp"])
    need = int(T["significantly_better_large"])
    n_ds = len(t["datasets"])
    rows.append([f"Significantly better than the strongest baseline (large profile: ≥ {need} of {n_ds})",
                 f"{t['n_better']} of {n_ds}", f"≥ {need}" if t["large"] else "(large profile)",
                 _verdict(t["n_better"] >= need) if t["large"] else DASH,
                 DASH if not t["large"] or t["n_better"] >= need else f"{need - t['n_better']} dataset(s)"])
    text = md_table(["Criterion", "Measured", "Target", "Verdict", "Short by"], rows, ["l", "r", "r", "l", "r"])
    def cmp(r: dict[str, Any]) -> str:
        return (f"{r['diff']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}]"
                + (f" p={fmt_p(r['p'])}" if r.get("p") is not None else ""))

    per = ", ".join(f"{dataset_label(d)} {cmp(r)} vs {selector_label(r['baseline'])}"
                    + (f" and {cmp(r['vs_lambdamart'])} vs {selector_label(LAMBDAMART)}" if "vs_lambdamart" in r else "")
                    for d, r in t["per_dataset"].items())
    text += (f"\n\nPer dataset (Δ, 95% interval and McNemar p, pp): {per}. A dataset counts as significantly "
             "better or below only when the interval excludes 0 and McNemar's p < 0.05 both hold; better "
             f"also needs both against {selector_label(LAMBDAMART)}")
    loose = [dataset_label(d) for d, r in t["per_dataset"].items() if r.get("interval_only")]
    text += (f"; on {', '.join(loose)} the interval alone excludes 0." if loose else ".")
    if t["flagship"] == res.flagship and res.top1_agreement:
        parts = []
        for other in AGREEMENT_ROWS:
            cells = [f"{dataset_label(d)} {a[other]:.1f}%" for d, a in res.top1_agreement.items() if other in a]
            if cells:
                parts.append(f"as {selector_label(other)}'s on {', '.join(cells)}")
        if parts:
            n = ", ".join(f"{dataset_label(d)} {int(a['n'])}" for d, a in res.top1_agreement.items())
            text += (f"\n\nThe flagship's top-1 is the same {'; '.join(parts)} (first seeds, every test "
                     f"question: {n}).")
    missed = any(r[3] == "not met" for r in rows)
    if missed and t["flagship"] == res.flagship:  # the curves and the ablation are the flagship's
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
