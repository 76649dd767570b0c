"""Per-query latency, throughput, size and rank-1 accuracy of every registered selector.

Writes ``benchmarks/results/selector_latency.json`` and prints a table.

    python benchmarks/selector_latency.py                      # synthetic, real shapes
    python benchmarks/selector_latency.py --instances DIR [--features DIR] [--label SPEC]

Everything runs on ONE thread (``torch.set_num_threads(1)`` and the BLAS/OpenMP env
variables) on the CPU. For each selector in :func:`chunksel.selectors.available`:

- ``p50_ms`` / ``p95_ms``: wall time of ``selector.score([instance], features)`` at
  batch 1, one call per test instance (cycled), after warm-up calls;
- ``throughput_qps``: instances per second of ``score`` on batches of 256;
- ``n_parameters`` (``n_parameters()`` where the selector has it) and ``size_bytes``
  (bytes of its saved directory);
- ``rank1``: share of test instances whose top-scored candidate is positive (all test
  instances; ``rank1_answerable`` over those with a positive, the bench's accuracy;
  ``rank1_contested`` over those with a positive and a negative).

For the prototype selector also: ``interleaved``, every inference variant's batch-1
latency measured call by call in turns (they share the machine's drift, and find their
weights evicted by the other variants', as between the generator's calls in a pipeline), the raw-array path (``score_arrays``, what a pipeline calls) at batch
1 and 256, for the ONNX Runtime variants the exported graph alone
(``graph``: ``session.run`` on prepared inputs, what an application embedding the
``.onnx`` file pays), the int8 variants (``quantize="int8"``, dynamic; ``"int8w"``,
weight-only with bfloat16 activations), the ONNX Runtime engine (``engine="onnxruntime"``,
fp32 and per-row dynamic int8: ``ort-fp32``, ``ort-int8``) on the same test instances with
the share of instances where they pick the same chunk as fp32, and every feature budget
10%..100% (Table 3 of the paper).

Data. Section ``synthetic`` always runs: instances with the real feature shapes of
SmolLM2-135M + MiniLM (h 576, r 30 x 64 = 1920, K = 5 candidates x 384), where the
positive candidate's embedding is a fixed linear map of ``h`` plus noise and the text
is random words. Its latencies, sizes and parameter counts are those of the real
configuration; its accuracies only show that fp32 and int8 (and the budgets) agree on
a learnable task, not how well any selector selects real evidence. Section ``real``
runs when ``--instances`` is given (``load_instances`` splits; ``--features`` a
FeatureStore folder for h and r; without features the prototype uses the chunk block
only, which the JSON records).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import copy  # noqa: E402
import inspect  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from chunksel.eval.metrics import rank1_accuracy as _rank1  # noqa: E402
from chunksel.features.base import InMemoryFeatures  # noqa: E402
from chunksel.selectors import available, get_selector_class  # noqa: E402
from chunksel.selectors.prototype import PrototypeSelector  # noqa: E402
from chunksel.study.budgets import run_budgets  # noqa: E402
from chunksel.types import Candidate, Instance, Question, label_matrix  # noqa: E402


def rank1_accuracy(scores, labels) -> float:
    """Rank-1 over every row given (the package's metric, subset "all")."""
    return _rank1(scores, labels, subset="all") if len(scores) else float("nan")


RESULTS = Path(__file__).resolve().parent / "results" / "selector_latency.json"
TARGETS = {"fp32_p50_ms": 1.5, "int8_p50_ms": 0.5, "int8_rank1_drop_points": 0.3}
#: inference variants of the prototype selector: name -> (engine, quantize). torch: fp32,
#: int8 dynamic quantisation, int8 weight-only (bfloat16 activations) where torch has it;
#: onnxruntime (the exported ONNX graph) in fp32 and per-row dynamic int8, where installed.
VARIANTS: dict[str, tuple[str, str | None]] = {"fp32": ("torch", None), "int8": ("torch", "int8")}
if hasattr(torch, "_weight_int8pack_mm"):
    VARIANTS["int8w"] = ("torch", "int8w")
try:
    import onnxruntime  # noqa: F401

    VARIANTS.update({"ort-fp32": ("onnxruntime", None), "ort-int8": ("onnxruntime", "int8")})
except ImportError:  # pragma: no cover
    pass
QUANT_MODES = tuple(VARIANTS)
SHAPES = {"d_h": 576, "d_r": 1920, "k": 5, "d_e": 384}
WORDS = [f"w{i}" for i in range(2000)]


# ------------------------------------------------------------------------ data
def synthetic(n: int, seed: int, d_h: int = 576, d_r: int = 1920, k: int = 5, d_e: int = 384,
              noise: float = 0.5) -> tuple[list[Instance], InMemoryFeatures]:
    """Real-shaped instances: the positive's embedding is ``normalize(A h + noise)``."""
    rng = np.random.default_rng(seed)
    a = np.random.default_rng(4242).normal(size=(d_e, d_h)) / np.sqrt(d_h)
    h = rng.normal(size=(n, d_h)).astype(np.float32)
    r = np.abs(rng.normal(size=(n, d_r))).astype(np.float32)
    insts = []
    for i in range(n):
        pos = int(rng.integers(k))
        target = a @ h[i]
        cands = []
        for j in range(k):
            v = target + noise * rng.normal(size=d_e) if j == pos else rng.normal(size=d_e)
            v = (v / np.linalg.norm(v)).astype(np.float32)
            text = " ".join(rng.choice(WORDS, size=40))
            cands.append(Candidate(id=f"syn:{seed}:{i}:{j}", text=text, rank=j, score=-float(j),
                                   labels={"given": int(j == pos)}, embedding=v))
        q = Question(id=f"synthetic:{seed}:{i}", text=" ".join(rng.choice(WORDS, size=8)), dataset="synthetic")
        insts.append(Instance(q, cands, split="train", label_source="given"))
    return insts, InMemoryFeatures([x.id for x in insts], h=h, r=r)


def merge_features(*parts: InMemoryFeatures) -> InMemoryFeatures:
    ids = [q for p in parts for q in p.ids]
    return InMemoryFeatures(ids, **{k: np.concatenate([p.arrays[k] for p in parts]) for k in parts[0].arrays})


# --------------------------------------------------------------------- timing
def time_calls(fn, args_list: list[Any], warmup: int = 20) -> dict[str, float]:
    """Wall-clock p50/p95 per call, plus the calling thread's CPU time p50/p95.

    On a shared machine the wall time includes waiting for a core; the thread CPU time
    (``time.thread_time_ns``) does not, so both are reported.
    """
    for i in range(warmup):
        fn(args_list[i % len(args_list)])
    wall, cpu = [], []
    for a in args_list:
        c0 = time.thread_time_ns()
        t0 = time.perf_counter_ns()
        fn(a)
        wall.append(time.perf_counter_ns() - t0)
        cpu.append(time.thread_time_ns() - c0)
    w = np.asarray(wall, dtype=np.float64) / 1e6
    c = np.asarray(cpu, dtype=np.float64) / 1e6
    return {
        "p50_ms": float(np.percentile(w, 50)), "p95_ms": float(np.percentile(w, 95)),
        "cpu_p50_ms": float(np.percentile(c, 50)), "cpu_p95_ms": float(np.percentile(c, 95)),
        "calls": len(w),
    }


def throughput(fn, batches: list[Any], min_seconds: float = 1.0) -> float:
    fn(batches[0])
    n, t0, i = 0, time.perf_counter(), 0
    while True:
        b = batches[i % len(batches)]
        fn(b)
        n += len(b) if not isinstance(b, tuple) else b[2].shape[0]
        i += 1
        if time.perf_counter() - t0 >= min_seconds and i >= len(batches):
            break
    return n / (time.perf_counter() - t0)


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def saved_size(sel) -> int | None:
    tmp = Path(tempfile.mkdtemp(prefix="chunksel-bench-"))
    try:
        sel.save(tmp / "m")
        return dir_bytes(tmp / "m")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def rank1(sel, test: list[Instance], features, label: str | None) -> dict[str, float]:
    scores = sel.score(test, features)
    labels = label_matrix(test, label, k=scores.shape[1])
    contested = np.array([t.contested(label) for t in test])
    answerable = np.array([t.answerable(label) for t in test])
    return {
        "rank1": 100 * rank1_accuracy(scores, labels),
        "rank1_answerable": 100 * rank1_accuracy(scores[answerable], labels[answerable]) if answerable.any() else None,
        "n_answerable": int(answerable.sum()),
        "rank1_contested": 100 * rank1_accuracy(scores[contested], labels[contested]) if contested.any() else None,
        "n_test": len(test),
        "n_contested": int(contested.sum()),
    }


def measure(sel, test: list[Instance], features, label: str | None, n_calls: int) -> dict[str, Any]:
    """Latency (batch 1), throughput (batch 256), size, parameters, rank-1."""
    singles = [[test[i % len(test)]] for i in range(n_calls)]
    batches = [test[i : i + 256] for i in range(0, len(test), 256) if len(test[i : i + 256]) == 256] or [test]
    out: dict[str, Any] = {}
    out["batch1"] = time_calls(lambda b: sel.score(b, features), singles)
    out["throughput_qps"] = throughput(lambda b: sel.score(b, features), batches)
    out["n_parameters"] = int(sel.n_parameters()) if hasattr(sel, "n_parameters") else None
    out["size_bytes"] = saved_size(sel)
    out.update(rank1(sel, test, features, label))
    return out


def measure_arrays(sel: PrototypeSelector, test: list[Instance], features, n_calls: int) -> dict[str, Any]:
    """The raw-array path: ``score_arrays(h, r, E)`` at batch 1 and 256."""
    lay = sel.layout_
    ids = [t.id for t in test]
    got = features.lookup(ids) if features is not None and ("hs" in lay.blocks or "rw" in lay.blocks) else {}
    h = got.get("h", np.zeros((len(test), 0), np.float32))
    r = got.get("r", np.zeros((len(test), 0), np.float32))
    e, m = sel._embeddings(test, lay.d_e)
    hh = h if "hs" in lay.blocks else None
    rr = r if "rw" in lay.blocks else None
    singles = [(None if hh is None else hh[i % len(test)], None if rr is None else rr[i % len(test)],
                e[i % len(test)], m[i % len(test)]) for i in range(n_calls)]
    b1 = time_calls(lambda a: sel.score_arrays(*a), singles)
    batches = [(None if hh is None else hh[i : i + 256], None if rr is None else rr[i : i + 256],
                e[i : i + 256], m[i : i + 256]) for i in range(0, len(test) - 255, 256)] or [(hh, rr, e, m)]
    return {"batch1": b1, "throughput_qps": throughput(lambda a: sel.score_arrays(*a), batches)}


def graph_feeds(sel: PrototypeSelector, test: list[Instance], features) -> list[dict[str, np.ndarray]]:
    """One batch-1 input dict of the selector's exported graph per test instance: float32
    ``e`` with zeros at padded slots, and ``h``/``r`` where the graph takes them."""
    runner = sel._inference_model()
    e, m = sel._embeddings(test, sel.layout_.d_e)
    e = np.ascontiguousarray(e * m[..., None], dtype=np.float32)
    got = features.lookup([t.id for t in test]) if runner.input_names != ["e"] else {}
    feeds = []
    for j in range(len(test)):
        f = {"e": e[j : j + 1]}
        for name in runner.input_names[:-1]:
            f[name] = np.ascontiguousarray(got[name][j : j + 1], dtype=np.float32)
        feeds.append(f)
    return feeds


def measure_graph(sel: PrototypeSelector, test: list[Instance], features, n_calls: int) -> dict[str, Any]:
    """The exported graph alone: ONNX Runtime ``session.run`` on prepared float32 inputs
    at batch 1 (what an application embedding the ``.onnx`` file pays, without chunksel)."""
    runner = sel._inference_model()
    feeds = graph_feeds(sel, test, features)
    return {"batch1": time_calls(lambda f: runner.session.run(None, f), [feeds[i % len(feeds)] for i in range(n_calls)])}


def measure_interleaved(full: PrototypeSelector, test: list[Instance], features, n_calls: int) -> dict[str, Any]:
    """Batch-1 latency of every inference variant, the variants taking turns call by call.

    On a shared machine the per-call time drifts by 10-20% over minutes; measured one
    after the other, variants see different drift. Interleaved (call i runs every variant
    once, in an order that rotates), they share it, so their ratios compare. Each call
    also finds its weights evicted by the other variants' (about 100 MB in all), as in a
    pipeline where the generator runs between two selector calls: these p50s are higher
    than the warm, one-variant-at-a-time figures (``batch1``, ``arrays``, ``graph``).
    Variants: the ``score_arrays`` path of each (engine, quantize) in :data:`VARIANTS`
    and, for the onnxruntime ones, the exported graph alone (``<variant> graph``).
    """
    lay = full.layout_
    ids = [t.id for t in test]
    got = features.lookup(ids) if features is not None and ("hs" in lay.blocks or "rw" in lay.blocks) else {}
    e, m = full._embeddings(test, lay.d_e)
    h = got.get("h") if "hs" in lay.blocks else None
    r = got.get("r") if "rw" in lay.blocks else None
    fns: dict[str, Any] = {}
    for mode, (engine, quantize) in VARIANTS.items():
        v = copy.copy(full)
        v.engine, v.quantize, v._infer = engine, quantize, None
        fns[mode] = (lambda i, v=v: v.score_arrays(None if h is None else h[i], None if r is None else r[i], e[i], m[i]))
        if engine == "onnxruntime":
            runner = v._inference_model()
            feeds = []
            for i in range(len(test)):
                f = {"e": np.ascontiguousarray(e[i : i + 1] * m[i : i + 1, :, None], dtype=np.float32)}
                for nm, arr in (("h", h), ("r", r)):
                    if nm in runner.input_names:
                        f[nm] = np.ascontiguousarray(arr[i : i + 1], dtype=np.float32)
                feeds.append(f)
            fns[f"{mode} graph"] = (lambda i, s=runner.session, f=feeds: s.run(None, f[i]))
    names = list(fns)
    for i in range(20):
        for nm in names:
            fns[nm](i % len(test))
    times: dict[str, list[int]] = {nm: [] for nm in names}
    for i in range(n_calls):
        j = i % len(test)
        for k in range(len(names)):
            nm = names[(i + k) % len(names)]
            t0 = time.perf_counter_ns()
            fns[nm](j)
            times[nm].append(time.perf_counter_ns() - t0)
    out = {}
    for nm in names:
        w = np.asarray(times[nm], dtype=np.float64) / 1e6
        out[nm] = {"p50_ms": float(np.percentile(w, 50)), "p95_ms": float(np.percentile(w, 95)), "calls": len(w)}
    for nm in names:
        out[nm]["ratio_to_fp32_p50"] = out[nm]["p50_ms"] / out["fp32"]["p50_ms"]
    return out


# ------------------------------------------------------------------- sections
def write_corpus(instances: list[Instance], path: Path) -> Path:
    """A corpus TSV of the synthetic candidates, for selectors that read term statistics."""
    lines = ["id\ttext\ttitle\tsource"]
    lines += [f"{c.id}\t{c.text}\t\tsynthetic" for inst in instances for c in inst.candidates]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def fit_kwargs(cls, epochs: int | None, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    params = inspect.signature(cls.__init__).parameters
    kw: dict[str, Any] = {k: v for k, v in (extra or {}).items() if k in params}
    if "progress" in params:
        kw["progress"] = False
    if epochs is not None and "max_epochs" in params:
        kw["max_epochs"] = epochs
    return kw


def run_section(name: str, train, val, test, features, label, proto_settings: dict[str, Any],
                other_epochs: int | None, budgets: list[float], n_calls: int,
                extra: dict[str, Any] | None = None) -> dict[str, Any]:
    section: dict[str, Any] = {"n_train": len(train), "n_val": len(val), "n_test": len(test),
                               "selectors": {}, "skipped": {}}
    for sel_name in available():
        if sel_name == "prototype":
            continue
        try:
            cls = get_selector_class(sel_name)
            sel = cls(**fit_kwargs(cls, other_epochs, extra))
            t0 = time.perf_counter()
            sel.fit(train, features, val or None)
            fit_s = time.perf_counter() - t0
            res = measure(sel, test, features, label, n_calls)
            res["fit_seconds"] = fit_s
            section["selectors"][sel_name] = res
            print(f"[{name}] {sel_name}: p50 {res['batch1']['p50_ms']:.3f} ms", flush=True)
        except Exception as err:  # a selector that cannot run here is skipped with a note
            msg = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
            section["skipped"][sel_name] = msg
            print(f"[{name}] skip {sel_name}: {msg}", flush=True)
            if os.environ.get("CHUNKSEL_BENCH_DEBUG"):
                traceback.print_exc()

    # the prototype selector: fp32, int8, budgets
    t0 = time.perf_counter()
    curve = run_budgets(train, features, val or None, budgets=budgets, **proto_settings)
    fit_s = time.perf_counter() - t0
    by_budget = {c.budget: c for c in curve}
    full = by_budget[100.0].selector
    proto: dict[str, Any] = {"settings": {k: v for k, v in full.get_params().items()},
                             "layout": full.layout_.to_dict(), "fit_seconds_all_budgets": fit_s,
                             "train_summary": {k: v for k, v in (full.summary_ or {}).items()
                                               if k not in ("train_loss", "val_loss")}}
    picks = {}
    for mode in QUANT_MODES:
        full.engine, full.quantize = VARIANTS[mode]
        res = measure(full, test, features, label, n_calls)
        res["arrays"] = measure_arrays(full, test, features, n_calls)
        if full.engine == "onnxruntime":
            from chunksel.export.prototype import prototype_graph

            res["onnx_bytes"] = len(prototype_graph(full, full.quantize or "fp32").SerializeToString())
            res["graph"] = measure_graph(full, test, features, n_calls)
        picks[mode] = np.argmax(full.score(test, features), axis=1)
        res["top1_agreement_with_fp32"] = float(np.mean(picks[mode] == picks["fp32"]))
        proto[mode] = res
        print(f"[{name}] prototype {mode}: score p50 {res['batch1']['p50_ms']:.3f} ms, arrays p50 "
              f"{res['arrays']['batch1']['p50_ms']:.3f} ms, rank1 {res['rank1']:.2f}, "
              f"same pick as fp32 {100 * res['top1_agreement_with_fp32']:.1f}%", flush=True)
    full.engine, full.quantize = "torch", None
    for mode in QUANT_MODES[1:]:
        # the bench's accuracy: rank-1 over answerable test instances
        proto[f"{mode}_rank1_drop_points"] = proto["fp32"]["rank1_answerable"] - proto[mode]["rank1_answerable"]
    proto["interleaved"] = measure_interleaved(full, test, features, max(n_calls, 500))
    print(f"[{name}] prototype interleaved p50 ms: "
          + ", ".join(f"{k} {v['p50_ms']:.3f}" for k, v in proto["interleaved"].items()), flush=True)
    proto["budgets"] = []
    for c in curve:
        sel = c.selector
        sel.quantize = None
        res = {"budget_percent": c.budget, "dims": c.dims}
        res.update(measure(sel, test, features, label, n_calls))
        res["arrays"] = measure_arrays(sel, test, features, n_calls)
        if "ort-int8" in VARIANTS:
            sel.engine, sel.quantize = VARIANTS["ort-int8"]
            res["ort-int8"] = {"arrays": measure_arrays(sel, test, features, n_calls),
                               **{k: v for k, v in rank1(sel, test, features, label).items() if k.startswith("rank1")}}
            sel.engine, sel.quantize = "torch", None
        proto["budgets"].append(res)
        print(f"[{name}] prototype budget {c.budget:g}%: dims {c.dims}, params {res['n_parameters']}, "
              f"arrays p50 {res['arrays']['batch1']['p50_ms']:.3f} ms, rank1 {res['rank1']:.2f}"
              + (f", ort-int8 arrays p50 {res['ort-int8']['arrays']['batch1']['p50_ms']:.3f} ms"
                 if "ort-int8" in res else ""), flush=True)
    section["selectors"]["prototype"] = proto
    return section


def print_table(results: dict[str, Any]) -> None:
    for sec_name, sec in results["sections"].items():
        print(f"\n== {sec_name} ({sec['n_test']} test instances) ==")
        print(f"{'selector':<24}{'p50 ms':>9}{'p95 ms':>9}{'cpu p50':>9}{'qps@256':>11}{'params':>11}"
              f"{'bytes':>12}{'rank1':>8}")
        rows = []
        for name, r in sec["selectors"].items():
            if name == "prototype":
                for mode in QUANT_MODES:
                    rows.append((f"prototype {mode}", r[mode]))
                    rows.append((f"  arrays {mode}", {**r[mode]["arrays"], "n_parameters": None,
                                                       "size_bytes": None, "rank1": None}))
                    if "graph" in r[mode]:
                        rows.append((f"  graph {mode}", {**r[mode]["graph"], "throughput_qps": None,
                                                          "size_bytes": r[mode].get("onnx_bytes"), "rank1": None}))
                for b in r["budgets"]:
                    rows.append((f"  budget {b['budget_percent']:g}% ({b['dims']})", b))
            else:
                rows.append((name, r))
        for label, r in rows:
            def f(v, fmt):
                return format(v, fmt) if v is not None else "-"
            print(f"{label:<24}{f(r['batch1']['p50_ms'], '9.3f')}{f(r['batch1']['p95_ms'], '9.3f')}"
                  f"{f(r['batch1']['cpu_p50_ms'], '9.3f')}"
                  f"{f(r['throughput_qps'], '11.0f')}{f(r.get('n_parameters'), '11d')}"
                  f"{f(r.get('size_bytes'), '12d')}{f(r.get('rank1'), '8.2f')}")
        for name, why in sec["skipped"].items():
            print(f"skipped {name}: {why}")


def _ort_version() -> str | None:
    try:
        import onnxruntime

        return onnxruntime.__version__
    except ImportError:  # pragma: no cover
        return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--instances", help="instances folder (chunksel.data.instances.load_instances)")
    ap.add_argument("--features", help="FeatureStore folder with h and r for those instances")
    ap.add_argument("--label", default=None, help="label spec (default: each instance's)")
    ap.add_argument("--out", default=str(RESULTS))
    ap.add_argument("--n-train", type=int, default=2048, help="synthetic training instances")
    ap.add_argument("--n-test", type=int, default=1024, help="synthetic test instances")
    ap.add_argument("--calls", type=int, default=500, help="batch-1 calls timed per variant")
    ap.add_argument("--epochs", type=int, default=10, help="prototype max epochs (synthetic section)")
    ap.add_argument("--other-epochs", type=int, default=2,
                    help="max epochs of the other trainable selectors in the synthetic section")
    ap.add_argument("--budgets", default="10,20,30,40,50,60,70,80,90,100")
    ap.add_argument("--skip-synthetic", action="store_true")
    ap.add_argument("--note", action="append", default=[], help="a note on the data, kept in the JSON")
    args = ap.parse_args(argv)

    torch.set_num_threads(1)
    budgets = [float(b) for b in args.budgets.split(",")]
    notes = ["one thread (torch.set_num_threads(1), OMP/MKL/OpenBLAS = 1), CPU", *args.note]
    results: dict[str, Any] = {
        "benchmark": "selector_latency",
        "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "machine": {"platform": platform.platform(), "processor": platform.processor(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "cpu_count": os.cpu_count(), "torch_threads": torch.get_num_threads(),
                    "quantized_engine": torch.backends.quantized.engine,
                    "onnxruntime": _ort_version()},
        "targets": TARGETS,
        "notes": notes,
        "sections": {},
    }
    if not args.skip_synthetic:
        train, ftr = synthetic(args.n_train, seed=1)
        test, fte = synthetic(args.n_test, seed=2)
        feats = merge_features(ftr, fte)
        notes.append(
            "section 'synthetic': SYNTHETIC inputs with the real shapes (h 576, r 1920, K=5 x 384; "
            "x = 4416 dims); positive embedding = normalize(A h + noise), random-word texts; its "
            "accuracies compare variants on a learnable task only, its latencies/sizes are real; "
            "bm25/ranksvm/lambdamart read term statistics of a corpus of the synthetic candidates. "
            f"Prototype trained {args.epochs} epochs max; other selectors {args.other_epochs}."
        )
        settings = {"max_epochs": args.epochs, "patience": 5, "progress": False, "label": None,
                    "generator_id": "synthetic", "encoder_id": "synthetic"}
        tmp = Path(tempfile.mkdtemp(prefix="chunksel-bench-corpus-"))
        try:
            corpus = write_corpus(train + test, tmp / "synthetic.tsv")
            results["sections"]["synthetic"] = run_section(
                "synthetic", train, [], test, feats, None, settings, args.other_epochs, budgets, args.calls,
                extra={"corpus": str(corpus)},
            )
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.instances:
        from chunksel.data.instances import load_instances

        train = load_instances(args.instances, "train")
        val = load_instances(args.instances, "val")
        test = load_instances(args.instances, "test")
        features = None
        blocks: tuple[str, ...] = ("hs", "rw", "chunk")
        if args.features:
            from chunksel.features.store import FeatureStore

            features = FeatureStore(args.features)
        else:
            blocks = ("chunk",)
            notes.append("section 'real': no --features given, so the prototype uses the chunk block only")
        settings = {"blocks": blocks, "progress": False, "label": args.label}
        results["sections"]["real"] = run_section(
            "real", train, val, test, features, args.label, settings, None, budgets, args.calls
        )
        results["sections"]["real"]["instances"] = str(args.instances)
        results["sections"]["real"]["features"] = args.features
    for sec in results["sections"].values():
        p = sec["selectors"].get("prototype")
        if p:
            met = {
                "fp32_p50_ms_arrays": p["fp32"]["arrays"]["batch1"]["p50_ms"] < TARGETS["fp32_p50_ms"],
                "fp32_cpu_p50_ms_arrays": p["fp32"]["arrays"]["batch1"]["cpu_p50_ms"] < TARGETS["fp32_p50_ms"],
                "fp32_p50_ms_score": p["fp32"]["batch1"]["p50_ms"] < TARGETS["fp32_p50_ms"],
            }
            if "ort-fp32" in p:
                met["ort-fp32_p50_ms_arrays"] = p["ort-fp32"]["arrays"]["batch1"]["p50_ms"] < TARGETS["fp32_p50_ms"]
            for mode in [m for m in QUANT_MODES if m in p and "int8" in m]:
                met.update({
                    f"{mode}_p50_ms_arrays": p[mode]["arrays"]["batch1"]["p50_ms"] < TARGETS["int8_p50_ms"],
                    f"{mode}_cpu_p50_ms_arrays": p[mode]["arrays"]["batch1"]["cpu_p50_ms"] < TARGETS["int8_p50_ms"],
                    f"{mode}_p50_ms_score": p[mode]["batch1"]["p50_ms"] < TARGETS["int8_p50_ms"],
                    f"{mode}_rank1_within": abs(p[f"{mode}_rank1_drop_points"]) <= TARGETS["int8_rank1_drop_points"],
                })
                if "graph" in p[mode]:
                    met[f"{mode}_p50_ms_graph"] = p[mode]["graph"]["batch1"]["p50_ms"] < TARGETS["int8_p50_ms"]
            for nm, r in p.get("interleaved", {}).items():
                limit = TARGETS["int8_p50_ms"] if "int8" in nm else TARGETS["fp32_p50_ms"]
                met[f"interleaved {nm}_p50_ms"] = r["p50_ms"] < limit
            sec["targets_met"] = met
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2, default=float))
    print_table(results)
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
