"""The quick profile's short cross-encoder recipe, chosen on validation (issue #29, item 2).

`make bench` keeps under 25 minutes cold, so the quick profile cannot train the pooled
recipe of ``crossencoder_pooled.py`` (about 45-75 min on one thread). It trains a short
one instead: MiniLM-L6 (six layers), pointwise BCE, one epoch over at most
``--max-questions`` answerable pooled training questions, each with its positives and its
``--negatives`` top-ranked negatives, 128 word pieces. With so few steps the learning
rate matters; this script fits the recipe for each learning rate given and reports the
pooled validation rank-1 of each (the quick profile's instances, grouped splits) and its
fit time. Test is never read. Writes ``benchmarks/results/crossencoder_quick_recipe.json``.

    nice -n 5 python benchmarks/crossencoder_quick_recipe.py --lrs 3e-5 1e-4 2e-4
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import time
from datetime import datetime, timezone
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

OUT = Path(__file__).resolve().parent / "results" / "crossencoder_quick_recipe.json"
DATASETS = ("triviaqa", "popqa", "msmarco", "nq", "squad2", "hotpotqa")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lrs", type=float, nargs="+", default=[3e-5, 1e-4, 2e-4])
    ap.add_argument("--max-questions", type=int, default=600)
    ap.add_argument("--negatives", type=int, default=1)
    ap.add_argument("--max-length", type=int, default=128)
    ap.add_argument("--limit", type=int, default=500, help="questions a dataset (the quick profile: 500)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    if any(not (lr > 0) for lr in args.lrs):
        ap.error(f"--lrs must be positive, got {args.lrs}")
    for flag in ("max_questions", "max_length", "limit", "threads"):
        if getattr(args, flag) < 1:
            ap.error(f"--{flag.replace('_', '-')} must be at least 1, got {getattr(args, flag)}")
    if args.negatives < 0:
        ap.error(f"--negatives must be at least 0, got {args.negatives}")

    import torch

    from chunksel.build import build_instances
    from chunksel.selectors.crossencoder import CrossEncoderSelector, rank1

    torch.set_num_threads(args.threads)
    load = os.getloadavg()
    train, val = [], []
    for ds in DATASETS:
        insts = build_instances(ds, k=5, limit=args.limit, progress=False, split="grouped").instances
        train += [i for i in insts if i.split == "train"]
        val += [i for i in insts if i.split == "val" and i.answerable()]
    runs = []
    for lr in args.lrs:
        sel = CrossEncoderSelector(layers=6, loss="pointwise", epochs=1, lr=lr, negatives=args.negatives,
                                   max_questions=args.max_questions, max_length=args.max_length, progress=False)
        t0 = time.perf_counter()
        sel.fit(train)  # no validation split: the one epoch is kept, nothing is calibrated
        fit_s = time.perf_counter() - t0
        r1 = rank1(sel.score(val), val)
        runs.append({"lr": lr, "val_rank1": round(r1, 2), "fit_seconds": round(fit_s, 1)})
        print(f"lr {lr:g}: validation rank-1 {r1:.2f} ({fit_s:.0f} s)", flush=True)
    best = max(runs, key=lambda r: (r["val_rank1"], -r["lr"]))
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    result = {
        "benchmark": "crossencoder_quick_recipe", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "commit": commit,
        "recipe": {"layers": 6, "loss": "pointwise", "epochs": 1, "negatives": args.negatives,
                   "max_questions": args.max_questions, "max_length": args.max_length, "limit": args.limit,
                   "split": "grouped", "threads": args.threads, "val_questions": len(val)},
        "runs": runs, "chosen_lr": best["lr"],
        "machine": {"cpus": os.cpu_count(), "load_at_start": [round(x, 2) for x in load],
                    "load_at_end": [round(x, 2) for x in os.getloadavg()], "python": platform.python_version(),
                    "torch": torch.__version__},
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"chosen lr {best['lr']:g} (validation {best['val_rank1']:.2f}); wrote {args.out}")


if __name__ == "__main__":
    main()
