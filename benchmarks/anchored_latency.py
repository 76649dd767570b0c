"""Batch-1 latency of the anchored prototype selector: the cold query path, torch and ONNX
Runtime, fp32 and int8.

Writes ``benchmarks/results/anchored_latency.json`` and prints a table.

    python benchmarks/anchored_latency.py --dataset triviaqa [--limit 3000] [--calls 300] \
        [--text-calls 50] [--members 1 3]

One thread (torch, ONNX Runtime, BLAS). For each ``--members`` value (default: one
member and the default three, measured in the same run) the selector is trained with
its other defaults on the dataset's training split (validation for model selection), with the SmolLM2 features
from the feature store (they must be extracted: ``chunksel features --dataset ...``).
Per test instance, at batch 1, cycled over the test split, after warm-up calls, with the
in-process LETOR memo off (as Table 1's cost stage, :mod:`chunksel.study.cost`):

- ``score``: the cold whole query path of Table 1's p50/p95
  (:func:`~chunksel.study.cost.cold_path`): the question and its K chunks with their
  embeddings and retrieval scores to the scores: feature-store lookup of ``h`` and ``r``,
  embeddings, every LETOR feature computed (BM25 statistics in memory), the internal
  LambdaMART, scaling, the torch scorer;
- ``score-ort``: the same path with ``engine="onnxruntime"`` (the scorer run as its
  exported fp32 graph; the study's profiles use it);
- ``score-text``: the same from raw text, the question and chunks encoded with the
  packaged MiniLM first (:func:`~chunksel.study.cost.text_path`; ``--text-calls`` calls);
- ``letor``: the interaction features alone (the part LambdaMART also pays);
- ``lambdamart-trees``: with the ``lambdamart`` block, the internal LambdaMART's trees on
  one instance's LETOR rows (the part of the interaction features LambdaMART's own
  scoring also pays);
- ``torch-graph``: the traced scorer module on prepared inputs (what the ONNX graph does);
- ``ort-fp32`` / ``ort-int8``: the exported graph in ONNX Runtime on the same inputs;
  ``int8`` is ONNX Runtime's dynamic quantisation (int8 weights per channel).
Rank-1 over answerable test instances for each numeric variant, and the share of test
instances where int8 picks the same chunk as fp32.

Results before the cold cost stage (commit 2bdd2ba and earlier) timed ``score`` with the
memo warm: LETOR features were then read from the memo, not computed.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "anchored_latency.json"


def time_calls(fn, args_list, warmup: int = 20) -> dict[str, float]:
    for a in args_list[:warmup]:
        fn(a)
    times = []
    for a in args_list:
        t0 = time.perf_counter()
        fn(a)
        times.append(time.perf_counter() - t0)
    ms = np.array(times) * 1e3
    return {"p50_ms": float(np.median(ms)), "p95_ms": float(np.percentile(ms, 95)), "calls": len(ms)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dataset", default="triviaqa")
    ap.add_argument("--limit", type=int, default=3000)
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--text-calls", type=int, default=50, help="calls of the raw-text path (it encodes)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--members", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--out", default=str(RESULTS))
    args = ap.parse_args(argv)
    torch.set_num_threads(1)

    from chunksel.build import build_instances, generator_store
    from chunksel.selectors import make_selector

    inst = build_instances(args.dataset, k=5, index="flat", limit=args.limit, progress=False).instances
    feats, _, _ = generator_store()
    train = [i for i in inst if i.split == "train"]
    val = [i for i in inst if i.split == "val"]
    test = [i for i in inst if i.split == "test"]
    calls = [test[i % len(test)] for i in range(args.calls)]
    out: dict = {
        "benchmark": "anchored_latency", "dataset": args.dataset, "limit": args.limit,
        "test_instances": len(test), "threads": 1, "letor_memo": "off", "text_calls": args.text_calls,
        "torch": torch.__version__,
        "machine": platform.machine(), "runs": {},
    }
    for members in args.members:
        sel = make_selector("anchored", seed=args.seed, members=members, progress=False).fit(train, feats, val)
        out["runs"][f"members={members}"] = measure(sel, feats, test, calls, args.text_calls)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2))
    return 0


def measure(sel, feats, test, calls, text_calls: int = 50) -> dict:
    """The variants' latencies and rank-1 of one fitted selector (see the module docstring)."""
    from chunksel.selectors.letor import memo_off

    with memo_off():
        return _measure(sel, feats, test, calls, text_calls)


def _measure(sel, feats, test, calls, text_calls: int) -> dict:
    from chunksel.export.anchored import OnnxAnchored, anchored_graph_bytes, graph_module
    from chunksel.selectors.letor import letor_features
    from chunksel.study.cost import cold_path, default_encoder, raw, text_path
    from chunksel.types import label_matrix

    res: dict = {
        "members": sel.members, "n_parameters": sel.n_parameters(),
        "blocks": list(sel.blocks), "summary": {k: v for k, v in sel.summary_.items() if k not in ("train_loss", "val_acc")},
        "variants": {},
    }
    v = res["variants"]
    sel.score(test[:1], feats)
    sel.engine = "torch"
    v["score"] = time_calls(cold_path(sel, feats), calls)
    sel.engine = "onnxruntime"  # the same path, the scorer run as its fp32 graph (Table 1's engine)
    sel.score(test[:1], feats)
    v["score-ort"] = time_calls(cold_path(sel, feats), calls)
    sel.engine = "torch"
    v["score-text"] = time_calls(text_path(sel, feats, default_encoder()), [raw(i) for i in calls[:text_calls]],
                                 warmup=3)
    v["letor"] = time_calls(lambda i: letor_features([i], sel.corpus, sel.k1, sel.b), calls)
    if getattr(sel, "ltr_", None) is not None:
        rows = [sel._letor([i])[0][: len(i.candidates)] for i in calls]
        v["lambdamart-trees"] = time_calls(sel.ltr_.predict, rows)
        res["lambdamart_trees"] = sel.ltr_.num_trees()

    feeds = [sel.graph_inputs([i], feats) for i in test]
    names = [n for n in ("h", "r", "q", "e", "phi") if n in feeds[0]]
    module = graph_module(sel.export_state())

    @torch.inference_mode()
    def torch_graph(f):
        return module(*(torch.from_numpy(f[n]) for n in names))

    v["torch-graph"] = time_calls(torch_graph, [feeds[i % len(feeds)] for i in range(len(calls))])
    labels = label_matrix(test, k=5)
    answerable = labels.any(axis=1)
    picks = {}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("fp32", "int8"):
            path = Path(tmp) / f"{mode}.onnx"
            path.write_bytes(anchored_graph_bytes(sel, mode))
            runner = OnnxAnchored(path, threads=1)
            v[f"ort-{mode}"] = time_calls(lambda f, r=runner: r.scores(**f), [feeds[i % len(feeds)] for i in range(len(calls))])
            v[f"ort-{mode}"]["file_bytes"] = path.stat().st_size
            scores = np.concatenate([runner.scores(**f) for f in feeds])
            picks[mode] = np.argmax(scores, axis=1)
            v[f"ort-{mode}"]["rank1_answerable"] = float(labels[np.arange(len(test)), picks[mode]][answerable].mean())
    torch_scores = sel.score(test, feats)
    res["rank1_answerable_torch"] = float(labels[np.arange(len(test)), np.argmax(torch_scores, axis=1)][answerable].mean())
    res["int8_same_pick"] = float((picks["int8"] == picks["fp32"]).mean())
    print(f"members={sel.members}: {res['n_parameters']} parameters")
    print(f"{'variant':<16} {'p50 ms':>8} {'p95 ms':>8}")
    for name, r in v.items():
        print(f"{name:<16} {r['p50_ms']:8.3f} {r['p95_ms']:8.3f}")
    print(f"rank-1 (answerable) torch {res['rank1_answerable_torch']:.4f} ort-fp32 {v['ort-fp32']['rank1_answerable']:.4f} "
          f"ort-int8 {v['ort-int8']['rank1_answerable']:.4f}; int8 same pick {res['int8_same_pick']:.4f}")
    return res


if __name__ == "__main__":
    raise SystemExit(main())
