"""The MaxSim arithmetic alone, from stored int8 codes: :func:`chunksel.retrieval.tokens.maxsim_many`
against the way it was computed before (each chunk unpacked to float32 by ``unpack``, then
the question's vectors times the chunk's transposed), at K = 5, 20 and 100.

Writes ``benchmarks/results/maxsim_speed.json`` and prints a table.

    python benchmarks/maxsim_speed.py [--questions 200]

Questions: NQ test questions of a grouped sample with their MiniLM top-100 Wikipedia
passages (as ``benchmarks/pretrained_latency.py``); the chunks' codes come from the bulk
job's shards and the questions' token vectors from the retriever's own pass, all before the
clock starts. One thread, batch 1, every call a new question; p50 / p95 per call over the
questions, both ways timed alternately on each question. Fidelity: the largest absolute
difference of the two ways' values and their rank-1 agreement at each K.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pretrained_latency import KS, _instances, _token_store, short_commit, write_result  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "maxsim_speed.json"


def before(question: np.ndarray, codes: list[np.ndarray]) -> np.ndarray:
    """The earlier arithmetic: every chunk unpacked, ``q @ c.T``, max over the chunk, mean."""
    from chunksel.retrieval.tokens import unpack

    q = question.astype(np.float32)
    return np.array([float((q @ unpack(c).T).max(axis=1).mean()) for c in codes])


def main(argv=None) -> int:
    from chunksel.retrieval.tokens import maxsim_many

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=200)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    insts = _instances(args.questions)[10:]
    tokens = _token_store(insts)
    given = [tokens(inst, max(KS)) for inst in insts]
    rows = []
    for k in KS:
        times: dict[str, list[float]] = {"before": [], "maxsim_many": []}
        diff, same = 0.0, 0
        for q, codes in given:
            got = {}
            for name, fn in (("before", before), ("maxsim_many", maxsim_many)):
                t = time.perf_counter()
                got[name] = fn(q, codes[:k])
                times[name].append((time.perf_counter() - t) * 1e3)
            diff = max(diff, float(np.abs(got["before"] - got["maxsim_many"]).max()))
            same += int(np.argmax(got["before"]) == np.argmax(got["maxsim_many"]))
        row = {"k": k, "questions": len(given), "max_abs_difference": diff, "rank1_agreement": same / len(given)}
        for name, ts in times.items():
            row[f"{name}_p50_ms"] = float(np.median(ts))
            row[f"{name}_p95_ms"] = float(np.percentile(ts, 95))
        row["speedup_p50"] = row["before_p50_ms"] / row["maxsim_many_p50_ms"]
        rows.append(row)
        print(f"K={k:>3}  before {row['before_p50_ms']:.3f} ms  maxsim_many {row['maxsim_many_p50_ms']:.3f} ms  "
              f"x{row['speedup_p50']:.2f}  max |diff| {diff:.1e}  rank-1 same {same}/{len(given)}")
    load = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    return write_result(args.out, {
        "benchmark": "maxsim_speed", "command": " ".join(["python", *sys.argv]), "code": short_commit(),
        "machine": {"python": platform.python_version(), "cpu_count": os.cpu_count(), "uptime": load},
        "rows": rows})


if __name__ == "__main__":
    raise SystemExit(main())
