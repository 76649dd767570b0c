"""A chunk probability that follows the chunk: the calibrator's chunk maps compared on
validation.

For each benchmark dataset (the full profile's sample, grouped splits, K = 5) LambdaMART
(the ``lambdamart`` row's settings, seed 0) is fitted on the training split and scores the
validation split; there, out of fold (5 folds by set, the set model's probabilities
themselves out of fold), each chunk map of :mod:`chunksel.selectors.calibration_maps` is
fitted and scored:

- ``isotonic`` / ``platt``: a monotone map of the chunk's score alone;
- ``set_rank``: P(set) x P(evidence at the chunk's rank | answerable), every chunk at a
  rank the same share of its set's probability (a threshold acts as a rank cutoff);
- ``chunk_logistic``: a logistic model of the chunk's score, its gaps to the set's top and
  mean, its reciprocal rank and the set's log-odds.

Per map: Brier score and ECE (15 equal-mass bins) of the chunk probabilities, and the mean
number of chunks a threshold keeps per set at the evidence recall of a fixed k = 2 (fewer
is better: the same recall for less context). ``chosen_before`` is the map the
calibrator picked without ``chunk_logistic`` (lowest out-of-fold Brier of the others),
``chosen`` the one it picks now (``fit_calibrator``'s record). Validation only: no test
figure is computed. Writes ``benchmarks/results/chunk_calibration.json``.

    nice -n 19 python benchmarks/chunk_calibration.py
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "chunk_calibration.json"
MAPS = ("isotonic", "platt", "set_rank", "chunk_logistic")


def kept_at_k2_recall(p: np.ndarray, labels: np.ndarray, scores: np.ndarray) -> float:
    """Mean chunks per set kept by the highest threshold on ``p`` whose evidence recall
    reaches that of the top two by score."""
    real = np.isfinite(p)
    order = np.argsort(-np.where(np.isfinite(scores), scores, -np.inf), axis=1, kind="stable")
    top2 = np.zeros_like(real)
    np.put_along_axis(top2, order[:, :2], True, axis=1)
    ans = labels.any(axis=1)

    def recall(kept: np.ndarray) -> float:
        return float((kept & (labels > 0)).any(axis=1)[ans].mean())

    target = recall(top2 & real)
    for t in np.unique(p[real])[::-1]:
        kept = real & (p >= t)
        if recall(kept) >= target - 1e-12:
            return float(kept.sum(axis=1).mean())
    return float(real.sum(axis=1).mean())


def oof_maps(scores: np.ndarray, labels: np.ndarray, seed: int = 0) -> dict[str, np.ndarray]:
    from chunksel.selectors.calibration_maps import (
        fit_chunk_logistic,
        fit_score_map,
        fit_set_model,
        rank_rates,
        score_ranks,
    )

    real = np.isfinite(scores)
    ans = labels.any(axis=1).astype(np.float64)
    fold = np.random.default_rng(seed).permutation(len(scores)) % 5
    set_oof = np.full(len(scores), np.nan)
    for f in range(5):
        tr, te = fold != f, fold == f
        set_oof[te] = fit_set_model(scores[tr], ans[tr], "logistic")(scores[te], None)
    out = {m: np.full(scores.shape, np.nan) for m in MAPS}
    for f in range(5):
        tr, te = fold != f, fold == f
        for m in ("isotonic", "platt"):
            mp = fit_score_map(scores[tr][real[tr]], labels[tr][real[tr]], m)
            out[m][te] = np.where(real[te], mp(np.where(real[te], scores[te], 0.0)), np.nan)
        q = rank_rates(scores[tr], labels[tr])
        out["set_rank"][te] = np.where(real[te], set_oof[te][:, None] * q[np.minimum(score_ranks(scores[te]),
                                                                                      len(q) - 1)], np.nan)
        out["chunk_logistic"][te] = fit_chunk_logistic(scores[tr], labels[tr], set_oof[tr]).of_sets(
            scores[te], set_oof[te])
    return out


def main() -> int:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    warnings.filterwarnings("ignore", category=UserWarning)
    from chunksel.build import build_instances
    from chunksel.eval.calibration import brier, ece
    from chunksel.selectors import make_selector
    from chunksel.selectors.calibration import calibration_scores, fit_calibrator
    from chunksel.study.profiles import DATASETS
    from chunksel.types import label_matrix

    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                            cwd=Path(__file__).resolve().parent).stdout.strip()
    report: dict = {"benchmark": "chunk_calibration", "commit": commit, "selector": "lambdamart (seed 0)",
                    "limit": 3000, "k": 5, "split": "grouped", "datasets": {}}
    for ds in DATASETS:
        insts = build_instances(ds, k=5, limit=3000, split="grouped", progress=False).instances
        train, val = ([i for i in insts if i.split == s] for s in ("train", "val"))
        sel = make_selector("lambdamart", progress=False).fit(train, None, val)
        scores = np.asarray(calibration_scores(sel, val), dtype=np.float64)
        labels = label_matrix(val, k=scores.shape[1]).astype(np.int8)
        real = np.isfinite(scores)
        maps = oof_maps(scores, labels)
        entry = {"sets": len(val), "chunks": int(real.sum()), "maps": {}}
        for m, p in maps.items():
            ok = np.isfinite(p) & real
            entry["maps"][m] = {"brier": brier(labels[ok], p[ok]), "ece": ece(labels[ok], p[ok]),
                                "kept_at_k2_recall": kept_at_k2_recall(np.where(ok, p, np.nan), labels, scores)}
        cal = fit_calibrator(scores, labels)
        common = cal.info.get("chunk_brier_oof_common") or {}
        before = {m: v for m, v in common.items() if m != "chunk_logistic"} or cal.info["chunk_brier_oof"]
        entry["chosen"] = cal.chunk.method
        entry["chosen_before"] = min(before, key=before.get)
        entry["calibrator_brier_oof"] = cal.info["chunk_brier_oof"]
        report["datasets"][ds] = entry
        print(f"{ds}: chosen {entry['chosen']} (before {entry['chosen_before']}); "
              + "; ".join(f"{m} brier {v['brier']:.4f} ece {v['ece']:.3f} kept {v['kept_at_k2_recall']:.2f}"
                          for m, v in entry["maps"].items()), file=sys.stderr, flush=True)
    for key in ("chosen_before", "chosen"):
        picks = {ds: e["maps"][e[key]] for ds, e in report["datasets"].items()}
        report[f"average_{key}"] = {f: float(np.mean([v[f] for v in picks.values()]))
                                    for f in ("brier", "ece", "kept_at_k2_recall")}
    RESULTS.write_text(json.dumps(report, indent=2) + "\n")
    print(f"before {report['average_chosen_before']}\nnow    {report['average_chosen']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
