"""Do the generator's warm-up features depend on which questions share a batch?

The feature store extracts the questions it is missing in one pass, sorted by prompt
length and cut into batches (:meth:`chunksel.features.store.FeatureStore.extract`), so the
batch a question lands in depends on what the cache already held. Padding is masked, so
the exact values cannot depend on the batch; the float ones can (a different padded
length is a different matrix shape, summed in a different order). This script takes the
first ``--questions`` stored questions of a dataset and extracts them again, in batches
of several sizes, comparing each with the stored rows: bitwise equality, the largest
absolute difference and how many rows differ, for ``h`` and ``r``.

It reads the store the benchmark wrote (run ``chunksel bench`` first) and writes nothing
into it. Writes ``benchmarks/results/feature_batching.json``.

    nice -n 19 python benchmarks/feature_batching.py [--dataset msmarco] [--questions 48]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
from pathlib import Path

import numpy as np

OUT = Path(__file__).parent / "results" / "feature_batching.json"


def compare(stored: np.ndarray, again: np.ndarray) -> dict:
    """Bitwise equality, largest absolute difference and rows differing."""
    diff = np.abs(stored.astype(np.float64) - again.astype(np.float64))
    return {
        "bitwise_equal": bool(np.array_equal(stored, again)),
        "max_abs_diff": float(diff.max()) if diff.size else 0.0,
        "rows_differing": int((diff.max(axis=1) > 0).sum()) if diff.size else 0,
        "rows": int(stored.shape[0]),
    }


def _say(c: dict) -> str:
    if c["bitwise_equal"]:
        return "bitwise equal"
    return f"max |diff| {c['max_abs_diff']:.3g}, {c['rows_differing']} of {c['rows']} rows differ"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="msmarco")
    ap.add_argument("--questions", type=int, default=48)
    ap.add_argument("--batches", type=int, nargs="+", default=[32, 16, 1])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    if args.questions < 1 or any(bs < 1 for bs in args.batches):
        ap.error("--questions and every --batches value must be >= 1")

    from chunksel.threads import set_threads

    set_threads(args.threads)
    from chunksel.build import generator_store
    from chunksel.data.datasets import load_questions
    from chunksel.features.extract import extract_features
    from chunksel.study.fitting import git_commit

    store, model, tokenizer = generator_store(None)
    questions = [q for q in load_questions(args.dataset) if q.id in store][: args.questions]
    if not questions:
        raise SystemExit(f"no stored features for {args.dataset}: run `chunksel bench` first")
    stored = store.lookup([q.id for q in questions])
    runs = []
    for bs in args.batches:
        again = extract_features(model, tokenizer, questions, batch_size=bs, progress=False)
        row = {"batch_size": bs, **{k: compare(stored[k], again[k]) for k in ("h", "r")}}
        runs.append(row)
        print(f"batch {bs:>3}: " + ", ".join(f"{k} {_say(row[k])}" for k in ("h", "r")))
    result = {
        "dataset": args.dataset, "questions": len(questions), "threads": args.threads,
        "commit": git_commit()[:7], "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "runs": runs,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
