"""Accuracy of the prototype selector's int8 variants against fp32 on every test split.

The latency benchmark (``selector_latency.py``) compares fp32 and int8 on one dataset's
test split (192 answerable TriviaQA instances: one flipped pick moves rank-1 by 0.5
points). This script measures the int8 accuracy change on all six benchmark datasets at
once, for two prototype models trained on the full profile's instances with SmolLM2
features:

- ``per_dataset``: one model per dataset (the bench's Table 1 setting, seed 0);
- ``pooled``: one model trained on the union of the six training splits (the bench's
  pooled setting), which has larger score margins.

For each model and each int8 variant (torch ``quantize="int8"`` dynamic, ``"int8w"``
weight-only; ONNX Runtime ``engine="onnxruntime", quantize="int8"``, per-row dynamic) it
reports answerable rank-1 per dataset and overall, the change from fp32 in points, the
share of instances whose pick is unchanged, and a paired bootstrap 95% interval plus an
exact McNemar p-value for the difference (:func:`chunksel.eval.significance.significance_entry`). Writes
``benchmarks/results/quantization.json``.

Every variant scores one instance per call (batch 1), as a deployed selector does: torch's
dynamic int8 takes its activation range from the whole batch, so batched scores would
depend on which instances share the batch.

Usage: ``python benchmarks/quantization.py [--profile full] [--threads 2]``
(needs the profile's instances and generator features, as ``chunksel bench`` builds them).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

from chunksel.build import build_instances, extract_question_features
from chunksel.eval.metrics import per_instance_hits, subset_mask
from chunksel.eval.significance import significance_entry
from chunksel.selectors.prototype import PrototypeSelector
from chunksel.study.profiles import DATASETS, PROFILES
from chunksel.threads import set_threads
from chunksel.types import candidate_mask, label_matrix

RESULTS = Path(__file__).resolve().parent / "results" / "quantization.json"
#: variant -> (engine, quantize)
VARIANTS: dict[str, tuple[str, str | None]] = {"fp32": ("torch", None), "int8": ("torch", "int8")}
if hasattr(torch, "_weight_int8pack_mm"):
    VARIANTS["int8w"] = ("torch", "int8w")
try:
    import onnxruntime  # noqa: F401

    VARIANTS["ort-int8"] = ("onnxruntime", "int8")
except ImportError:  # pragma: no cover
    pass
MODES = tuple(m for m in VARIANTS if m != "fp32")


def hits_and_picks(sel: PrototypeSelector, test, features) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-instance rank-1 hits, the answerable mask and the picked column (batch 1)."""
    scores = np.concatenate([sel.score([inst], features) for inst in test])
    k = scores.shape[1]
    labels, mask = label_matrix(test, k=k), candidate_mask(test, k=k)
    hits = per_instance_hits(scores, labels, mask)
    return hits, subset_mask(labels, mask, "answerable"), np.argmax(scores, axis=1)


def compare(models: dict[str, PrototypeSelector], tests: dict, features) -> dict:
    """fp32 vs each int8 mode for ``models`` (dataset -> selector) on ``tests``."""
    out: dict = {"per_dataset": {}, "all": {}}
    pooled_hits: dict[str, list[np.ndarray]] = {m: [] for m in ("fp32", *MODES)}
    pooled_same: dict[str, list[np.ndarray]] = {m: [] for m in MODES}
    for ds, test in tests.items():
        sel = models[ds]
        res: dict = {}
        base = None
        for mode in ("fp32", *MODES):
            sel.engine, sel.quantize = VARIANTS[mode]
            hits, ans, picks = hits_and_picks(sel, test, features)
            if base is None:
                base = (hits, ans, picks)
            res[mode] = {"rank1": 100.0 * float(hits[ans].mean()), "n": int(ans.sum())}
            pooled_hits[mode].append(hits[ans])
            if mode != "fp32":
                same = picks[ans] == base[2][ans]
                pooled_same[mode].append(same)
                res[mode]["drop_points"] = res["fp32"]["rank1"] - res[mode]["rank1"]
                res[mode]["same_pick"] = float(same.mean())
        sel.engine, sel.quantize = "torch", None
        out["per_dataset"][ds] = res
    fp = np.concatenate(pooled_hits["fp32"])
    out["all"]["fp32"] = {"rank1": 100.0 * float(fp.mean()), "n": int(fp.size)}
    for mode in MODES:
        q = np.concatenate(pooled_hits[mode])
        sig = significance_entry(mode, "fp32", q, fp, seed=0)
        out["all"][mode] = {
            "rank1": 100.0 * float(q.mean()),
            "n": int(q.size),
            "drop_points": 100.0 * float(fp.mean() - q.mean()),
            "same_pick": float(np.concatenate(pooled_same[mode]).mean()),
            "diff_ci95_points": [sig["lo"], sig["hi"]],
            "mcnemar_p": sig["p"],
        }
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", default="full", choices=sorted(PROFILES))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    set_threads(args.threads)
    prof = PROFILES[args.profile]
    t0 = time.time()
    splits = {}
    for ds in DATASETS:
        insts = build_instances(ds, k=prof.k, index="flat", limit=prof.limit, progress=False).instances
        splits[ds] = {sp: [i for i in insts if i.split == sp] for sp in ("train", "val", "test")}
    features = extract_question_features(
        [i.question for ds in DATASETS for sp in splits[ds].values() for i in sp], progress=False
    )
    tests = {ds: splits[ds]["test"] for ds in DATASETS}
    settings = {"seed": args.seed, "progress": False}

    per_dataset = {}
    for ds in DATASETS:
        per_dataset[ds] = PrototypeSelector(**settings).fit(splits[ds]["train"], features, splits[ds]["val"])
        print(f"trained per-dataset model: {ds}", flush=True)
    pool = PrototypeSelector(**settings).fit(
        [i for ds in DATASETS for i in splits[ds]["train"]], features, [i for ds in DATASETS for i in splits[ds]["val"]]
    )
    print("trained pooled model", flush=True)

    results = {
        "benchmark": "quantization",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"platform": platform.platform(), "python": platform.python_version(),
                    "torch": torch.__version__, "threads": args.threads,
                    "onnxruntime": getattr(sys.modules.get("onnxruntime"), "__version__", None)},
        "profile": args.profile,
        "target_drop_points": 0.3,
        "notes": [
            "rank-1 over answerable test instances, every variant scoring one instance per call; "
            "drop = fp32 - variant in points; same_pick = share of answerable instances whose chosen "
            "candidate is unchanged; diff_ci95_points = paired bootstrap interval of (variant - fp32)",
            "variants: " + ", ".join(f"{m} = engine {e}, quantize {q}" for m, (e, q) in VARIANTS.items()),
        ],
        "per_dataset_models": compare(per_dataset, tests, features),
        "pooled_model": compare({ds: pool for ds in DATASETS}, tests, features),
        "seconds": time.time() - t0,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    for name in ("per_dataset_models", "pooled_model"):
        r = results[name]["all"]
        print(f"{name}: fp32 {r['fp32']['rank1']:.2f} (n={r['fp32']['n']})", end="")
        for mode in MODES:
            print(f" | {mode} {r[mode]['rank1']:.2f} drop {r[mode]['drop_points']:+.2f} "
                  f"same {100 * r[mode]['same_pick']:.1f}% CI {r[mode]['diff_ci95_points']}", end="")
        print()
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
