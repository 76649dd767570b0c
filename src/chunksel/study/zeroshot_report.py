"""``reports/zeroshot/report.md`` from the zero-shot run's ``results.json``
(:mod:`chunksel.study.zeroshot`); ``python -m chunksel.study.zeroshot_report DIR``
re-renders it. Latency comes from ``benchmarks/results/pretrained_latency.json`` when
present (a separate one-thread run, stated with its load)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunksel.study.zeroshot_parts import AVERAGE, stale_parts

LATENCY = Path("benchmarks/results/pretrained_latency.json")
WHEEL = Path("benchmarks/results/wheel_size.json")
#: the report whose Table 1 measured the generator-coupled flagship's cost (same architecture)
LARGE = Path("reports/large/results.json")
NAMES = {
    "wikiqa": "WikiQA (own candidates, MiniLM order)",
    "trec-dl-2019/bm25": "TREC DL 2019, BM25 top-100", "trec-dl-2019/minilm": "TREC DL 2019, MiniLM top-20",
    "trec-dl-2020/bm25": "TREC DL 2020, BM25 top-100", "trec-dl-2020/minilm": "TREC DL 2020, MiniLM top-20",
    "nfcorpus/minilm": "NFCorpus, MiniLM top-20", "nfcorpus/bm25": "NFCorpus, BM25 top-20",
    "arguana/minilm": "ArguAna, MiniLM top-20", "arguana/bm25": "ArguAna, BM25 top-20",
}
ROW_NAMES = {
    "retrieval": "Retrieval order", "bm25": "BM25 (collection statistics)", "lambdamart-base": "`lambdamart-base`",
    "anchored-base": "`anchored-base`", "crossencoder": "Cross-encoder (MiniLM-L6, trained here)",
    "lambdamart-base (own stats)": "`lambdamart-base`, NFCorpus's own statistics",
    "anchored-base (own stats)": "`anchored-base`, NFCorpus's own statistics",
    "lambdamart (LODO)": "LambdaMART, recipe without the dataset",
    "anchored (LODO)": "anchored, recipe without the dataset",
    "anchored, generator": "anchored with generator features (h, r; K = 5 chunk block)",
    "anchored, generator (LODO)": "anchored with generator features, recipe without the dataset",
}


def _f(x: Any, d: int = 2) -> str:
    return "–" if x is None or (isinstance(x, float) and x != x) else f"{x:.{d}f}"


def _cmp(c: Mapping[str, Any] | None) -> str:
    if not c:
        return "–"
    mark = " **sig.**" if c["significant"] else ""
    return f"{c['diff']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}], p = {c['p']:.3g}{mark}"


def part_name(key: str) -> str:
    """A part's name in prose: a collection's, or the held-out datasets' with their lists."""
    if key.startswith("lodo/"):
        return f"each dataset held out ({'MiniLM' if key == 'lodo/minilm' else 'BM25'} lists)"
    return NAMES.get(key, key)


def _stale_note(keys: list[str], stale: Mapping[str, str | None], what: str) -> list[str]:
    old = [k for k in keys if k in stale]
    if not old:
        return []
    commits = sorted({str(stale[k])[:12] for k in old})
    return [f"**Provisional:** {what} pools parts measured on the pretrained models of commit "
            f"{', '.join(commits)} ({', '.join(part_name(k) for k in old)}) with parts measured on today's; "
            "it is final once those parts are re-run.", ""]


def collection_table(key: str, entry: Mapping[str, Any], stale: Mapping[str, str | None] | None = None) -> list[str]:
    rows = entry["rows"]
    graded = any("ndcg10" in r for r in rows.values())
    n = next(iter(rows.values()))
    head = f"### {NAMES.get(key, key)}\n\n{n['n']} questions with a positive of {n['n_all']}; strongest by rank-1: " \
           f"{ROW_NAMES.get(entry['strongest'], entry['strongest'])}.\n"
    if stale and key in stale:
        head += f"\nNot yet re-run: the pretrained models of commit {str(stale[key])[:12]}.\n"
    cols = ["row", "rank-1"] + (["nDCG@10", "MRR@10"] if graded else []) + ["vs strongest", "vs retrieval order"]
    out = [head, "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for name, r in rows.items():
        cells = [ROW_NAMES.get(name, name), _f(r["rank1"])]
        if graded:
            cells += [_f(r.get("ndcg10")), _f(r.get("mrr10"))]
        cells += [_cmp(entry["vs_strongest"].get(name)), _cmp(entry["vs_retrieval"].get(name))]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def calibration_table(results: Mapping[str, Any]) -> list[str]:
    out = ["| collection | row | chunk ECE | set AUROC | `k=\"auto\"` chunks | `k=\"auto\"` recall | top-1 recall |",
           "|---|---|---|---|---|---|---|"]
    for key, entry in results["collections"].items():
        for name, r in entry["rows"].items():
            cal = r.get("calibration")
            if not cal:
                continue
            auto, k1 = cal.get("auto") or {}, cal.get("k1") or {}
            out.append(f"| {NAMES.get(key, key)} | {ROW_NAMES.get(name, name)} | {_f(cal.get('chunk_ece'), 3)} | "
                       f"{_f(cal.get('auroc'), 3)} | {_f(auto.get('mean_kept'))} | "
                       f"{_f(100 * auto['evidence_recall'] if auto.get('evidence_recall') is not None else None, 1)} | "
                       f"{_f(100 * k1['evidence_recall'] if k1.get('evidence_recall') is not None else None, 1)} |")
    return out + [""]


GENERATOR_LODO = "anchored, generator (LODO)"


def paired(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    """Row ``a`` against row ``b`` on their rank-1 hits (points): the paired bootstrap
    interval, McNemar's p, and whether both tests agree (the run's own rule)."""
    import numpy as np

    from chunksel.eval.significance import compare, significant

    c = compare(np.asarray(a["hits"]), np.asarray(b["hits"]))
    return {"diff": 100 * c["diff"], "lo": 100 * c["lo"], "hi": 100 * c["hi"], "p": c["p"], "n": c["n"],
            "n10": c["n10"], "n01": c["n01"], "significant": significant(c)}


def lodo_table(lodo: Mapping[str, Any]) -> list[str]:
    names = [n for n in ("retrieval", "bm25", "lambdamart (LODO)", "anchored (LODO)", GENERATOR_LODO)
             if all(n in e["rows"] for e in lodo.values())]
    gen = GENERATOR_LODO in names
    out = ["| held out | " + " | ".join(ROW_NAMES[n] for n in names) + " | anchored vs LambdaMART |"
           + (" generator flagship vs LambdaMART |" if gen else ""),
           "|---|" + "---|" * (len(names) + 1 + gen)]
    for ds, entry in lodo.items():
        rows = entry["rows"]
        gen_cell = ""
        if gen:
            gen_cell = f" {_cmp(paired(rows[GENERATOR_LODO], rows['lambdamart (LODO)']))} |"
        out.append(f"| {ds} (n = {rows['retrieval']['n']}) | " + " | ".join(_f(rows[n]["rank1"]) for n in names)
                   + f" | {_cmp(entry.get('anchored_vs_lambdamart'))} |" + gen_cell)
    return out + [""]


def generator_lines(results: Mapping[str, Any]) -> list[str]:
    """The generator-coupled flagship where its features exist: its average beside the
    lean models' over the same collections (WikiQA and the held-out datasets, MiniLM lists)."""
    parts = []
    wq = (results.get("collections") or {}).get("wikiqa", {}).get("rows", {})
    if "anchored, generator" in wq:
        parts.append({"generator": wq["anchored, generator"], "anchored": wq.get("anchored-base"),
                      "lambdamart": wq.get("lambdamart-base")})
    for entry in ((results.get("lodo") or {}).get("minilm") or {}).values():
        r = entry["rows"]
        if GENERATOR_LODO in r:
            parts.append({"generator": r[GENERATOR_LODO], "anchored": r.get("anchored (LODO)"),
                          "lambdamart": r.get("lambdamart (LODO)")})
    if not parts or any(v is None for p in parts for v in p.values()):
        return []
    import numpy as np

    avg = {k: float(np.mean([p[k]["rank1"] for p in parts])) for k in ("generator", "anchored", "lambdamart")}
    out = ["## The generator-coupled flagship",
           f"Where its SmolLM2 warm-up features exist ({len(parts)} collections: WikiQA and the held-out datasets, "
           "MiniLM lists), trained by the same recipe with the generator's h and r and the K = 5 chunk block "
           "(on WikiQA's longer lists it scores the first five; the rest rank after them). Average rank-1 over "
           f"them: generator flagship {_f(avg['generator'])}, `anchored-base` (or its recipe without the dataset) "
           f"{_f(avg['anchored'])}, `lambdamart-base` (likewise) {_f(avg['lambdamart'])}."]
    for other, label in (("anchored", "anchored-base"), ("lambdamart", "lambdamart-base")):
        c = paired({"hits": [h for p in parts for h in p["generator"]["hits"]]},
                    {"hits": [h for p in parts for h in p[other]["hits"]]})
        out.append(f"Generator flagship minus `{label}` over the {c['n']} pooled questions: {c['diff']:+.2f} "
                   f"[{c['lo']:+.2f}, {c['hi']:+.2f}], McNemar p = {c['p']:.3g}"
                   + (" (significant by both tests)." if c["significant"] else " (not significant by both tests)."))
    return [line for par in out for line in (par, "")][:-1] + [""]


def latency_table() -> list[str]:
    if not LATENCY.is_file():
        return ["(benchmarks/results/pretrained_latency.json not found: run benchmarks/pretrained_latency.py)", ""]
    lat = json.loads(LATENCY.read_text())
    ks = sorted({r["k"] for r in lat["rows"]})
    out = [f"One thread, commit {lat.get('commit')}, load average {', '.join(f'{x:.1f}' for x in lat.get('load', []))} "
           f"at the end of the run ({lat.get('cpus')} CPUs): `ChunkSelector.select` from the retriever's embeddings, "
           "every call a new question and its own chunks (cold: no memo, no cache answers it).", "",
           "| row | " + " | ".join(f"p50 K = {k} (ms)" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for row in dict.fromkeys(r["row"] for r in lat["rows"]):
        cells = {r["k"]: r["p50_ms"] for r in lat["rows"] if r["row"] == row}
        out.append(f"| {row} | " + " | ".join(_f(cells.get(k), 3) for k in ks) + " |")
    out.append("")
    for python, entry in (lat.get("fresh_process") or {}).items():
        env = entry.get("environment", {})
        parts = [f"{n} {entry[n]['median_s']:.2f} s" for n in entry if n != "environment"]
        out.append(f"- fresh process (import, load by name, first selection), median: {', '.join(parts)} "
                   f"(scikit-learn installed: {env.get('scikit_learn')}; `{python}`)")
    out.append(generator_cost())
    return out + [""]


def generator_cost(path: Path = LARGE) -> str:
    """The generator-coupled flagship's cost, as the large report's Table 1 measured it."""
    try:
        res = json.loads(path.read_text())
        row = res["table1"]["anchored"]
    except (OSError, ValueError, KeyError):
        return "- the generator-coupled flagship: no cost measured here (the large report's Table 1 has it)"
    return (f"- the generator-coupled flagship (the large report's Table 1 at {str(res.get('git_commit'))[:7]}, one "
            f"thread): p50 {_f(row.get('p50_ms'), 2)} ms with the SmolLM2 warm-up features given, "
            f"{_f(row.get('text_p50_ms'), 0)} ms from raw text (the warm-up pass and the encoder included); K = 5 "
            "only: its chunk block scores the first five of a longer list, so it has no K = 20 or 100 figure")


def targets(results: Mapping[str, Any]) -> list[str]:
    """The issue's targets, each met or missed by how much (from the figures above)."""
    out = ["| target | measured | met |", "|---|---|---|"]
    parts = [(NAMES.get(k, k), e) for k, e in results["collections"].items()]
    for cand, lodo in (results.get("lodo") or {}).items():
        parts += [(f"{ds} held out ({cand})", e) for ds, e in lodo.items()]
    below = [name for name, e in parts
             for row in ("anchored-base", "anchored (LODO)")
             if (c := e["vs_retrieval"].get(row)) and c["significant"] and c["diff"] < 0]
    out.append(f"| `anchored-base` never significantly below retrieval order ({len(parts)} collections and held-out "
               f"sets) | {', '.join(below) if below else 'never'} | {'no' if below else 'yes'} |")
    avg = (results.get("average") or {}).get("rank1") or {}
    if "anchored-base" in avg and "lambdamart-base" in avg:
        d = avg["anchored-base"] - avg["lambdamart-base"]
        mixed = any(k in stale_parts(results) for k in (*AVERAGE, "lodo/minilm"))
        out.append(f"| `anchored-base` >= `lambdamart-base` + 1.0 on the zero-shot average | {d:+.2f}"
                   f"{' (provisional: mixed models)' if mixed else ''} | {'yes' if d >= 1.0 else 'no'} |")
    for name in ("anchored-base", "lambdamart-base"):
        eces = {k: e["rows"][name]["calibration"]["chunk_ece"] for k, e in results["collections"].items()
                if name in e["rows"] and e["rows"][name].get("calibration")}
        if eces:
            worst = max(eces, key=eces.get)
            over = sum(v > 0.05 for v in eces.values())
            out.append(f"| `{name}` chunk ECE <= 0.05 on every unseen collection | {over} of {len(eces)} over; worst "
                       f"{eces[worst]:.3f} ({NAMES.get(worst, worst)}) | {'yes' if not over else 'no'} |")
    if LATENCY.is_file():
        lat = json.loads(LATENCY.read_text())
        p50 = {(r["row"], r["k"]): r["p50_ms"] for r in lat["rows"]}
        for row in ("anchored-base", "anchored-base (onnxruntime)", "anchored-lite", "anchored-lite (onnxruntime)"):
            for k, bound in ((5, 1.5), (100, 10.0)):
                if (row, k) in p50:
                    out.append(f"| {row}: cold p50 <= {bound} ms at K = {k} | {p50[(row, k)]:.2f} ms | "
                               f"{'yes' if p50[(row, k)] <= bound else 'no'} |")
        for entry in (lat.get("fresh_process") or {}).values():
            for name in ("anchored-base", "anchored-lite"):
                if name in entry:
                    sk = entry.get("environment", {}).get("scikit_learn")
                    m = entry[name]["median_s"]
                    out.append(f"| `{name}`: import, load and first selection <= 2 s (scikit-learn installed: {sk}) "
                               f"| {m:.2f} s | {'yes' if m <= 2.0 else 'no'} |")
    out.append(wheel_row())
    return out + [""]


def wheel_row(path: Path = WHEEL) -> str:
    """The wheel-size target's row, from ``benchmarks/wheel_size.py``'s result."""
    import json

    try:
        w = json.loads(path.read_text())
    except (OSError, ValueError):
        return "| the wheel with its pretrained models <= 30 MB | not measured (`python benchmarks/wheel_size.py`) | - |"
    return (f"| the wheel with its pretrained models <= {w['bound_mb']:.0f} MB | {w['mb']:.2f} MB at {w['commit']} "
            f"(`benchmarks/wheel_size.py`) | {'yes' if w['mb'] <= w['bound_mb'] else 'no'} |")


def write_report(results: Mapping[str, Any], out: Path) -> Path:
    stale = stale_parts(results)
    models = f"Pretrained models of commit {str(results.get('pretrained_commit'))[:12]} (`make pretrained`), "
    if stale:
        models = (f"Pretrained models of commit {str(results.get('pretrained_commit'))[:12]} (`make pretrained`) "
                  f"in every part but {len(stale)}, which still show an earlier run's models ("
                  + "; ".join(f"{part_name(k)}: commit {str(c)[:12]}" for k, c in stale.items())
                  + "; `python -m chunksel.study.zeroshot --update --stale` re-runs them), ")
    lines = ["# Zero-shot report: the pretrained selectors on collections they never saw", "",
             models + f"computed by `python -m chunksel.study.zeroshot` (its parts' times add up to "
             f"{sum((results.get('seconds') or {}).values()) / 60:.0f} minutes on two shared cores). "
             "Every model, operating point and calibrator comes from the recipe's pooled validation splits; "
             "nothing here is tuned on these collections. A difference is marked **sig.** only when the paired "
             "bootstrap interval (95%) and McNemar's test (p < 0.05) agree. `lambdamart-base` and "
             "`anchored-base` read the shipped Wikipedia statistics unless a row says otherwise. On BM25 lists the "
             "learned rows read the lists in BM25's order with MiniLM cosines as retrieval scores (what "
             "`ChunkSelector` computes when no `chunk_scores` are passed). TREC DL runs over `msmarco-sub`, which holds "
             "mostly judged passages: its figures are not comparable with full-corpus TREC DL results.", ""]
    lines += ["## Targets", ""] + targets(results) + [
        "Why each miss, and what was tried on validation: `docs/decisions/pretrained-models.md`.", ""]
    avg = results.get("average") or {}
    if avg:
        lines += ["## Zero-shot average", "",
                  f"Rank-1 averaged over {avg['collections']} collections (WikiQA, NFCorpus and ArguAna with MiniLM "
                  "lists, and each benchmark dataset held out):", "",
                  "| row | average rank-1 |", "|---|---|"]
        lines += [f"| {ROW_NAMES.get(n, n)} | {_f(v)} |" for n, v in avg["rank1"].items()]
        note = _stale_note(list(AVERAGE) + ["lodo/minilm"], stale, "this average")
        lines += [""] + note if note else []
        c = avg.get("anchored_minus_lambdamart_pooled")
        if c:
            lines += ["", f"`anchored-base` minus `lambdamart-base` over the {c['n']} pooled questions: "
                          f"{c['diff']:+.2f} [{c['lo']:+.2f}, {c['hi']:+.2f}], McNemar p = {c['p']:.3g}.", ""]
    gen = generator_lines(results)
    lines += gen + (_stale_note(["wikiqa", "lodo/minilm"], stale, "this section") if gen else [])
    lines += ["## Collections", ""]
    for key, entry in results["collections"].items():
        lines += collection_table(key, entry, stale)
    for cand, title in (("minilm", "MiniLM"), ("bm25", "BM25")):
        lodo = (results.get("lodo") or {}).get(cand)
        if not lodo:
            continue
        lines += [f"## Each benchmark dataset held out, {title} top-5 lists", "",
                  f"{title} top-5 lists of each dataset's test split; LambdaMART and the anchored selector retrained by "
                  "the pretrained recipe on the other five datasets (their MiniLM lists; the cross-encoder's held-out "
                  "rows are in the full and large reports' transfer tables)"
                  + ("; so is the generator-coupled flagship, with the generator's features."
                     if any(GENERATOR_LODO in e["rows"] for e in lodo.values()) else "."), ""]
        if f"lodo/{cand}" in stale:
            lines += [f"Not yet re-run: the pretrained models of commit {str(stale[f'lodo/{cand}'])[:12]}.", ""]
        lines += lodo_table(lodo)
    lines += ["## Calibration transfer", "", "Calibrated on the recipe's pooled validation splits.", ""]
    lines += calibration_table(results)
    lines += ["## Cost", ""] + latency_table()
    stats = results.get("stats") or {}
    if stats:
        lines += ["## Collections' lists", "", "| collection | questions | empty lists (left out) | mean candidates | "
                  "mean positives | with a positive (%) |", "|---|---|---|---|---|---|"]
        for key, s in stats.items():
            lines.append(f"| {NAMES.get(key, key)} | {s.get('questions')} | {s.get('no_candidates', 0)} | "
                         f"{_f(s.get('mean_candidates'), 1)} | {_f(s.get('mean_positives'), 2)} | "
                         f"{_f(s.get('answerable_pct'), 1)} |")
        lines.append("")
    out.mkdir(parents=True, exist_ok=True)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


if __name__ == "__main__":
    folder = Path(sys.argv[1] if len(sys.argv) > 1 else "reports/zeroshot")
    print(write_report(json.loads((folder / "results.json").read_text()), folder))
