"""Labelling throughput of the local SmolLM2 judge: (question, chunk) pairs per second.

Judges a fixed sample of real pairs (the first ``--pairs`` candidates of the TriviaQA
``limit=500`` store's questions with the smallest sha256 of their id) with
:func:`chunksel.labels.judge.label_instances`, in a fresh temporary response cache each
time (so every pair is computed), for each batch size and torch thread count asked.
Reports pairs/s over wall time (tokenising, padding and forward passes; the model is
loaded and warmed before timing) and the mean prompt length. Writes
``benchmarks/results/judge_throughput.json``.

    nice -n 19 python benchmarks/judge_throughput.py [--pairs 24] [--batch-sizes 1 4 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "judge_throughput.json"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="triviaqa")
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 4, 8])
    ap.add_argument("--threads", type=int, nargs="+", default=[1])
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch

    from chunksel.build import build_instances
    from chunksel.labels.judge import judge_prompt, label_instances
    from chunksel.llm.local import LocalBackend

    built = build_instances(args.dataset, k=5, index="flat", limit=500, progress=False)
    insts = sorted(built.instances, key=lambda i: hashlib.sha256(i.id.encode()).hexdigest())
    insts = insts[: -(-args.pairs // 5)]
    backend = LocalBackend(batch_size=1)
    tokens = [len(backend.encode(judge_prompt(i.question.text, c.text))) for i in insts for c in i.candidates]
    backend.choose("Is this a warm-up? Answer Yes or No.", ["Yes", "No"])
    runs = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for bs in args.batch_sizes:
            backend.batch_size = bs
            with tempfile.TemporaryDirectory() as tmp:
                t0 = time.perf_counter()
                res = label_instances(insts, backend, batch_size=bs, cache=tmp, fsync=False, progress=False)
                wall = time.perf_counter() - t0
            n = len(res.rows)
            runs.append({"threads": threads, "batch_size": bs, "pairs": n, "seconds": round(wall, 2),
                         "pairs_per_s": round(n / wall, 3)})
            print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    out = {
        "judge": f"local/{backend.model_id}", "dataset": args.dataset,
        "mean_prompt_tokens": round(sum(tokens) / len(tokens), 1), "runs": runs,
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "nice": os.nice(0),
                    "load_avg_1m_at_end": round(os.getloadavg()[0], 2),
                    "note": "2-core machine shared with another long benchmark: the figures are a "
                            "lower bound of what an idle machine gives"},
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
