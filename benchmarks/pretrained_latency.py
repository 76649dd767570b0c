"""Cold latency of the shipped pretrained selectors, one thread: the whole application path
from the retriever's embeddings at K = 5, 20 and 100, and a fresh process's import, load
and first selection.

Writes ``benchmarks/results/pretrained_latency.json`` and prints a table.

    python benchmarks/pretrained_latency.py [--calls 200] [--fresh 7]

- ``select``: ``ChunkSelector.select(question, chunks, k="auto", question_embedding=,
  chunk_embeddings=, chunk_scores=)`` at batch 1 (a model built with ``late=True`` also
  gets ``question_tokens=`` from the retriever's own pass and ``chunk_tokens=`` from the
  bulk job's stored shards, encoded once before timing), every call a different question and its
  own chunks (NQ test questions of a grouped sample, their MiniLM top-100 from the
  Wikipedia corpus, cut to K), so no feature memo or cache answers it (the application
  path keeps no LETOR memo); BM25 statistics in memory after load. p50 / p95 over
  ``--calls`` calls after 10 warm-up calls on other questions.
- rows: ``retrieval`` (retrieval order through the same path), ``bm25`` (the Wikipedia
  corpus's statistics), ``lambdamart-base``, ``anchored-base`` (torch scorer),
  ``anchored-base`` with ``engine="onnxruntime"``, the same three for the ``-lite`` models
  (no token vectors: the embeddings alone) and the zero-shot report's cross-encoder
  (MiniLM-L6 trained here, ONNX Runtime fp32) when it has been trained.
- ``<model>, from text``: a late model from raw text alone (every vector encoded, the
  embedding and token caches off) at K = 5, ``--ce-calls`` calls.
- ``fresh``: a new Python process that imports chunksel, loads the model by name and
  selects once (K = 20, embeddings given), timed from just before the process starts to
  the selection's end (``--fresh`` runs, median; the interpreter's start-up included),
  for each ``--fresh-python`` (an environment with scikit-learn installed pays 1.6 s
  more: LightGBM imports it).

Targets (issue #50): p50 <= 1.5 ms at K = 5 and <= 10 ms at K = 100 from embeddings;
fresh process <= 2 s.
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

RESULTS = Path(__file__).resolve().parent / "results" / "pretrained_latency.json"
KS = (5, 20, 100)
ROWS = (("retrieval", "retrieval", None), ("bm25", "bm25", None), ("lambdamart-base", "lambdamart-base", None),
        ("anchored-base", "anchored-base", None), ("anchored-base (onnxruntime)", "anchored-base", "onnxruntime"),
        ("lambdamart-lite", "lambdamart-lite", None), ("anchored-lite", "anchored-lite", None),
        ("anchored-lite (onnxruntime)", "anchored-lite", "onnxruntime"), ("crossencoder", "crossencoder", None))
#: the shipped models timed in a fresh process
FRESH_MODELS = ("lambdamart-base", "anchored-base", "lambdamart-lite", "anchored-lite")

FRESH = """
import time, sys
t0 = float(sys.argv[1])
import numpy as np
from chunksel import ChunkSelector
cs = ChunkSelector.load(sys.argv[2])
rng = np.random.default_rng(0)
e = rng.normal(size=(20, 384)).astype(np.float32); q = rng.normal(size=384).astype(np.float32)
e /= np.linalg.norm(e, axis=1, keepdims=True); q /= np.linalg.norm(q)
chunks = [f"passage {i} about the history of the city and its river" for i in range(20)]
toks = {}
if "token_vectors" in cs.inputs:  # late interaction: the retriever's stored token vectors, given
    toks = {"question_tokens": rng.normal(size=(6, 384)), "chunk_tokens": [rng.normal(size=(40, 384)) for _ in e]}
cs.select("when was the city founded", chunks, k="auto", question_embedding=q, chunk_embeddings=e,
          chunk_scores=(e @ q).tolist(), **toks)
print(time.time() - t0)
"""


def _instances(calls: int):
    from chunksel.build import build_instances

    built = build_instances("nq", k=max(KS), limit=3000, split="grouped", progress=True)
    test = [i for i in built.instances if i.split == "test" and len(i.candidates) == max(KS)]
    if len(test) < calls + 10:
        raise SystemExit(f"only {len(test)} NQ test questions with {max(KS)} candidates")
    return test[: calls + 10]


def _token_store(insts):
    """The candidates' stored token vectors (the bulk job's shards, encoded once and kept
    under the corpus's embeddings) and each question's, from the retriever's own pass."""
    from chunksel.bulk.jobs import encode_tokens, tokens_dir
    from chunksel.data.corpus import Corpus
    from chunksel.data.datasets import get_spec
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.tokens import TokenShards

    corpus, encoder = Corpus.load(get_spec("nq").corpus, progress=False), Encoder()
    encode_tokens(corpus, encoder, sorted({c.id for i in insts for c in i.candidates}), workers=1, progress=True)
    import ray

    if ray.is_initialized():  # its daemons would share the cores with the timed calls
        ray.shutdown()
    shards = TokenShards(tokens_dir(corpus, encoder))
    questions = dict(zip([i.id for i in insts], encoder.encode_with_tokens([i.question.text for i in insts])[1],
                         strict=True))
    return lambda inst, k: (questions[inst.id], shards.get([c.id for c in inst.candidates[:k]]))


def _measure(cs, insts, k: int, tokens=None, text: bool = False) -> list[float]:
    """Per-call ms; ``tokens`` gives a late model its token vectors, ``text`` times the
    path from raw text instead (nothing given, caches off)."""
    times = []
    for n, inst in enumerate(insts):
        cands = inst.candidates[:k]
        chunks, titles = [c.text for c in cands], [c.title for c in cands]
        e = np.stack([c.embedding for c in cands]).astype(np.float32)
        q = np.asarray(inst.question.embedding, dtype=np.float32)
        scores = [c.score for c in cands]
        given = {"question_embedding": q, "chunk_embeddings": e, "chunk_scores": scores}
        if "token_vectors" in cs.inputs and tokens is not None:
            given["question_tokens"], given["chunk_tokens"] = tokens(inst, k)
        if text:
            given = {}
        t = time.perf_counter()
        cs.select(inst.question.text, chunks, k="auto" if cs.calibrator is not None else 1, titles=titles, **given)
        if n >= 10:  # the first ten warm the process, on questions not timed
            times.append((time.perf_counter() - t) * 1e3)
    return times


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo`` on Linux, else the platform's): figures
    from two machines compare only when it and the load agree."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def short_commit() -> str:
    """The checkout's short HEAD commit (what a result records)."""
    return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent).stdout.strip()


def write_result(path: Path, result: dict) -> int:
    """Write a benchmark's JSON result and say where; returns the exit code."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


def _crossencoder_folder():
    from chunksel.config import cache_root

    found = sorted((cache_root() / "zeroshot").glob("crossencoder-*/config.json"))
    return found[-1].parent if found else None


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--calls", type=int, default=200)
    p.add_argument("--fresh", type=int, default=7)
    p.add_argument("--ce-calls", type=int, default=30, help="timed calls of the cross-encoder (seconds each at K = 100)")
    p.add_argument("--fresh-python", action="append", default=None, metavar="PYTHON",
                   help="interpreter(s) of the fresh-process runs (default: this one); e.g. a venv with "
                        "only the `pretrained` extra")
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args()
    import torch

    torch.set_num_threads(1)
    from chunksel import ChunkSelector

    insts = _instances(args.calls)
    tokens = _token_store(insts)
    rows = []
    for label, name, engine in ROWS:
        if name == "bm25":  # BM25 with the Wikipedia corpus's statistics
            cs = ChunkSelector.load("bm25", corpus="wiki-w100")
        elif name == "crossencoder":  # the zero-shot report's, when it has been trained
            folder = _crossencoder_folder()
            if folder is None:
                print("crossencoder: not trained (python -m chunksel.study.zeroshot trains it); skipped")
                continue
            cs = ChunkSelector.load(folder)
        elif engine is None:
            cs = ChunkSelector.load(name)
        else:  # the scorer as its exported graph in ONNX Runtime
            from chunksel.pretrained import pretrained_dir
            from chunksel.selectors import load_selector

            sel = load_selector(name)
            sel.engine = engine
            cs = ChunkSelector(sel, path=pretrained_dir(name))
        paths = [(label, k, False) for k in KS]
        if "token_vectors" in cs.inputs and engine is None:  # late interaction from raw text, caches off
            paths.append((f"{label}, from text", 5, True))
        for row, k, text in paths:
            if text:
                cs = ChunkSelector.load(name, embedding_cache=False, token_cache=False)
            few = name == "crossencoder" or text
            t = _measure(cs, insts[: args.ce_calls + 10] if few else insts, k, tokens, text)
            rows.append({"row": row, "k": k, "calls": len(t), "p50_ms": float(np.median(t)),
                         "p95_ms": float(np.percentile(t, 95)), "query_cost": cs.selector.query_cost})
            print(f"{row:30s} K={k:3d}  p50 {rows[-1]['p50_ms']:7.3f} ms  p95 {rows[-1]['p95_ms']:7.3f} ms",
                  flush=True)
    fresh = {}
    for python in args.fresh_python or [sys.executable]:
        probe = "import importlib.util as u; print(bool(u.find_spec('sklearn')), bool(u.find_spec('sentence_transformers')))"
        mods = subprocess.run([python, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
        env_info = {"python": python, "scikit_learn": mods[0] == "True", "sentence_transformers": mods[1] == "True"}
        for name in FRESH_MODELS:
            runs = []
            for _ in range(args.fresh):
                env = {**os.environ, "TQDM_DISABLE": "1"}
                env.pop("CHUNKSEL_DATA", None)
                out = subprocess.run([python, "-c", FRESH, repr(time.time()), name], capture_output=True,
                                     text=True, env=env, check=True)
                runs.append(float(out.stdout.strip().splitlines()[-1]))
            fresh.setdefault(python, {"environment": env_info})[name] = {"runs_s": runs,
                                                                       "median_s": float(np.median(runs))}
            print(f"fresh process {name} ({python}, scikit-learn installed: {env_info['scikit_learn']}): "
                  f"median {np.median(runs):.2f} s over {len(runs)}", flush=True)
    result = {
        "benchmark": "pretrained_latency", "rows": rows, "fresh_process": fresh,
        "calls": args.calls, "threads": 1, "machine": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(), "cpus": os.cpu_count(), "load": os.getloadavg(), "python": platform.python_version(),
        "commit": short_commit(),
        "targets": {"p50_k5_ms": 1.5, "p50_k100_ms": 10.0, "fresh_s": 2.0, "late_p50_k5_ms": 2.0},
    }
    return write_result(args.out, result)


if __name__ == "__main__":
    raise SystemExit(main())
