"""Calibrated abstention on the benchmark's test sets (answerable and unanswerable alike).

Writes ``benchmarks/results/abstention.json`` (and, with matplotlib, a risk-coverage plot
and a reliability diagram per dataset beside it, plus ``abstention.md``: the report
section) and prints one line per dataset and selector.

    python benchmarks/abstention.py --profile quick --datasets triviaqa nq \\
        --selectors anchored lambdamart retrieval bm25

Per dataset and selector the selector is built and fitted as the benchmark's Table 1
does (the profile's settings, the seed, the training split, the validation split), which
also fits its calibrator on the validation split; :mod:`chunksel.eval.abstention` then
measures every test set. The instances, embeddings and generator features come from the
cache (``chunksel bench`` fills it).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from pathlib import Path

import numpy as np

from chunksel.study.abstention import TARGETS, format_abstention, plot_abstention, run_abstention

RESULTS = Path(__file__).resolve().parent / "results"


def _bench_parts():
    """The benchmark's profiles and selector factory."""
    from chunksel.study.fitting import make_selector
    from chunksel.study.profiles import PROFILES

    return PROFILES, make_selector


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="quick")
    ap.add_argument("--datasets", nargs="+", default=["triviaqa", "nq"])
    ap.add_argument("--selectors", nargs="+", default=["anchored", "lambdamart", "retrieval", "bm25"])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS / "abstention.json"))
    args = ap.parse_args()

    from chunksel.build import build_instances, extract_question_features
    from chunksel.selectors import get_selector_class

    profiles, make = _bench_parts()
    prof = profiles[args.profile]
    t_start = time.time()
    built = {ds: build_instances(ds, k=prof.k, index="flat", limit=prof.limit, seed=args.seed, progress=False)
             for ds in args.datasets}
    features = None
    if any("warmup" in get_selector_class(n).query_cost for n in args.selectors):
        features = extract_question_features([i.question for b in built.values() for i in b.instances],
                                             progress=False)
    splits, sizes = {}, {}
    for ds in args.datasets:
        insts = built[ds].instances
        splits[ds] = {sp: [i for i in insts if i.split == sp] for sp in ("train", "val", "test")}
        sizes[ds] = {sp: len(v) for sp, v in splits[ds].items()}
        # unanswerable sets are test instances too (rank-1 elsewhere reads the answerable ones)
        sizes[ds]["test_unanswerable"] = int(sum(not i.answerable() for i in splits[ds]["test"]))
    results = run_abstention(splits, args.selectors, lambda n: make(n, args.seed, False, prof), features,
                             say=lambda m: print(m, flush=True))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).parent).stdout.strip() or "unknown"
    plots = plot_abstention(results, out.parent)
    record = {
        "command": "python benchmarks/abstention.py " + " ".join(
            ["--profile", args.profile, "--datasets", *args.datasets, "--selectors", *args.selectors]),
        "commit": commit,
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "profile": args.profile, "seed": args.seed, "targets": TARGETS, "splits": sizes,
        "wall_s": round(time.time() - t_start, 1), "plots": [p.name for p in plots],
        "results": results,
    }
    out.write_text(json.dumps(record, indent=1, default=float))
    out.with_suffix(".md").write_text("## Abstention\n\n" + format_abstention(results) + "\n")
    print(f"wrote {out}, {out.with_suffix('.md')} and {len(plots)} plots")


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
