"""Which order should the flagship be anchored on: retrieval's or LambdaMART's? (issue #29, item 4)

The anchored selector's untrained scorer reproduces its anchor order, and model selection
keeps it at or above that order on validation (``anchor="retrieval"``, the default, or
``anchor="lambdamart"``: the internal stacked LambdaMART's order). This script fits, per
dataset of a profile's grouped splits (default: the quick profile's six, at most 500
questions each, K = 5, SmolLM2 features from the feature cache), LambdaMART and the
flagship under both anchors for each seed, and reports validation and test rank-1 over
answerable questions, with the test's 95% bootstrap intervals and the paired difference
of the two anchors. **The choice reads validation only** (the average over datasets and
seeds); test is reported beside it.

    python benchmarks/anchored_anchor.py                  # quick profile's sizes, seed 0
    python benchmarks/anchored_anchor.py --limit 3000 --seeds 0 1 2

Writes ``benchmarks/results/anchored_anchor.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from chunksel.study.profiles import DATASETS  # noqa: E402  (Table 1's six, in report order)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "anchored_anchor.json"
ROWS = {"lambdamart": ("lambdamart", {}), "anchored (retrieval anchor)": ("anchored", {"anchor": "retrieval"}),
        "anchored (LambdaMART anchor)": ("anchored", {"anchor": "lambdamart"})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=int, default=500, help="questions a dataset (quick profile: 500)")
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if args.limit < 1:
        ap.error(f"--limit must be >= 1, got {args.limit}")
    unknown = [d for d in args.datasets if d not in DATASETS]
    if unknown:
        ap.error(f"--datasets: unknown {unknown}; known: {', '.join(DATASETS)}")

    from chunksel.build import build_instances, extract_question_features
    from chunksel.eval.significance import bootstrap_interval, paired_bootstrap
    from chunksel.selectors import make_selector
    from chunksel.study.fitting import evaluate_selector

    built = {ds: build_instances(ds, k=5, index="flat", limit=args.limit, seed=0, progress=False,
                                 split="grouped").instances for ds in args.datasets}
    features = extract_question_features([i.question for insts in built.values() for i in insts], progress=True)
    per: dict = {}
    t0 = time.perf_counter()
    for ds, insts in built.items():
        sp = {s: [i for i in insts if i.split == s] for s in ("train", "val", "test")}
        per[ds] = {}
        hits: dict[str, list[np.ndarray]] = {r: [] for r in ROWS}
        for row, (name, params) in ROWS.items():
            vals, tests = [], []
            for seed in args.seeds:
                sel = make_selector(name, seed=seed, progress=False, **params)
                sel.fit(sp["train"], features, sp["val"])
                vals.append(100 * evaluate_selector(sel, sp["val"], features)[0]["accuracy"])
                m, h, ans = evaluate_selector(sel, sp["test"], features)
                tests.append(100 * m["accuracy"])
                hits[row].append(np.asarray(h, dtype=float)[ans])
            rate = np.mean(hits[row], axis=0)
            _, lo, hi = bootstrap_interval(rate)
            per[ds][row] = {"val": round(float(np.mean(vals)), 2), "test": round(float(np.mean(tests)), 2),
                            "test_ci": [round(100 * lo, 2), round(100 * hi, 2)], "val_seeds": vals, "test_seeds": tests}
        a, b = (np.mean(hits[r], axis=0) for r in ("anchored (LambdaMART anchor)", "anchored (retrieval anchor)"))
        per[ds]["test_lambdamart_anchor_minus_retrieval_anchor"] = [round(100 * x, 2) for x in paired_bootstrap(a, b)]
        print(f"{ds:<9} " + "  ".join(f"{r}: val {per[ds][r]['val']:.2f} test {per[ds][r]['test']:.2f}" for r in ROWS),
              flush=True)
    avg = {r: {k: round(float(np.mean([per[d][r][k] for d in per])), 2) for k in ("val", "test")} for r in ROWS}
    choice = max(("anchored (retrieval anchor)", "anchored (LambdaMART anchor)"), key=lambda r: avg[r]["val"])
    print(f"average: {avg}; chosen on validation: {choice}", flush=True)
    result = {
        "benchmark": "anchored_anchor", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "limit": args.limit, "seeds": args.seeds, "splits": "grouped", "k": 5,
        "per_dataset": per, "average": avg, "chosen_on_validation": choice,
        "seconds": round(time.perf_counter() - t0, 1),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
