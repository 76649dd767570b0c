"""Does MaxSim tell "the answer is here" from "the topic is here"? Set-level answerability
with and without late-interaction features.

For each dataset (a profile's sample, grouped splits, K = 5 MiniLM candidates) LambdaMART
is trained on the training split (twelve LETOR features, or fifteen with ``late=True``);
a logistic set model is fitted on every validation question (answerable = a positive
among the K), and its AUROC is measured on every test question. Set features:

- ``scores``: the ranker's top score, second score, gap and mean (the calibrator's
  ``logistic`` set model, :func:`chunksel.selectors.calibration_maps.set_features`);
- ``scores+retrieval``: plus the top retrieval score and its gap (``logistic+retrieval``);
- ``scores+maxsim``: plus MaxSim's top, its gap to the second and its mean over the set;
- ``scores+retrieval+maxsim``: both;
- each of the four with the late-interaction ranker (``late``).

The variant to adopt is chosen on the validation AUROC (fitted on validation, so it is
measured by 5-fold cross-validation there); test figures are reported, never chosen on.
Writes ``benchmarks/results/answerability_maxsim_<profile>.json``.

    nice -n 10 python benchmarks/answerability_maxsim.py [--profile full] [--datasets triviaqa nq]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
LIMITS = {"quick": 500, "full": 3000}
FEATURES = ("scores", "scores+retrieval", "scores+maxsim", "scores+retrieval+maxsim")


def set_rows(scores: np.ndarray, retrieval: np.ndarray, maxsim: np.ndarray, variant: str) -> np.ndarray:
    from chunksel.selectors.calibration_maps import set_features

    x = set_features(scores, retrieval if "retrieval" in variant else None)
    if "maxsim" in variant:
        top = np.sort(np.where(np.isfinite(maxsim), maxsim, -np.inf), axis=1)[:, ::-1]
        mean = np.nanmean(np.where(np.isfinite(maxsim), maxsim, np.nan), axis=1)
        x = np.concatenate([x, np.stack([top[:, 0], top[:, 0] - top[:, 1], mean], axis=1)], axis=1)
    return x


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--profile", choices=list(LIMITS), default="full")
    ap.add_argument("--datasets", nargs="+", default=["triviaqa", "nq"])
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import cross_val_predict
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    from chunksel.build import build_instances
    from chunksel.eval.calibration import auroc
    from chunksel.selectors import make_selector
    from chunksel.selectors.late_features import maxsim_scores

    report: dict = {"profile": args.profile, "limit": LIMITS[args.profile], "split": "grouped", "k": 5,
                    "set_model": "logistic regression (C = 1) on standardised set features", "datasets": {}}
    for ds in args.datasets:
        built = build_instances(ds, k=5, index="flat", limit=LIMITS[args.profile], split="grouped", progress=False)
        sp = {s: [i for i in built.instances if i.split == s] for s in ("train", "val", "test")}
        entry: dict = {"questions": {s: len(v) for s, v in sp.items()},
                       "answerable": {s: float(np.mean([i.labels().any() for i in sp[s]])) for s in ("val", "test")}}
        for late in (False, True):
            sel = make_selector("lambdamart", late=late, progress=False).fit(sp["train"], None, sp["val"])
            data = {}
            for s in ("val", "test"):
                insts = sp[s]
                sc = np.asarray(sel.score(insts), dtype=np.float64)
                ret = np.full(sc.shape, -np.inf)
                for r, inst in enumerate(insts):
                    sc[r, len(inst.candidates):] = -np.inf
                    ret[r, : len(inst.candidates)] = [c.score for c in inst.candidates]
                y = np.array([int(i.labels().any()) for i in insts])
                data[s] = (sc, ret, maxsim_scores(insts), y)
            for variant in FEATURES:
                xv = set_rows(*data["val"][:3], variant)
                xt = set_rows(*data["test"][:3], variant)
                model = make_pipeline(StandardScaler(), LogisticRegression(C=1.0))
                cv = cross_val_predict(model, xv, data["val"][3], cv=5, method="predict_proba")[:, 1]
                model.fit(xv, data["val"][3])
                name = f"{variant} ({'late' if late else 'letor'} ranker)"
                entry[name] = {"val_cv": auroc(data["val"][3], cv),
                               "test": auroc(data["test"][3], model.predict_proba(xt)[:, 1])}
                print(f"{ds}: {name}: validation (5-fold) {entry[name]['val_cv']:.3f}, test {entry[name]['test']:.3f}",
                      flush=True)
        report["datasets"][ds] = entry
    names = [k for k in next(iter(report["datasets"].values())) if k not in ("questions", "answerable")]
    report["average"] = {n: {s: float(np.mean([e[n][s] for e in report["datasets"].values()]))
                             for s in ("val_cv", "test")} for n in names}
    report["chosen_on_validation"] = max(names, key=lambda n: report["average"][n]["val_cv"])
    out = RESULTS / f"answerability_maxsim_{args.profile}.json"
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}; chosen on validation: {report['chosen_on_validation']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
