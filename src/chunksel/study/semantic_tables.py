"""The report's semantic-label section, rendered from ``results["semantic"]``
(:mod:`chunksel.study.semantic`): rank-1 under the reference semantic labels beside the
datasets' own labels on the same questions, the rows against the strongest peer, how
the order of the rows changes, the labels' agreement, and abstention."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from chunksel.study.format import Results, bold_best, fmt, md_table
from chunksel.study.names import DASH, dataset_label, selector_label
from chunksel.study.results import as_results

#: the chunk-selection paper's figures: containment agrees with its judge on 78% of chunks,
#: and its selector is +2.49 over its strongest baseline under semantic labels
PAPER_AGREEMENT = 78.0
PAPER_MARGIN = 2.49
_REFERENCE_ROLES = ("reference",)


def _columns(sem: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """``(dataset, subset, header)`` per column: the random sample alone where a dataset also
    has a stratum, then all labelled questions."""
    cols = []
    for ds, e in sem["datasets"].items():
        subs = e["subsets"]
        both = "random" in subs and "all" in subs and subs["random"]["questions"] != subs["all"]["questions"]
        if both:
            cols.append((ds, "random", f"{dataset_label(ds)} (random)"))
        if "all" in subs:
            cols.append((ds, "all", f"{dataset_label(ds)} (all labelled)" if both else dataset_label(ds)))
    return cols


def _is_reference(name: str) -> bool:
    from chunksel.study.names import selector_role

    return selector_role(name) in _REFERENCE_ROLES


def format_semantic(results: Results) -> str:
    """The section's markdown ("" when the results have no semantic stage)."""
    res = as_results(results)
    sem = res.semantic or {}
    if not sem.get("datasets"):
        return ""
    cols = _columns(sem)
    rows = list(sem["average"]["all"].get("rows", {})) if sem["average"].get("all") else []
    parts = [_rank1_table(sem, cols, rows), RANK1_NOTE + " " + _coverage(sem) + _pretrained_note(sem), _order_sentence(sem, rows), _flagship_sentence(res, sem),
             "**Against the strongest peer**", _peer_table(sem, cols, rows),
             "**Agreement of the labels with the reference**", _agreement_table(res, sem),
             "**Abstention under the semantic labels**", _abstention_table(sem)]
    return "\n\n".join(p for p in parts if p)


#: what the rank-1 table shows
RANK1_NOTE = (
    "Rank-1 (%) under the reference semantic labels / under the dataset's own labels, on the same labelled test "
    "questions of this profile's test split (each over the questions with a positive under that label set; n "
    "above). Trained rows: mean over Table 1's seeds, read from Table 1's fits. Best semantic figure per column "
    "in bold. The reference labels (`semantic/` of the benchmark data) are for evaluation only: no fit, "
    "calibration, stacking weight or model choice reads them.")


def _pretrained_note(sem: Mapping[str, Any]) -> str:
    """What the shipped pretrained rows are, and that none saw a labelled question."""
    names = sem.get("pretrained") or []
    if not names:
        return ""
    seen = {ds: e.get("pretrained_seen") for ds, e in sem["datasets"].items()}
    left = [f"{dataset_label(ds)} ({n} seen)" for ds, n in seen.items() if n]
    quoted = [f"`{n}`" for n in names]
    listed = quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} and {quoted[-1]}"
    text = (f" {listed}: the shipped pretrained selectors, loaded by name as a "
            "user gets them, never trained on this profile (one model each, so no seed spread); none of the "
            "labelled questions was among their training or validation questions")
    return text + (f", except on {', '.join(left)}, where they are left out." if left else ".")


def _coverage(sem: Mapping[str, Any]) -> str:
    """How many labelled questions each dataset's test split holds, and where the others are."""
    parts = []
    for ds, e in sem["datasets"].items():
        lab = e["labelled"]
        f = sem["files"][ds]
        parts.append(f"{dataset_label(ds)} {lab['test']} of {f['questions']} ({lab['train_or_val']} in training or "
                     f"validation, {lab['not_sampled']} outside this profile's sample)")
    return "Labelled questions in this profile's test split: " + "; ".join(parts) + "."


def _rank1_table(sem: Mapping[str, Any], cols: Sequence[tuple[str, str, str]], rows: Sequence[str]) -> str:
    avg = sem["average"]
    header = ["Selector"] + [h for _, _, h in cols] + ["Average, all labelled", "Average, random sample"]
    n_row = ["n (semantic / own answerable)"]
    for ds, sub, _ in cols:
        a = sem["datasets"][ds]["subsets"][sub]["answerable"]
        n_row.append(f"{a['semantic']} / {a['own']}")
    n_row += ["", ""]
    body, vals, skip = [], [], []
    for n in rows:
        cells, v = [selector_label(n)], []
        for ds, sub, _ in cols:
            r = sem["datasets"][ds]["subsets"][sub]["rows"].get(n, {})
            s, o = (r.get(lab, {}).get("mean") for lab in ("semantic", "own"))
            cells.append(f"{fmt(s)} / {fmt(o)}")
            v.append(s)
        for sub in ("all", "random"):
            r = (avg.get(sub) or {}).get("rows", {}).get(n, {})
            cells.append(f"{fmt(r.get('semantic'))} / {fmt(r.get('own'))}")
            v.append(r.get("semantic"))
        body.append(cells)
        vals.append(v)
        skip.append(_is_reference(n))
    nums = [c[1:] for c in body]
    bold_best(nums, vals, skip)
    body = [[c[0], *num] for c, num in zip(body, nums, strict=True)]
    return md_table(header, [n_row, *body], ["l"] + ["r"] * (len(header) - 1))


def _ranking(avg: Mapping[str, Any], rows: Sequence[str], lab: str) -> list[str]:
    got = [(n, avg["rows"][n][lab]) for n in rows if not _is_reference(n) and avg["rows"][n][lab] is not None]
    return [n for n, _ in sorted(got, key=lambda t: -t[1])]


def _order_sentence(sem: Mapping[str, Any], rows: Sequence[str]) -> str:
    """How the order of the rows (random and oracle aside) changes from the own labels to
    the semantic ones, on the average over all labelled questions."""
    avg = sem["average"].get("all") or {}
    if not avg.get("rows"):
        return ""
    by_sem, by_own = _ranking(avg, rows, "semantic"), _ranking(avg, rows, "own")
    common = [n for n in by_sem if n in by_own]
    if len(common) < 2:
        return ""
    from scipy.stats import kendalltau

    tau = kendalltau([by_sem.index(n) for n in common], [by_own.index(n) for n in common]).statistic
    moved = [f"{selector_label(n)} {by_own.index(n) + 1} → {by_sem.index(n) + 1}" for n in common
             if abs(by_sem.index(n) - by_own.index(n)) >= 2]
    text = (f"Order of the rows on the average over all labelled questions (random and oracle aside): under "
            f"the semantic labels {' > '.join(selector_label(n) for n in by_sem[:4])} lead; under the "
            f"datasets' own labels {' > '.join(selector_label(n) for n in by_own[:4])}. Kendall's tau between "
            f"the two orders is {tau:.2f}")
    text += f"; rows that move two places or more: {', '.join(moved)}." if moved else "; no row moves two places or more."
    if by_sem[0] != by_own[0]:
        text += (f" The top row changes: {selector_label(by_own[0])} under the own labels, "
                 f"{selector_label(by_sem[0])} under the semantic ones.")
    return text


def semantic_verdict(results: Results, flag: str | None = None) -> dict[str, Any] | None:
    """The flagship (or ``flag``) against the strongest peer on the semantic average of all
    labelled questions: ``{"flagship", "peer", "diff", "lo", "hi", "met", "random": {...}}``."""
    res = as_results(results)
    sem = res.semantic or {}
    flag = flag or res.flagship
    avg = (sem.get("average") or {}).get("all") or {}
    peer = sem.get("peer")
    if not flag or not peer or flag not in avg.get("rows", {}):
        return None
    c = avg.get("vs_peer", {}).get("semantic", {}).get(flag)
    if c is None:
        return None
    out = {"flagship": flag, "peer": peer, **c, "met": c["diff"] >= 0,
           "flagship_average": avg["rows"][flag]["semantic"], "peer_average": avg["rows"][peer]["semantic"]}
    rnd = (sem.get("average") or {}).get("random") or {}
    if flag in rnd.get("vs_peer", {}).get("semantic", {}):
        out["random"] = rnd["vs_peer"]["semantic"][flag]
    return out


def _flagship_sentence(res: Any, sem: Mapping[str, Any]) -> str:
    v = semantic_verdict(res)
    if v is None:
        return ""
    text = (f"Target, the flagship at or above the strongest peer ({selector_label(v['peer'])}, chosen on "
            f"validation under the own labels) on the semantic average of all labelled questions: "
            f"{fmt(v['flagship_average'])} against {fmt(v['peer_average'])}, Δ {v['diff']:+.2f} "
            f"[{v['lo']:+.2f}, {v['hi']:+.2f}]: **{'met' if v['met'] else 'missed'}**")
    if "random" in v:
        r = v["random"]
        text += f" (random sample alone: Δ {r['diff']:+.2f} [{r['lo']:+.2f}, {r['hi']:+.2f}])"
    return text + (f". The paper reports +{PAPER_MARGIN} over its strongest baseline under its semantic labels.")


def _peer_table(sem: Mapping[str, Any], cols: Sequence[tuple[str, str, str]], rows: Sequence[str]) -> str:
    peer, second = sem.get("peer"), sem.get("second_peer")
    out = []
    for key, b in (("vs_peer", peer), ("vs_second", second)):
        if not b:
            continue
        lines = []
        for n in rows:
            if n == b or _is_reference(n):
                continue
            cells = [selector_label(n)]
            for ds, sub, _ in cols:
                c = sem["datasets"][ds]["subsets"][sub].get(key, {}).get("semantic", {}).get(n)
                cells.append(DASH if c is None else
                             f"{c['diff']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}] p={c['p']:.3f}"
                             + (" ✓" if c["significant"] else ""))
            a = (sem["average"].get("all") or {}).get("vs_peer", {}).get("semantic", {}).get(n) if key == "vs_peer" else None
            if key == "vs_peer":
                cells.append(DASH if a is None else f"{a['diff']:+.2f} [{a['lo']:+.2f}, {a['hi']:+.2f}]")
            lines.append(cells)
        header = [f"Δ vs {selector_label(b)} (semantic labels)"] + [h for _, _, h in cols]
        header += ["Average, all labelled"] if key == "vs_peer" else []
        out.append(md_table(header, lines, ["l"] + ["r"] * (len(header) - 1)))
    if not out:
        return ""
    return "\n\n".join(out) + (
        "\n\nΔ in percentage points on the questions with a semantic positive: paired bootstrap 95% interval of "
        "the seed-averaged hit rate, exact McNemar p on the seeds' majority; ✓ marks a row significantly "
        "different, where the interval excludes 0 and p < 0.05 both hold. The average's interval resamples each "
        "dataset's questions on their own.")


def _agreement_table(res: Any, sem: Mapping[str, Any]) -> str:
    lines = []
    specs = {ds: (res.config.get("instances") or {}).get(ds, {}).get("label") for ds in sem["datasets"]}
    for ds, e in sem["datasets"].items():
        sub = e["subsets"].get("all") or e["subsets"].get("random")
        for what, a in sub["agreement"].items():
            name = f"own labels (`{specs.get(ds) or 'default'}`)" if what == "own" else "answer containment"
            lines.append([dataset_label(ds), name, str(a["pairs"]), f"{100 * a['agreement']:.1f}", fmt(a["kappa"], 3),
                          f"{a['rejected']} of {a['positives']}", f"{a['missed']} of {a['reference_positives']}"])
    table = md_table(["Dataset", "Labels", "Pairs", "Agreement (%)", "Kappa", "Positives the reference rejects",
                      "Reference positives missed"], lines, ["l", "l", "r", "r", "r", "r", "r"])
    return (table + f"\n\nPer chunk, on every labelled test question's K candidates. The paper reports {PAPER_AGREEMENT:.0f}% "
            "agreement between answer containment and its semantic judge. Answer containment is counted where "
            "every candidate of a question has it (MS MARCO: the questions with a reference answer).")


def _abstention_table(sem: Mapping[str, Any]) -> str:
    lines = []
    for ds, e in sem["datasets"].items():
        sub = e["subsets"].get("all") or e["subsets"].get("random")
        for n, a in sub.get("abstention", {}).items():
            au, k2 = a["auto"], a["k2"]
            rec = (lambda x: DASH if x is None else f"{100 * x:.1f}")  # noqa: E731
            lines.append([dataset_label(ds), selector_label(n), f"{a['n_sets']} ({a['answerable']})",
                          fmt(a["auroc"], 3), f"{au['mean_kept']:.2f} / {rec(au['evidence_recall'])}",
                          f"{k2['mean_kept']:.2f} / {rec(k2['evidence_recall'])}"])
    if not lines:
        return ""
    return (md_table(["Dataset", "Selector", "Sets (semantic positive)", "Set AUROC", "k=auto chunks / recall (%)",
                      "k=2 chunks / recall (%)"], lines, ["l", "l", "r", "r", "r", "r"])
            + "\n\nAbstention when \"answerable\" means a semantic positive among the K: the calibrated set "
              "probability's AUROC, and the share of such sets where k=\"auto\" (or k=2) keeps a semantic positive. "
              "Every calibrator was fitted on validation under the own labels; the reference labels change "
              "nothing but the yardstick.")
