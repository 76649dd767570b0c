"""Bulk jobs on Ray against the single-process path: throughput with 1 and 2 workers.

In one run, on this machine, for each of the three bulk jobs:

- corpus encoding: ``--passages`` random wiki-w100 passages, all-MiniLM-L6-v2, shards of
  ``--passages / 6`` rows (single process: ``corpus_embeddings(use_precomputed=False)``
  with the same shard size);
- question features: ``--questions`` TriviaQA dev questions, SmolLM2-135M-Instruct h and
  r, shards of ``--questions / 6`` (single process: ``FeatureStore.extract``);
- LLM labels: ``--pairs`` (question, passage) pairs judged by SmolLM2 with the paper's
  prompt, batch 4, shards of 4 pairs (single process: ``label_instances``);

each measured ``--repeats`` times per configuration (single process, Ray with 1 worker,
Ray with 2 workers; configurations interleaved, each Ray run in a fresh cache folder so
everything is computed). Every process runs one torch thread. Reported per job and
configuration (medians over the repeats):

- ``steady_per_s``: rows / (last shard finished - first shard started), read from the
  job log -- the throughput once the models are loaded;
- ``wall_s`` and ``wall_per_s``: the whole call, Ray's actor start-up and the workers'
  model loads included (the single process has its model loaded beforehand);
- ``load_s``: one worker's model load (the single process's load is timed once, apart);
- ``ratio_steady`` / ``ratio_wall``: throughput relative to the single process of the same
  repeat.

It also builds the IVF-PQ index of the msmarco-sub corpus (its shipped embeddings, split
into 4096-row shards) shard by shard and reports the training and filling times, the
fill rate and the index's bytes per vector, for the projection in docs/distributed.md.

Writes ``benchmarks/results/ray_bulk.json``. Run it with ``nice -n 19`` on a shared machine:

    python benchmarks/ray_bulk.py [--passages 240] [--questions 48] [--pairs 24] [--repeats 2]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def _log_rate(folder: Path) -> tuple[float, float]:
    """(rows / (last done - first start), median worker model-load seconds) from a job log."""
    from chunksel.bulk.manifest import read_log

    ev = read_log(folder)
    starts = [e["time"] for e in ev if e["event"] == "start"]
    dones = [e for e in ev if e["event"] == "done"]
    rows = sum(int(e.get("rows") or 0) for e in dones)
    span = max(e["time"] for e in dones) - min(starts)
    loads = [e["seconds"] for e in ev if e["event"] == "load"]
    return rows / span, statistics.median(loads) if loads else float("nan")


def _wiki_sample(root: Path, n: int, seed: int):
    from chunksel.data.corpus import CORPORA, Corpus, iter_passages

    rng = np.random.default_rng(seed)
    keep = set(rng.choice(190_000, size=n, replace=False).tolist())
    rows = [p for i, p in enumerate(iter_passages(root / CORPORA["wiki-w100"])) if i in keep]
    return Corpus([p.id for p in rows], [p.text for p in rows], [p.title for p in rows],
                  name=f"wiki-sample-{n}")


def _questions(root: Path, n: int):
    from chunksel.types import Question

    out = []
    with open(root / "qa/triviaqa/topics.dpr.trivia.dev.txt", encoding="utf-8", newline="") as fh:
        for i, row in enumerate(csv.reader(fh, delimiter="\t")):
            if len(out) == n:
                break
            out.append(Question(id=f"triviaqa:dev:{i}", text=row[0], answers=[]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--passages", type=int, default=240)
    ap.add_argument("--questions", type=int, default=48)
    ap.add_argument("--pairs", type=int, default=24)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "ray_bulk.json"))
    args = ap.parse_args()

    import ray
    import torch

    from chunksel.bulk import jobs, label_jobs
    from chunksel.bulk.ivfpq import build_ivfpq_from_shards, ivfpq_bytes_per_vector
    from chunksel.config import cache_root, data_root
    from chunksel.features.store import FeatureStore
    from chunksel.labels.judge import label_instances
    from chunksel.llm.fetch import smollm2_gguf
    from chunksel.llm.local import LocalBackend
    from chunksel.llm.models import load_generator
    from chunksel.retrieval.embeddings import PRECOMPUTED, corpus_embeddings, decode_precomputed
    from chunksel.retrieval.encoder import Encoder
    from chunksel.threads import set_threads
    from chunksel.types import Candidate, Instance

    set_threads(1)
    root = data_root()
    model_cache = cache_root()
    gguf = smollm2_gguf(model_cache)  # must be fetched already (no download at bench time)
    work = Path(tempfile.mkdtemp(prefix="ray-bulk-"))
    corpus = _wiki_sample(root, args.passages, args.seed)
    questions = _questions(root, args.questions)
    pairs = [Instance(question=questions[i % len(questions)],
                      candidates=[Candidate(id=corpus.ids[i], text=corpus.texts[i], title=corpus.titles[i],
                                            score=0.0, rank=0)])
             for i in range(args.pairs)]

    t0 = time.perf_counter()
    encoder = Encoder()
    encoder.encode(["warm up"], progress=False)
    load_enc = time.perf_counter() - t0
    t0 = time.perf_counter()
    model, tok, gen_id = load_generator(gguf, cache=model_cache)
    load_gen = time.perf_counter() - t0
    backend = LocalBackend(model=model, tokenizer=tok, model_id=gen_id, batch_size=4)

    enc_shard = max(1, args.passages // 6)
    q_shard = max(1, args.questions // 6)

    def single(job: str, cache: Path) -> tuple[float, int]:
        os.environ["CHUNKSEL_CACHE"] = str(cache)
        t = time.perf_counter()
        if job == "encode":
            n = corpus_embeddings(corpus, encoder, use_precomputed=False, shard_rows=enc_shard, progress=False).shape[0]
        elif job == "features":
            store = FeatureStore.open(gen_id, tok, cache=cache)
            n = store.extract(questions, model, tok, batch_size=q_shard, shard_size=q_shard, progress=False)
        else:
            n = len(label_instances(pairs, backend, batch_size=4, cache=cache, progress=False).rows)
        return time.perf_counter() - t, n

    def on_ray(job: str, cache: Path, workers: int):
        os.environ["CHUNKSEL_CACHE"] = str(cache)
        t = time.perf_counter()
        if job == "encode":
            rep = jobs.encode_corpus(corpus, encoder, workers=workers, shard_rows=enc_shard, progress=False)
        elif job == "features":
            _, rep = jobs.extract_features(questions, gguf, workers=workers, batch_size=q_shard,
                                           shard_size=q_shard, cache=cache, model_cache=model_cache,
                                           progress=False)
        else:
            _, rep = label_jobs.judge_instances(pairs, "local", {"model_path": str(gguf), "cache": str(model_cache)},
                                          workers=workers, batch_size=4, shard_size=4, cache=cache,
                                          progress=False)
        wall = time.perf_counter() - t
        steady, load = _log_rate(rep.folder)
        return wall, rep.rows, steady, load

    t0 = time.perf_counter()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    ray_start = time.perf_counter() - t0
    results: dict[str, dict] = {}
    for job in ("encode", "features", "judge"):
        runs: dict[str, list[dict]] = {"single": [], "ray-1": [], "ray-2": []}
        for r in range(args.repeats):
            wall, n = single(job, work / f"{job}-single-{r}")
            runs["single"].append({"wall_s": wall, "rows": n, "steady_per_s": n / wall, "wall_per_s": n / wall})
            for w in (1, 2):
                wall_r, n_r, steady, load = on_ray(job, work / f"{job}-ray{w}-{r}", w)
                runs[f"ray-{w}"].append({"wall_s": wall_r, "rows": n_r, "steady_per_s": steady,
                                         "wall_per_s": n_r / wall_r, "load_s": load,
                                         "ratio_steady": steady / runs["single"][-1]["steady_per_s"],
                                         "ratio_wall": (n_r / wall_r) / runs["single"][-1]["wall_per_s"]})
            print(f"{job} repeat {r}: " + ", ".join(
                f"{k} {v[-1]['steady_per_s']:.1f}/s (wall {v[-1]['wall_s']:.1f} s)" for k, v in runs.items()),
                flush=True)
        summary = {}
        for name, rs in runs.items():
            summary[name] = {k: round(statistics.median(r[k] for r in rs), 4) for k in rs[0]}
            summary[name]["repeats"] = rs
        results[job] = summary
    ray.shutdown()

    # IVF-PQ filled shard by shard, on the msmarco-sub shipped embeddings
    emb = decode_precomputed(root / PRECOMPUTED["msmarco-sub"])
    shard_dir = work / "ivf"
    shard_dir.mkdir()
    files = []
    for i, lo in enumerate(range(0, len(emb), 4096)):
        files.append(shard_dir / f"shard_{i:05d}.npy")
        np.save(files[-1], emb[lo:lo + 4096])
    import faiss

    from chunksel.bulk.ivfpq import gather_rows
    from chunksel.retrieval.index import new_ivfpq

    index, settings, rows = new_ivfpq(len(emb), emb.shape[1], progress=False)
    t0 = time.perf_counter()
    index.train(gather_rows(files, rows if rows is not None else np.arange(len(emb))))
    train_s = time.perf_counter() - t0
    trained = faiss.clone_index(index)
    t0 = time.perf_counter()
    built = build_ivfpq_from_shards(files, progress=False, trained=trained)
    fill_s = time.perf_counter() - t0
    faiss.write_index(built.index, str(work / "ivf.faiss"))
    size = (work / "ivf.faiss").stat().st_size
    nlist, d = settings["nlist"], emb.shape[1]
    fixed = nlist * d * 4 + settings["m"] * (1 << settings["nbits"]) * (d // settings["m"]) * 4
    ivf = {"n": len(emb), "shards": len(files), "nlist": nlist, "m": settings["m"], "nbits": settings["nbits"],
           "train_vectors": settings["train_sample"], "train_s": round(train_s, 2), "fill_s": round(fill_s, 2),
           "fill_per_s": round(len(emb) / fill_s, 1), "file_bytes": size,
           "bytes_per_vector_measured": round((size - fixed) / len(emb), 2),
           "bytes_per_vector_formula": ivfpq_bytes_per_vector(settings["m"], settings["nbits"])}

    out = {
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": sys.version.split()[0],
                    "torch": torch.__version__, "ray": ray.__version__, "threads_per_process": 1,
                    "note": "ratios come from one run; load average before it: "
                            + " ".join(f"{x:.2f}" for x in os.getloadavg())},
        "settings": {"passages": args.passages, "questions": args.questions, "pairs": args.pairs,
                     "repeats": args.repeats, "encode_shard_rows": enc_shard, "features_shard": q_shard,
                     "features_batch": q_shard, "judge_batch": 4, "judge_shard": 4, "seed": args.seed},
        "single_process_model_load_s": {"minilm": round(load_enc, 2), "smollm2": round(load_gen, 2)},
        "ray_init_s": round(ray_start, 2),
        "jobs": results,
        "ivfpq_sharded": ivf,
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")
    print(f"\n{'job':9} {'config':7} {'steady/s':>9} {'ratio':>6} {'wall s':>7} {'ratio(wall)':>11} {'load s':>6}")
    for job, summ in results.items():
        for name, s in summ.items():
            print(f"{job:9} {name:7} {s['steady_per_s']:9.2f} {s.get('ratio_steady', 1):6.2f} {s['wall_s']:7.1f} "
                  f"{s.get('ratio_wall', 1):11.2f} {s.get('load_s', float('nan')):6.1f}")
    print(f"IVF-PQ ({ivf['n']} vectors, {ivf['shards']} shards): train {ivf['train_s']} s, fill {ivf['fill_s']} s "
          f"({ivf['fill_per_s']}/s), {ivf['bytes_per_vector_measured']} B/vector")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
