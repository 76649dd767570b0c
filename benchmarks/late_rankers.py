"""The library's late-interaction columns in LambdaMART and the flagship: with and without.

For each dataset (a profile's sample, grouped splits, K = 5 MiniLM candidates) it fits,
on the training split with early stopping on validation:

- ``lambdamart``: the ``lambdamart`` selector, ``late=False`` and ``late=True``;
- ``anchored (lean)``: the flagship without generator blocks
  (``q+chunk+letor+lambdamart``, the shipped ``anchored-base`` recipe's blocks), both ways.

MaxSim comes from the library's path (:mod:`chunksel.selectors.late_features`: int8 chunk
codes, the score cache under ``<cache>/maxsim/``, so a second run computes nothing).
Rank-1 on the answerable validation and test questions. Whether a model takes the late
columns is chosen on the validation average; the test figures are reported, never
chosen on, with paired bootstrap intervals and McNemar's p per dataset and pooled over the
datasets' test questions (significant only when both agree). Writes ``benchmarks/results/late_rankers_<profile>.json``.

    nice -n 10 python benchmarks/late_rankers.py [--profile full] [--datasets popqa nq]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
LIMITS = {"quick": 500, "full": 3000}
MODELS = {"lambdamart": ("lambdamart", {}),
          "anchored (lean)": ("anchored", {"blocks": "q+chunk+letor+lambdamart"})}


#: test comparisons (row, against): paired bootstrap interval and McNemar's p, per dataset and pooled
PAIRS = (("lambdamart, late", "lambdamart"), ("anchored (lean), late", "anchored (lean)"),
         ("anchored (lean), late", "lambdamart"), ("anchored (lean), late", "lambdamart, late"))


def hits(sel, insts) -> list[int]:
    """Rank-1 hit (1 / 0) of each answerable question."""
    ans = [i for i in insts if i.labels().any()]
    scores = sel.score(ans)
    return [int(i.labels()[int(np.argmax(row[: len(i.candidates)]))] >= 1) for i, row in zip(ans, scores, strict=True)]


def paired(a: list[int], b: list[int]) -> dict:
    """Hits ``a`` against ``b``: the study's paired comparison (bootstrap interval, McNemar)."""
    from chunksel.study.zeroshot_report import paired as paired_rows

    return paired_rows({"hits": a}, {"hits": b})


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", choices=list(LIMITS), default="full")
    ap.add_argument("--datasets", nargs="+", default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from chunksel.build import build_instances
    from chunksel.selectors import make_selector
    from chunksel.study.profiles import DATASETS

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip()
    report: dict = {"profile": args.profile, "limit": LIMITS[args.profile], "split": "grouped", "k": 5,
                    "commit": commit, "datasets": {}}
    for ds in args.datasets or DATASETS:
        built = build_instances(ds, k=5, index="flat", limit=LIMITS[args.profile], split="grouped", progress=False)
        sp = {s: [i for i in built.instances if i.split == s] for s in ("train", "val", "test")}
        entry: dict = {"questions": {s: len(v) for s, v in sp.items()}}
        for model, (name, params) in MODELS.items():
            for late in (False, True):
                t0 = time.perf_counter()
                sel = make_selector(name, late=late, progress=False, **params).fit(sp["train"], None, sp["val"])
                got = {s: hits(sel, sp[s]) for s in ("val", "test")}
                row = {s: 100.0 * float(np.mean(got[s])) for s in ("val", "test")}
                row["fit_s"] = round(time.perf_counter() - t0, 1)
                row["test_hits"] = got["test"]
                entry[f"{model}{', late' if late else ''}"] = row
                print(f"{ds}: {model}{', late' if late else ''}: validation {row['val']:.2f}, test {row['test']:.2f}",
                      flush=True)
        entry["test_comparisons"] = {f"{a} vs {b}": paired(entry[a]["test_hits"], entry[b]["test_hits"])
                                     for a, b in PAIRS}
        report["datasets"][ds] = entry
    rows = [k for k in next(iter(report["datasets"].values())) if k not in ("questions", "test_comparisons")]
    pool = {r: [h for e in report["datasets"].values() for h in e[r]["test_hits"]] for r in rows}
    report["pooled_test_comparisons"] = {f"{a} vs {b}": paired(pool[a], pool[b]) for a, b in PAIRS}
    report["average"] = {r: {s: float(np.mean([e[r][s] for e in report["datasets"].values()])) for s in ("val", "test")}
                         for r in rows}
    report["chosen_on_validation"] = {
        m: (f"{m}, late" if report["average"][f"{m}, late"]["val"] > report["average"][m]["val"] else m)
        for m in MODELS}
    out = RESULTS / f"late_rankers_{args.profile}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}: " + json.dumps(report["average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
