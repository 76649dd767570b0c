"""Does MaxSim over MiniLM's token vectors add to LambdaMART's twelve LETOR features?

For each benchmark dataset (a profile's sample, grouped splits, K = 5 MiniLM candidates)
it computes every candidate's MaxSim (:mod:`chunksel.retrieval.tokens`, title + text,
cached under ``<cache>/maxsim/`` so an interrupted run resumes) and trains LightGBM
LambdaMART (the ``lambdamart`` selector's settings and early stopping on the validation
NDCG@1) on the contested training questions with:

- ``letor``: the twelve LETOR features (the ``lambdamart`` row);
- ``letor+maxsim``: plus the candidate's MaxSim;
- ``letor+maxsim+set``: plus MaxSim's gap to the best in the set and its rank in the set.

Rank-1 on the answerable validation and test questions, mean over seeds, beside MaxSim
alone and retrieval order. The variant to adopt is chosen on the validation average; the
test figures are reported, never chosen on. Writes
``benchmarks/results/maxsim_features_<profile>.json``.

    nice -n 19 python benchmarks/maxsim_features.py [--profile quick|full] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
LIMITS = {"quick": 500, "full": 3000}
VARIANTS = ("letor", "letor+maxsim", "letor+maxsim+set")
#: the columns each variant adds to the twelve LETOR features
EXTRA = {"letor": (), "letor+maxsim": ("maxsim",), "letor+maxsim+set": ("maxsim", "maxsim_gap", "maxsim_rr")}
_T0 = time.perf_counter()


def stage(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def maxsim_matrix(instances, cache_file: Path, batch: int = 64) -> np.ndarray:
    """(B, K) MaxSim of every candidate (-inf at padding), cached in ``cache_file`` by question."""
    from tqdm.auto import tqdm

    from chunksel.selectors.maxsim import MaxSimSelector

    done: dict[str, list[float]] = json.loads(cache_file.read_text()) if cache_file.is_file() else {}
    todo = [i for i in instances if i.id not in done]
    sel = MaxSimSelector()  # the `maxsim` row itself, so the feature is that row's score
    for start in tqdm(range(0, len(todo), batch), desc=f"maxsim {cache_file.stem}", disable=not todo):
        part = todo[start:start + batch]
        for inst, row in zip(part, sel.score(part), strict=True):
            done[inst.id] = [float(x) for x in row[: len(inst.candidates)]]
        tmp = cache_file.with_suffix(f".{os.getpid()}.part")
        tmp.write_text(json.dumps(done))
        os.replace(tmp, cache_file)  # resumable: every finished batch is kept
    k = max(len(i.candidates) for i in instances)
    out = np.full((len(instances), k), -np.inf)
    for r, inst in enumerate(instances):
        out[r, : len(inst.candidates)] = done[inst.id]
    return out


def variant_features(x: np.ndarray, ms: np.ndarray, mask: np.ndarray, variant: str) -> np.ndarray:
    if variant == "letor":
        return x
    m = np.where(mask, ms, 0.0)[..., None]
    if variant == "letor+maxsim":
        return np.concatenate([x, m], axis=2)
    best = np.where(mask, ms, -np.inf).max(axis=1, keepdims=True)
    gap = np.where(mask, ms - best, 0.0)[..., None]
    rank = np.argsort(np.argsort(-np.where(mask, ms, -np.inf), axis=1, kind="stable"), axis=1)
    return np.concatenate([x, m, gap, (1.0 / (1 + rank))[..., None]], axis=2)


def contested_rows(insts, x: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """LambdaMART's training rows: the contested questions' real candidates, their labels and
    group sizes."""
    idx = [j for j, i in enumerate(insts) if i.contested()]
    y = np.concatenate([insts[j].labels() for j in idx]).astype(np.int32)
    return x[idx][mask[idx]], y, [len(insts[j].candidates) for j in idx]


def rank1(scores: np.ndarray, insts, mask: np.ndarray) -> float:
    hits, n = 0, 0
    for row, inst, m in zip(scores, insts, mask, strict=True):
        lab = inst.labels()
        if lab.any():
            n += 1
            hits += int(lab[int(np.argmax(np.where(m[: len(lab)], row[: len(lab)], -np.inf)))] >= 1)
    return 100.0 * hits / max(n, 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", choices=list(LIMITS), default="quick")
    ap.add_argument("--datasets", nargs="+", default=None)
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from chunksel.build import build_instances
    from chunksel.config import cache_root
    from chunksel.selectors.letor import FEATURE_NAMES, letor_features
    from chunksel.selectors.ltr import LambdaMARTSelector, train_lambdarank
    from chunksel.study.profiles import DATASETS

    defaults = LambdaMARTSelector().get_params()
    report: dict = {"profile": args.profile, "limit": LIMITS[args.profile], "split": "grouped", "k": 5,
                    "seeds": args.seeds, "variants": list(VARIANTS), "datasets": {}}
    folder = cache_root() / "maxsim"
    folder.mkdir(parents=True, exist_ok=True)
    for ds in args.datasets or DATASETS:
        built = build_instances(ds, k=5, index="flat", limit=LIMITS[args.profile], split="grouped", progress=False)
        key = hashlib.sha1(str(built.path).encode()).hexdigest()[:10]
        t0 = time.perf_counter()
        ms_all = maxsim_matrix(built.instances, folder / f"{ds}-{key}.json")
        stage(f"{ds}: MaxSim of {len(built.instances)} questions ({time.perf_counter() - t0:.0f}s)")
        row = {i.id: r for i, r in zip(built.instances, ms_all, strict=True)}
        sp = {s: [i for i in built.instances if i.split == s] for s in ("train", "val", "test")}
        feats = {s: letor_features(v, None) for s, v in sp.items()}
        ms = {s: np.stack([row[i.id] for i in v]) for s, v in sp.items()}
        entry: dict = {"questions": {s: len(v) for s, v in sp.items()},
                       "maxsim": {s: rank1(ms[s], sp[s], feats[s][1]) for s in ("val", "test")},
                       "retrieval": {s: rank1(-np.tile(np.arange(5.0), (len(sp[s]), 1)), sp[s], feats[s][1])
                                     for s in ("val", "test")}}
        for variant in VARIANTS:
            xs = {s: variant_features(feats[s][0], ms[s], feats[s][1], variant) for s in sp}

            tr, va = (contested_rows(sp[s], xs[s], feats[s][1]) for s in ("train", "val"))
            res = {"val": [], "test": []}
            for seed in args.seeds:
                booster = train_lambdarank(*tr, va, n_estimators=defaults["n_estimators"],
                                           learning_rate=defaults["learning_rate"], num_leaves=defaults["num_leaves"],
                                           min_child_samples=defaults["min_child_samples"],
                                           early_stopping_rounds=defaults["early_stopping_rounds"], seed=seed,
                                           feature_names=[*FEATURE_NAMES, *EXTRA[variant]])
                for s in ("val", "test"):
                    m = feats[s][1]
                    sc = np.zeros(m.shape)
                    sc[m] = booster.predict(xs[s][m], num_threads=1)
                    res[s].append(rank1(sc, sp[s], m))
            entry[variant] = {s: float(np.mean(v)) for s, v in res.items()}
            entry[variant]["seeds"] = res
        report["datasets"][ds] = entry
        stage(f"{ds}: " + json.dumps({k: v for k, v in entry.items() if k != "questions"}, default=str)[:400])
    names = ["retrieval", "maxsim", *VARIANTS]
    report["average"] = {n: {s: float(np.mean([e[n][s] for e in report["datasets"].values()]))
                             for s in ("val", "test")} for n in names}
    report["chosen_on_validation"] = max(VARIANTS, key=lambda v: report["average"][v]["val"])
    out = RESULTS / f"maxsim_features_{args.profile}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    stage(f"wrote {out}: " + json.dumps(report["average"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
