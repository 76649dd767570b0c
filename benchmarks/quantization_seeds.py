"""The int8 accuracy change over training seeds, from ``quantization.py``'s results.

One seed's change is noisy: the per-dataset models have many near-ties, and 1-3% of picks
move under 8-bit noise, so a seed's figure swings by several tenths of a point. This
script reads every ``quantization*.json`` in ``benchmarks/results/`` (one per seed:
``python benchmarks/quantization.py --seed N --out benchmarks/results/quantization_seedN.json``)
and reports, per model and int8 variant, the change from fp32 for each seed, their mean
and standard deviation, the mean share of unchanged picks, and a 95% interval for the
mean (Student t over seeds). Writes ``benchmarks/results/quantization_seeds.json``.

Usage: ``python benchmarks/quantization_seeds.py [--results DIR]``
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
from scipy import stats

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("per_dataset_models", "pooled_model")


def seed_of(run: dict) -> int:
    """The training seed a run used (``--seed`` in its command; 0 when absent)."""
    words = run.get("command", "").split()
    return int(words[words.index("--seed") + 1]) if "--seed" in words else 0


def summarise(runs: list[dict]) -> dict:
    runs = sorted(runs, key=seed_of)
    seeds = [seed_of(r) for r in runs]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"two result files share a seed: {seeds}")
    out: dict = {"seeds": seeds, "models": {}}
    for model in MODELS:
        overall = [r[model]["all"] for r in runs]
        variants = [v for v in overall[0] if v != "fp32"]
        rows = {"fp32_rank1": [o["fp32"]["rank1"] for o in overall]}
        for v in variants:
            change = np.array([-o[v]["drop_points"] for o in overall]) + 0.0  # variant - fp32 (no -0.0)
            same = np.array([o[v]["same_pick"] for o in overall])
            row = {
                "change_points": change.round(3).tolist(),
                "mean_change_points": round(float(change.mean()), 3),
                "sd_points": round(float(change.std(ddof=1)), 3) if len(change) > 1 else None,
                "mean_same_pick": round(float(same.mean()), 4),
            }
            if len(change) > 1:
                half = stats.t.ppf(0.975, len(change) - 1) * change.std(ddof=1) / np.sqrt(len(change))
                row["mean_ci95_points"] = [round(float(change.mean() - half), 3), round(float(change.mean() + half), 3)]
            rows[v] = row
        out["models"][model] = rows
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(RESULTS))
    args = ap.parse_args(argv)
    folder = Path(args.results)
    files = sorted(p for p in folder.glob("quantization*.json") if p.name != "quantization_seeds.json")
    if not files:
        print(f"no quantization*.json in {folder}: run benchmarks/quantization.py first", file=sys.stderr)
        return 1
    runs = [json.loads(p.read_text()) for p in files]
    out = {"benchmark": "quantization_seeds", "files": [p.name for p in files], **summarise(runs),
           "notes": ["change = int8 variant - fp32 rank-1 over answerable test instances, in points "
                     "(negative: int8 loses); mean_ci95_points: Student t interval of the mean over seeds"]}
    (folder / "quantization_seeds.json").write_text(json.dumps(out, indent=2) + "\n")
    print(f"seeds {out['seeds']}")
    for model, rows in out["models"].items():
        print(f"\n{model}: fp32 rank-1 {', '.join(f'{x:.2f}' for x in rows['fp32_rank1'])}")
        print(f"{'variant':<10}{'change per seed':<44}{'mean':>7}{'sd':>7}  {'95% CI of mean':<18}{'same pick':>10}")
        for v, row in rows.items():
            if v == "fp32_rank1":
                continue
            per = ", ".join(f"{c:+.2f}" for c in row["change_points"])
            ci = row.get("mean_ci95_points")
            ci_s = f"[{ci[0]:+.2f}, {ci[1]:+.2f}]" if ci else "-"
            sd = f"{row['sd_points']:.2f}" if row["sd_points"] is not None else "-"
            print(f"{v:<10}{per:<44}{row['mean_change_points']:>+7.2f}{sd:>7}  {ci_s:<18}{100 * row['mean_same_pick']:>9.1f}%")
    print(f"\nwrote {folder / 'quantization_seeds.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
