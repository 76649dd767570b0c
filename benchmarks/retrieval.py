"""Retrieval benchmark: MiniLM encoding speed, FAISS build cost, query latency, IVF-PQ recall.

On the wiki-w100 corpus (193,456 passages) it measures, in one run:

- corpus encoding throughput (passages/s) on a random sample of passages with the real
  all-MiniLM-L6-v2 (batch 64), and the sample's cosine to the shipped embeddings;
- question encoding throughput (questions/s, batched) and single-question latency on real
  TriviaQA dev questions;
- build time and memory of the exact (Flat IP) and IVF-PQ indexes over all 193k shipped
  embeddings (RSS growth, and peak RSS growth from ``/proc/self/status`` VmHWM after
  resetting it through ``/proc/self/clear_refs``);
- query latency p50/p95 at batch 1 with one thread, Flat vs IVF-PQ, and the time of one
  batch of 256 exact queries through FAISS vs :meth:`Index.search`'s matmul + top-k path;
- IVF-PQ recall@1/@5 against exact search (overlap of the top-k row sets);
- the same for IVF-PQ with exact re-scoring of its top 100 (``Retriever(rerank=100)``);
- end-to-end ``Retriever.retrieve`` throughput (encode + search + candidates), k = 5.

Writes ``benchmarks/results/retrieval.json`` and prints a table.

    python benchmarks/retrieval.py [--threads 1] [--seed 0] [--n-queries 300]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

from chunksel.config import data_root
from chunksel.data.corpus import Corpus
from chunksel.features.generation import reset_peak_rss
from chunksel.retrieval.embeddings import corpus_embeddings
from chunksel.retrieval.encoder import Encoder
from chunksel.retrieval.index import build_index, effective_nlist
from chunksel.retrieval.retriever import Retriever
from chunksel.threads import set_threads
from chunksel.types import Question

RESULTS = Path(__file__).resolve().parent / "results" / "retrieval.json"
_T0 = time.perf_counter()


def stage(msg: str) -> None:
    """A timestamped progress line on stderr."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def proc_status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (VmRSS, VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure_build(emb: np.ndarray, **kwargs) -> tuple[object, dict]:
    """Build an index, returning it with wall time and RSS growth / peak RSS growth (MiB)."""
    import ctypes
    import gc

    import faiss

    gc.collect()
    try:  # hand freed heap pages back to the OS so RSS growth reflects the new index
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:  # pragma: no cover - not glibc
        pass
    peak_reset = reset_peak_rss()
    rss0 = proc_status_kb("VmRSS")
    t0 = time.perf_counter()
    index = build_index(emb, progress=False, **kwargs)
    seconds = time.perf_counter() - t0
    rss1, hwm = proc_status_kb("VmRSS"), proc_status_kb("VmHWM")
    return index, {
        "build_s": round(seconds, 3),
        "rss_delta_mib": round((rss1 - rss0) / 1024, 1),
        "peak_rss_delta_mib": round((hwm - rss0) / 1024, 1) if peak_reset else None,
        "peak_reset_ok": peak_reset,
        "index_size_mib": round(faiss.serialize_index(index.index).nbytes / 2**20, 1),
    }


def load_trivia_questions(root: Path, n: int, seed: int) -> list[Question]:
    """``n`` random TriviaQA dev questions (DPR topics file, CSV-style quoting)."""
    path = root / "qa" / "triviaqa" / "topics.dpr.trivia.dev.txt"
    with open(path, encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.reader(fh, delimiter="\t") if r and r[0].strip()]
    pick = np.random.default_rng(seed).choice(len(rows), size=min(n, len(rows)), replace=False)
    return [Question(f"triviaqa:dev:{i + 1}", rows[i][0], dataset="triviaqa") for i in pick]


def latency_ms(fn, n: int, warmup: int = 10) -> dict:
    """p50/p95/mean of ``fn(i)`` over ``i < n`` in milliseconds (after ``warmup`` calls)."""
    for i in range(min(warmup, n)):
        fn(i)
    times = np.empty(n)
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times[i] = time.perf_counter() - t0
    times *= 1000.0
    return {
        "p50_ms": round(float(np.percentile(times, 50)), 3),
        "p95_ms": round(float(np.percentile(times, 95)), 3),
        "mean_ms": round(float(times.mean()), 3),
        "n": n,
    }


def overlap_recall(approx: np.ndarray, exact: np.ndarray, k: int) -> float:
    """Mean |top-k approx ∩ top-k exact| / k over queries."""
    return float(
        np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(approx, exact, strict=True)])
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--corpus", default="wiki-w100")
    ap.add_argument("--threads", type=int, default=1, help="torch/FAISS threads (default 1)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--n-encode", type=int, default=512, help="passages for encoding speed")
    ap.add_argument("--encode-batch", type=int, default=64)
    ap.add_argument("--n-queries", type=int, default=300, help="TriviaQA dev questions")
    ap.add_argument("--k", type=int, default=5)
    ap.add_argument("--nlist", type=int, default=8192, help="requested lists (scaled to N)")
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--nbits", type=int, default=8)
    ap.add_argument("--nprobe", type=int, default=32)
    ap.add_argument("--train-sample", type=int, default=500_000)
    ap.add_argument("--rerank", type=int, default=100, help="exact re-scoring depth, IVF-PQ")
    ap.add_argument("--out", type=Path, default=RESULTS)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    set_threads(args.threads)
    import faiss
    import torch

    progress = not args.quiet
    root = data_root()
    res: dict = {
        "benchmark": "retrieval",
        "corpus": args.corpus,
        "settings": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
        "env": {
            "python": platform.python_version(),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "torch_threads": torch.get_num_threads(),
            "faiss_threads": faiss.omp_get_max_threads(),
            "faiss": faiss.__version__,
            "load_avg_start": os.getloadavg(),
        },
    }

    stage("loading corpus")
    t0 = time.perf_counter()
    corpus = Corpus.load(args.corpus, progress=progress)
    res["corpus_load_s"] = round(time.perf_counter() - t0, 2)
    res["n_passages"] = len(corpus)
    encoder = Encoder(batch_size=args.encode_batch)
    encoder.encode(["warm up the encoder"], progress=False)

    stage("embeddings")
    # corpus embeddings (shipped file, decoded and sample-checked)
    t0 = time.perf_counter()
    emb = corpus_embeddings(corpus, encoder, progress=progress)
    res["embeddings_load_s"] = round(time.perf_counter() - t0, 2)

    stage("passage encoding")
    # 1. corpus encoding throughput on a random passage sample
    rng = np.random.default_rng(args.seed)
    rows = np.sort(rng.choice(len(corpus), size=min(args.n_encode, len(corpus)), replace=False))
    texts = [corpus.encoder_input(int(r)) for r in rows]
    t0 = time.perf_counter()
    fresh = encoder.encode(texts, progress=progress, batch_size=args.encode_batch)
    secs = time.perf_counter() - t0
    cos = np.sum(fresh * emb[rows], axis=1)
    tok = encoder.model.tokenizer(texts, truncation=True, max_length=encoder.max_seq_length)
    res["passage_encoding"] = {
        "n": len(texts),
        "batch_size": args.encode_batch,
        "seconds": round(secs, 2),
        "passages_per_s": round(len(texts) / secs, 2),
        "mean_tokens": round(float(np.mean([len(t) for t in tok["input_ids"]])), 1),
        "cosine_to_shipped_min": round(float(cos.min()), 6),
        "full_corpus_hours_estimate": round(len(corpus) / (len(texts) / secs) / 3600, 2),
    }

    stage("questions")
    # 2. questions: throughput batched, latency one at a time
    questions = load_trivia_questions(root, args.n_queries, args.seed)
    t0 = time.perf_counter()
    q_emb = encoder.encode_questions(questions, progress=False)
    secs = time.perf_counter() - t0
    q_texts = [q.text for q in questions]
    res["question_encoding"] = {
        "n": len(questions),
        "batch_size": encoder.batch_size,
        "questions_per_s": round(len(questions) / secs, 1),
        "single_question": latency_ms(
            lambda i: encoder.encode([q_texts[i]], progress=False), min(100, len(q_texts))
        ),
    }

    stage("flat + IVF-PQ builds")
    # 3. index builds on the full corpus embeddings
    flat, flat_cost = measure_build(emb, kind="flat")
    ivf, ivf_cost = measure_build(
        emb,
        kind="ivfpq",
        nlist=args.nlist,
        m=args.m,
        nbits=args.nbits,
        nprobe=args.nprobe,
        train_sample=args.train_sample,
        seed=args.seed,
    )
    s = ivf.settings
    res["flat"] = {"settings": flat.settings, **flat_cost}
    res["ivfpq"] = {
        "settings": s,
        "nlist_rule": f"min(nlist, pow2_floor(N // 39)) = {effective_nlist(len(corpus), args.nlist)}",
        **ivf_cost,
    }

    stage("latency")
    # 4. query latency at batch 1, one thread
    faiss.omp_set_num_threads(1)
    res["flat"]["query_latency_1thread"] = latency_ms(
        lambda i: flat.search(q_emb[i : i + 1], args.k), len(q_emb)
    )
    res["ivfpq"]["query_latency_1thread"] = latency_ms(
        lambda i: ivf.search(q_emb[i : i + 1], args.k), len(q_emb)
    )
    rr = f"ivfpq_rerank{args.rerank}"
    rr_retriever = Retriever(corpus, emb, ivf, encoder, rerank=args.rerank)
    res[rr] = {
        "settings": {**s, "rerank": args.rerank},
        "query_latency_1thread": latency_ms(
            lambda i: rr_retriever.search(q_emb[i : i + 1], args.k), len(q_emb)
        ),
    }
    # batched exact search: FAISS IndexFlatIP.search vs Index.search's matmul + top-k path
    nb = min(256, len(q_emb))
    t0 = time.perf_counter()
    faiss_rows = flat.index.search(q_emb[:nb], args.k)[1]
    t_faiss = time.perf_counter() - t0
    t0 = time.perf_counter()
    mm_rows = flat.search(q_emb[:nb], args.k)[1]
    t_mm = time.perf_counter() - t0
    res["flat"]["batched_search_1thread"] = {
        "n_queries": nb,
        "faiss_s": round(t_faiss, 3),
        "matmul_topk_s": round(t_mm, 3),
        "speedup": round(t_faiss / t_mm, 1),
        "same_rows": bool(np.array_equal(faiss_rows, mm_rows)),
    }
    faiss.omp_set_num_threads(args.threads)

    stage("recall")
    # 5. IVF-PQ recall against exact search
    _, exact_rows = flat.search(q_emb, args.k)
    _, ivf_rows = ivf.search(q_emb, args.k)
    res["ivfpq"]["recall_at_1_vs_exact"] = round(overlap_recall(ivf_rows, exact_rows, 1), 4)
    res["ivfpq"][f"recall_at_{args.k}_vs_exact"] = round(
        overlap_recall(ivf_rows, exact_rows, args.k), 4
    )
    _, rr_rows = rr_retriever.search(q_emb, args.k)
    res[rr]["recall_at_1_vs_exact"] = round(overlap_recall(rr_rows, exact_rows, 1), 4)
    res[rr][f"recall_at_{args.k}_vs_exact"] = round(overlap_recall(rr_rows, exact_rows, args.k), 4)

    stage("retrieve throughput")
    # 6. end-to-end Retriever.retrieve (encode + search + candidates)
    for name, index, depth in (("flat", flat, 0), ("ivfpq", ivf, 0), (rr, ivf, args.rerank)):
        retriever = Retriever(corpus, emb, index, encoder, rerank=depth)
        t0 = time.perf_counter()
        out = retriever.retrieve(questions, k=args.k, progress=False)
        secs = time.perf_counter() - t0
        assert len(out) == len(questions) and all(len(c) == args.k for c in out)
        res[name]["retrieve_questions_per_s"] = round(len(questions) / secs, 1)
    res["env"]["load_avg_end"] = os.getloadavg()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(res, indent=2) + "\n")
    print_table(res, args.k, rr)
    print(f"wrote {args.out}")
    return 0


def print_table(res: dict, k: int, rr: str) -> None:
    pe, qe = res["passage_encoding"], res["question_encoding"]
    print(
        f"\nretrieval benchmark — {res['corpus']} ({res['n_passages']:,} passages), "
        f"{res['settings']['threads']} thread(s)"
    )
    print(
        f"passage encoding : {pe['passages_per_s']:.1f} passages/s "
        f"(n={pe['n']}, batch {pe['batch_size']}, ~{pe['mean_tokens']:.0f} tokens, "
        f"cos to shipped >= {pe['cosine_to_shipped_min']:.5f})"
    )
    print(
        f"question encoding: {qe['questions_per_s']:.1f} questions/s batched; "
        f"single question p50 {qe['single_question']['p50_ms']:.1f} ms"
    )
    s = res["ivfpq"]["settings"]
    print(
        f"IVF-PQ settings  : nlist={s['nlist']} (requested {s['nlist_requested']}), "
        f"m={s['m']}, nbits={s['nbits']}, nprobe={s['nprobe']}, train={s['train_sample']}"
    )
    head = (
        f"{'index':8} {'build s':>8} {'RSS+ MiB':>9} {'peak+ MiB':>10} {'p50 ms':>8} "
        f"{'p95 ms':>8} {'retrieve q/s':>13} {'recall@' + str(k):>9}"
    )
    print(head)
    print("-" * len(head))
    nan = float("nan")
    for name in ("flat", "ivfpq", rr):
        r = res[name]
        lat = r["query_latency_1thread"]
        rec = r.get(f"recall_at_{k}_vs_exact", 1.0)
        peak = r.get("peak_rss_delta_mib")
        label = "ivfpq+rr" if name == rr else name
        print(
            f"{label:8} {r.get('build_s', nan):8.2f} {r.get('rss_delta_mib', nan):9.1f} "
            f"{(peak if peak is not None else nan):10.1f} {lat['p50_ms']:8.3f} "
            f"{lat['p95_ms']:8.3f} {r['retrieve_questions_per_s']:13.1f} {rec:9.3f}"
        )
    print(f"(ivfpq+rr = IVF-PQ top {res[rr]['settings']['rerank']} re-scored exactly)")
    b = res["flat"]["batched_search_1thread"]
    print(
        f"exact search of {b['n_queries']} queries, 1 thread: FAISS {b['faiss_s']:.2f} s, "
        f"matmul+top-k {b['matmul_topk_s']:.2f} s ({b['speedup']}x, same rows: {b['same_rows']})"
    )


if __name__ == "__main__":
    sys.exit(main())
