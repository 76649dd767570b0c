"""The prototype selector's batch-1 latencies over several runs of ``selector_latency.py``.

On a shared machine one run's p50 moves by 5-15% with the machine's load (BM25's p50
moved 0.31 -> 0.38 ms between runs of the same code), which is as large as the gap
between the int8 variant and its 0.5 ms target. This script reads several
``selector_latency.py`` result files (the same code, run at different times) and
reports, per section and variant, each run's p50 and their median, for the three paths
(``score`` with instances, ``score_arrays``, the exported ``graph`` alone), with each
run's ratio to torch fp32 ``score_arrays`` in the same run (which cancels most of the
machine's drift). Writes ``benchmarks/results/selector_latency_runs.json``.

Usage: ``python benchmarks/latency_runs.py RUN.json RUN.json ... [--out FILE]``
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
PATHS = ("score", "arrays", "graph")


def p50(entry: dict, path: str) -> float | None:
    node = entry if path == "score" else entry.get(path)
    return None if not node else node["batch1"]["p50_ms"]


def summarise(runs: list[dict], targets: dict) -> dict:
    out: dict = {"runs": [r.get("date") for r in runs], "sections": {}}
    for section in runs[0]["sections"]:
        protos = [r["sections"][section]["selectors"]["prototype"] for r in runs]
        refs = [p50(p["fp32"], "arrays") for p in protos]
        rows = {}
        for variant in (v for v in protos[0] if isinstance(protos[0][v], dict) and "batch1" in protos[0][v]):
            for path in PATHS:
                vals = [p50(p[variant], path) for p in protos]
                if any(v is None for v in vals):
                    continue
                target = targets.get("int8_p50_ms" if "int8" in variant else "fp32_p50_ms")
                rows[f"{variant} {path}"] = {
                    "p50_ms": [round(v, 3) for v in vals],
                    "median_p50_ms": round(statistics.median(vals), 3),
                    "ratio_to_torch_fp32_arrays": [round(v / ref, 3) for v, ref in zip(vals, refs)],
                    "target_ms": target,
                    "median_under_target": statistics.median(vals) < target if target else None,
                    "runs_under_target": sum(v < target for v in vals) if target else None,
                }
        bm25 = [r["sections"][section]["selectors"]["bm25"]["batch1"]["p50_ms"] for r in runs]
        out["sections"][section] = {"bm25 p50_ms (machine drift)": [round(v, 3) for v in bm25], "variants": rows}
    return out


def _without_out(command: str) -> str:
    """A run's command without its ``--out FILE`` (where it wrote is not how it ran)."""
    words = command.split(" ")
    if "--out" in words:
        i = words.index("--out")
        del words[i : i + 2]
    return " ".join(words)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="selector_latency.py result files")
    ap.add_argument("--out", default=str(RESULTS / "selector_latency_runs.json"))
    args = ap.parse_args(argv)
    runs = [json.loads(Path(f).read_text()) for f in args.runs]
    commands = {_without_out(r["command"]) for r in runs}
    if len(commands) != 1:
        raise SystemExit(f"the runs used different commands: {sorted(commands)}")
    out = {"benchmark": "selector_latency_runs", "files": [Path(f).name for f in args.runs],
           "command": commands.pop(), **summarise(runs, runs[0]["targets"])}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    for section, data in out["sections"].items():
        print(f"\n== {section} == bm25 p50 per run: {data['bm25 p50_ms (machine drift)']}")
        print(f"{'variant / path':<22}{'p50 ms per run':<28}{'median':>8}  {'/ torch fp32 arrays':<24}{'under target':>13}")
        for name, row in data["variants"].items():
            per = ", ".join(f"{v:.3f}" for v in row["p50_ms"])
            ratio = ", ".join(f"{v:.2f}" for v in row["ratio_to_torch_fp32_arrays"])
            under = f"{row['runs_under_target']}/{len(row['p50_ms'])}" if row["target_ms"] else "-"
            print(f"{name:<22}{per:<28}{row['median_p50_ms']:>8.3f}  {ratio:<24}{under:>13}")
    print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
