"""Does the pooled cross-encoder add to LambdaMART? A validation-fitted blend (issue #29, item 4).

Reads the per-set scores that ``benchmarks/crossencoder_pooled.py`` saved beside its JSON
(``<out>.scores.npz``: the pooled validation split and each dataset's test split, in build
order), rebuilds the same quick-profile instances (grouped splits, K = 5, ``--limit``
questions a dataset), trains LambdaMART per dataset as Table 1 does (training split,
early-stopped on validation), and blends within each set

    z(LambdaMART) + a z(cross-encoder) + b z(retrieval cosine)

(z: the set's scores standardised within the set; a ranking scale, never a probability)
with (a, b) chosen on the pooled validation split only, the largest rank-1 and, on ties,
the smallest weights. LambdaMART's validation scores are in-sample for its early
stopping, which favours it in that choice. Test: rank-1 over the answerable test
questions per dataset and on average, with paired bootstrap intervals (10,000 resamples)
of the blend against LambdaMART and against retrieval order.

    python benchmarks/crossencoder_stack.py --scores benchmarks/results/crossencoder_pooled_l6_prior.scores.npz

Writes ``benchmarks/results/crossencoder_stack.json``.

Run on ``crossencoder_pooled_l6_prior.scores.npz`` (six layers, pointwise, one epoch):
validation chose a = b = 0 (LambdaMART alone, 85.78 pooled validation rank-1; no weight of
the cross-encoder or the retrieval prior was better), so the blend is LambdaMART on test
(80.09): on the quick profile's data this cross-encoder adds nothing LambdaMART lacks.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
from datetime import datetime, timezone
from itertools import product
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from chunksel.study.profiles import DATASETS  # noqa: E402  (Table 1's six, in report order)

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "crossencoder_stack.json"
CE_WEIGHTS = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
PRIOR_WEIGHTS = (0.0, 0.25, 0.5, 1.0)


def cosines(instances: list, width: int) -> np.ndarray:
    out = np.full((len(instances), width), np.nan)
    for r, inst in enumerate(instances):
        out[r, : len(inst.candidates)] = [c.score for c in inst.candidates]
    return out


def hits(scores: np.ndarray, instances: list) -> np.ndarray:
    return np.asarray([inst.labels()[int(np.argmax(row[: len(inst.candidates)]))] > 0
                       for row, inst in zip(scores, instances, strict=True) if inst.answerable()], dtype=float)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scores", type=Path, required=True, help="the .scores.npz of crossencoder_pooled.py")
    ap.add_argument("--limit", type=int, default=500, help="questions a dataset (as the scores' run)")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    if not args.scores.is_file():
        ap.error(f"--scores: no such file {str(args.scores)!r} (run crossencoder_pooled.py first)")
    if args.limit < 1:
        ap.error(f"--limit must be >= 1, got {args.limit}")

    from chunksel.build import build_instances
    from chunksel.eval.significance import bootstrap_interval, paired_bootstrap
    from chunksel.selectors.crossencoder import standardised as z
    from chunksel.selectors.ltr import LambdaMARTSelector

    saved = np.load(args.scores)
    splits = {}
    for ds in DATASETS:
        insts = build_instances(ds, k=5, limit=args.limit, progress=False, split="grouped").instances
        splits[ds] = {s: [i for i in insts if i.split == s] for s in ("train", "val", "test")}
    val = [i for ds in DATASETS for i in splits[ds]["val"]]
    if saved["val"].shape[0] != len(val):
        raise SystemExit(f"the scores file holds {saved['val'].shape[0]} validation sets, the build {len(val)}: "
                         "not the same instances (--limit?)")
    lm_val, lm_test = [], {}
    for ds in DATASETS:
        sel = LambdaMARTSelector(progress=False).fit(splits[ds]["train"], None, splits[ds]["val"])
        lm_val.append(sel.score(splits[ds]["val"]))
        lm_test[ds] = sel.score(splits[ds]["test"])
        if saved[f"test_{ds}"].shape[0] != len(splits[ds]["test"]):
            raise SystemExit(f"{ds}: the scores file's test sets differ from the build's")
    width = saved["val"].shape[1]
    lm_val_a = np.full((len(val), width), -np.inf)
    r = 0
    for block in lm_val:
        lm_val_a[r: r + block.shape[0], : block.shape[1]] = block
        r += block.shape[0]

    def blend(lm, ce, insts, a, b):
        return z(lm, insts) + a * z(ce, insts) + b * z(cosines(insts, ce.shape[1]), insts)

    grid = {(a, b): float(hits(blend(lm_val_a, saved["val"], val, a, b), val).mean())
            for a, b in product(CE_WEIGHTS, PRIOR_WEIGHTS)}
    a, b = max(grid, key=lambda w: (grid[w], -w[0] - w[1]))
    print(f"validation: LambdaMART alone {100 * grid[(0.0, 0.0)]:.2f}, chosen a={a} b={b} "
          f"{100 * grid[(a, b)]:.2f}", flush=True)

    rows = ("retrieval", "lambdamart", "crossencoder", "blend")
    per: dict = {}
    pooled: dict = {k: [] for k in rows}
    for ds in DATASETS:
        test = splits[ds]["test"]
        ce = saved[f"test_{ds}"]
        h = {"retrieval": hits(cosines(test, ce.shape[1]), test), "lambdamart": hits(lm_test[ds], test),
             "crossencoder": hits(ce, test), "blend": hits(blend(lm_test[ds], ce, test, a, b), test)}
        per[ds] = {"answerable": int(len(h["blend"]))}
        for k in rows:
            m, lo, hi = bootstrap_interval(h[k])
            per[ds][k] = {"rank1": round(100 * m, 2), "ci": [round(100 * lo, 2), round(100 * hi, 2)]}
            pooled[k].append(h[k])
        for ref in ("lambdamart", "retrieval"):
            d, lo, hi = paired_bootstrap(h["blend"], h[ref])
            per[ds][f"blend_minus_{ref}"] = [round(100 * d, 2), round(100 * lo, 2), round(100 * hi, 2)]
        print(f"{ds:<9} " + "  ".join(f"{k} {per[ds][k]['rank1']:6.2f}" for k in rows)
              + f"  blend-LM {per[ds]['blend_minus_lambdamart']}", flush=True)
    avg = {k: round(float(np.mean([per[d][k]["rank1"] for d in DATASETS])), 2) for k in rows}
    allh = {k: np.concatenate(v) for k, v in pooled.items()}
    pooled_diff = {ref: [round(100 * x, 2) for x in paired_bootstrap(allh["blend"], allh[ref])]
                   for ref in ("lambdamart", "retrieval")}
    print(f"average over the six: {avg}; pooled blend - LambdaMART {pooled_diff['lambdamart']}", flush=True)
    result = {
        "benchmark": "crossencoder_stack", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                                 text=True).stdout.strip(),
        "scores": str(args.scores.name), "limit": args.limit, "splits": "grouped",
        "blend": {"form": "z(LambdaMART) + a z(cross-encoder) + b z(retrieval cosine), z within each set",
                  "chosen": {"a": a, "b": b}, "val_rank1": {f"a={k[0]} b={k[1]}": round(100 * v, 2)
                                                             for k, v in grid.items()}},
        "per_dataset": per, "average": avg, "pooled_blend_minus": pooled_diff,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
