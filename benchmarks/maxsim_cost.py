"""What late interaction costs: the bytes a chunk's stored token vectors take, and the
``maxsim`` selector's cold latency from raw text and with the chunks' vectors given.

Writes ``benchmarks/results/maxsim_cost.json`` and prints a table.

    python benchmarks/maxsim_cost.py [--calls 200] [--dataset nq]

- Questions: the test and validation questions of a dataset's full-profile sample (grouped
  splits, K = 5 MiniLM candidates). Their candidates' token vectors are stored by the bulk
  job (:func:`chunksel.bulk.jobs.encode_tokens`, int8 codes, one Ray worker) before the
  clock starts; ``bytes_per_chunk`` is the stored size (codes and offsets) over those
  chunks, beside the float16 and float32 sizes of the same tokens.
- Fidelity: rank-1 of the int8 codes against float16 vectors on the same questions
  (MaxSim's top-1 agreement and largest score difference).
- Latency, one thread, batch 1, every call a new question and its own chunks (10
  warm-up calls on other questions first), ``MaxSimSelector.score``:
  - ``raw text``: the question and the 5 chunks encoded by MiniLM;
  - ``vectors given``: the question encoded, the chunks' codes read from the shards
    (memory-mapped, the page cache cold for each chunk only the first time it is read);
  - ``MaxSim alone``: the question's vectors given too (the arithmetic);
  - ``retriever's question pass`` and ``same pass with token vectors``
    (``Encoder.encode`` against ``Encoder.encode_with_tokens`` on the question): what an
    application that embeds the question for retrieval pays for its token vectors too.
"""

from __future__ import annotations

import os

for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
    os.environ.setdefault(var, "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "maxsim_cost.json"
WARMUP = 10


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def timed(fn, items) -> list[float]:
    out = []
    for it in items:
        t0 = time.perf_counter()
        fn(it)
        out.append((time.perf_counter() - t0) * 1000.0)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="nq")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--limit", type=int, default=3000, help="questions sampled (the full profile's 3000)")
    args = ap.parse_args(argv)
    import torch

    torch.set_num_threads(1)
    from chunksel.build import build_instances
    from chunksel.bulk.jobs import encode_tokens, tokens_dir
    from chunksel.data.corpus import Corpus
    from chunksel.data.datasets import get_spec
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.tokens import TokenShards, maxsim, token_vectors, unpack
    from chunksel.selectors import make_selector

    built = build_instances(args.dataset, k=5, index="flat", limit=args.limit, split="grouped", progress=False)
    insts = [i for i in built.instances if i.split in ("test", "val")][: args.calls + 3 * WARMUP]
    if len(insts) < args.calls + 3 * WARMUP:
        raise SystemExit(f"{args.dataset}: {len(insts)} questions, fewer than --calls + {3 * WARMUP}")
    corpus = Corpus.load(get_spec(args.dataset).corpus, progress=False)
    encoder = Encoder()
    ids = sorted({c.id for i in insts for c in i.candidates})
    t0 = time.perf_counter()
    job = encode_tokens(corpus, encoder, ids, workers=1, progress=False)
    job_s = time.perf_counter() - t0
    shards = TokenShards(tokens_dir(corpus, encoder))
    stored = shards.get(ids)
    n_tok = np.array([len(c) for c in stored])

    # fidelity of the stored codes against float16 vectors
    raw = make_selector("maxsim")
    agree, worst = 0, 0.0
    for inst in insts:
        q = token_vectors(raw.encoder(), [inst.question.text])[0]
        f16 = token_vectors(raw.encoder(), [raw.chunk_text(c) for c in inst.candidates])
        codes = shards.get([c.id for c in inst.candidates])
        a = np.array([maxsim(q, v) for v in f16])
        b = np.array([maxsim(q, v) for v in codes])
        agree += int(np.argmax(a) == np.argmax(b))
        worst = max(worst, float(np.abs(a - b).max()))

    given = make_selector("maxsim", tokens=str(tokens_dir(corpus, encoder)))
    given.encoder(), raw.encoder()
    calls = insts[3 * WARMUP:]
    qvecs = {i.id: token_vectors(raw.encoder(), [i.question.text])[0] for i in calls}
    rows = {}
    for name, fn, warm in (
        ("raw text", lambda i: raw.score([i]), insts[:WARMUP]),
        ("vectors given", lambda i: given.score([i]), insts[WARMUP:2 * WARMUP]),
        ("MaxSim alone", lambda i: [maxsim(qvecs[i.id], unpack(c)) for c in shards.get([x.id for x in i.candidates])],
         insts[2 * WARMUP:3 * WARMUP]),
        ("retriever's question pass", lambda i: encoder.encode([i.question.text], progress=False), insts[:WARMUP]),
        ("same pass with token vectors", lambda i: encoder.encode_with_tokens([i.question.text]), insts[:WARMUP]),
    ):
        if name == "MaxSim alone":
            for i in warm:
                qvecs[i.id] = token_vectors(raw.encoder(), [i.question.text])[0]
        timed(fn, warm)
        ms = timed(fn, calls)
        rows[name] = {"p50_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95)), "calls": len(ms)}
    out = {
        "commit": commit(), "dataset": args.dataset, "corpus": corpus.name, "k": 5, "threads": 1,
        "machine": f"{platform.machine()}, {os.cpu_count()} cores", "load_avg": os.getloadavg()[0],
        "chunks": len(ids), "job": {"seconds": job_s, "computed_shards": job.computed},
        "tokens_per_chunk": {"mean": float(n_tok.mean()), "median": float(np.median(n_tok)), "max": int(n_tok.max())},
        "bytes_per_chunk": {"int8 (stored)": shards.bytes_per_chunk, "float16": float(n_tok.mean() * 384 * 2),
                            "float32": float(n_tok.mean() * 384 * 4)},
        "fidelity": {"questions": len(insts), "top1_agreement": agree / len(insts), "max_abs_score_diff": worst},
        "latency": rows,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(out, indent=2) + "\n")
    print(f"{args.dataset}: {len(ids)} chunks, {n_tok.mean():.1f} tokens a chunk, "
          f"{shards.bytes_per_chunk / 1024:.1f} KiB stored a chunk (float16 {n_tok.mean() * 768 / 1024:.1f} KiB); "
          f"int8 top-1 agreement {agree / len(insts):.3f}, largest score difference {worst:.4f}")
    print("| path | p50 ms | p95 ms |\n|---|---|---|")
    for name, r in rows.items():
        print(f"| {name} | {r['p50_ms']:.2f} | {r['p95_ms']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
