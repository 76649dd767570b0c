"""Where the int8 prototype graph's batch-1 time goes: kernels against memory bandwidth.

Writes ``benchmarks/results/int8_kernels.json`` and prints a table.

    python benchmarks/int8_kernels.py [--calls 2000]

One thread, CPU, random weights with the real model's shapes (the full SmolLM2 +
MiniLM layout: x = 4416 dims, three hidden layers of 1024, output 384, 7.0M
parameters). Kernel times do not depend on the weights' values. It measures, each as a
p50 over ``--calls`` batch-1 calls after warm-up:

- ``stream``: a memory-speed reference, an fp32 matrix-vector product with numpy's BLAS
  over 4 MB, 7 MB and 28 MB of weights (bytes read / time = the rate this core can read
  weights at, from cache or memory);
- ``matmulinteger``: ONNX Runtime's ``MatMulInteger`` (uint8 x int8, the int8 graph's
  kernel) on each layer shape alone (``hot``: the one matrix read again and again, in
  cache when it fits) and the four layers chained with ReLUs (``chain``: 7 MB per call,
  more than this core's L2, as in the real graph), with the rate it reads weights at;
- ``graph``: the exported int8 graph of a prototype selector with those shapes, whole
  (assembly, scaler, MLP, scoring) and through :class:`OnnxPrototype.scores`.

The gap between ``stream`` and ``chain`` is what a faster batch-1 int8 kernel could
still gain; the gap between ``chain`` and ``graph`` is the cost of everything around
the matrix products.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

DIMS = (4416, 1024, 1024, 1024, 384)  # x, three hidden layers, output (d_e)
LAYOUT = {"d_h": 576, "d_r": 1920, "k": 5, "d_e": 384}


def p50_us(fn: Callable[[], object], calls: int, warmup: int = 50) -> float:
    for _ in range(warmup):
        fn()
    times = np.empty(calls)
    for i in range(calls):
        t = time.perf_counter()
        fn()
        times[i] = time.perf_counter() - t
    return float(np.median(times) * 1e6)


def session(model, ort):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])


def matmulinteger_graph(shapes: list[tuple[int, int]], rng: np.random.Generator):
    """uint8 x -> MatMulInteger (-> Cast -> Relu -> Cast back) ... -> int32, int8 weights."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, x = [], [], "x"
    for i, (k, n) in enumerate(shapes):
        inits.append(numpy_helper.from_array(rng.integers(-127, 128, size=(k, n), dtype=np.int8), f"W{i}"))
        nodes.append(helper.make_node("MatMulInteger", [x, f"W{i}"], [f"acc{i}"]))
        x = f"acc{i}"
        if i < len(shapes) - 1:  # back to uint8 for the next layer, as the graph's requantisation does
            nodes.append(helper.make_node("Cast", [x], [f"q{i}"], to=TensorProto.UINT8))
            x = f"q{i}"
    graph = helper.make_graph(
        nodes, "mmi", [helper.make_tensor_value_info("x", TensorProto.UINT8, ["n", shapes[0][0]])],
        [helper.make_tensor_value_info(x, TensorProto.INT32, ["n", shapes[-1][1]])], inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def prototype_with_real_shapes(seed: int = 0):
    """A PrototypeSelector with the real layout and random (untrained) weights."""
    import torch

    from chunksel.nn.inputs import FeatureLayout, StandardScaler
    from chunksel.nn.prototype import PrototypeMLP
    from chunksel.selectors.prototype import PrototypeSelector

    torch.manual_seed(seed)
    sel = PrototypeSelector(blocks="hs+rw+chunk", k=LAYOUT["k"])
    sel.layout_ = FeatureLayout(**LAYOUT, blocks=("hs", "rw", "chunk"))
    sel.model_ = PrototypeMLP(DIMS[0], DIMS[-1], hidden=DIMS[1], depth=len(DIMS) - 2).eval()
    sel.scaler_ = StandardScaler(np.zeros(DIMS[0], dtype=np.float32), np.ones(DIMS[0], dtype=np.float32))
    sel.feature_mask_ = np.ones(DIMS[0], dtype=bool)
    sel.fitted_ = True
    return sel


def time_saved_model(args: argparse.Namespace, rng: np.random.Generator) -> dict:
    """A saved selector's int8 graph at batch 1, in this fresh process: on its real test
    instances when given (cycled), else on random inputs of its shapes."""
    from chunksel.selectors.prototype import PrototypeSelector

    sel = PrototypeSelector.load(args.model, quantize="int8", engine="onnxruntime")
    runner = sel._inference_model()
    lay = sel.layout_
    if args.instances:
        from selector_latency import graph_feeds  # this folder is on sys.path when run as a script

        from chunksel.data.instances import load_instances
        from chunksel.features.store import FeatureStore

        if runner.input_names != ["e"] and not args.features:
            raise SystemExit("this model uses h/r: pass --features")
        feeds = graph_feeds(sel, load_instances(args.instances, "test"),
                            FeatureStore(args.features) if args.features else None)
        inputs = "real test instances"
    else:
        e = rng.normal(size=(256, lay.k, lay.d_e)).astype(np.float32)
        e /= np.linalg.norm(e, axis=2, keepdims=True)
        h = rng.normal(size=(256, lay.d_h)).astype(np.float32)
        r = rng.random((256, lay.d_r), dtype=np.float32)
        feeds = [{"e": e[i : i + 1], "h": h[i : i + 1], "r": r[i : i + 1]} for i in range(256)]
        feeds = [{k: v for k, v in f.items() if k in runner.input_names} for f in feeds]
        inputs = "random inputs"

    def cycling(fn):  # each call takes the next instance's inputs
        count = iter(range(10**9))
        return lambda: fn(feeds[next(count) % len(feeds)])

    graph = cycling(lambda f: runner.session.run(["scores"], f))
    arrays = cycling(lambda f: sel.score_arrays(f.get("h"), f.get("r"), f["e"]))

    return {
        "path": str(args.model), "inputs": inputs, "n_inputs": len(feeds),
        "session_run_p50_us": round(p50_us(graph, args.calls, warmup=min(50, args.calls)), 1),
        "score_arrays_p50_us": round(p50_us(arrays, args.calls, warmup=min(50, args.calls)), 1),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "int8_kernels.json"))
    ap.add_argument("--model", help="also time this saved prototype selector's int8 graph (chunksel train --out DIR)")
    ap.add_argument("--instances", help="with --model: its test instances (load_instances folder) as inputs")
    ap.add_argument("--features", help="with --instances: the FeatureStore folder with their h and r")
    args = ap.parse_args(argv)

    import onnxruntime as ort
    import torch

    torch.set_num_threads(1)
    from chunksel.export.prototype import OnnxPrototype, prototype_graph

    rng = np.random.default_rng(0)
    out: dict = {
        "benchmark": "int8_kernels",
        "command": " ".join(["int8_kernels.py", *(argv if argv is not None else sys.argv[1:])]),
        "date": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "machine": {"cpu": platform.processor() or platform.machine(), "threads": 1,
                    "onnxruntime": ort.__version__, "numpy": np.__version__},
        "calls": args.calls,
    }

    stream = []
    for mb in (4, 7, 28):
        cols = 256
        mat = rng.random((int(mb * 1e6 / 4 / cols), cols), dtype=np.float32)
        vec = np.ones(cols, dtype=np.float32)
        us = p50_us(lambda m=mat, v=vec: m @ v, args.calls // 4)
        stream.append({"weights_mb": mb, "p50_us": round(us, 1), "gb_per_s": round(mat.nbytes / us / 1e3, 1)})
    out["stream"] = stream

    shapes = list(zip(DIMS[:-1], DIMS[1:]))
    mmi = []
    for k, n in shapes:
        sess = session(matmulinteger_graph([(k, n)], rng), ort)
        x = rng.integers(0, 256, size=(1, k), dtype=np.uint8)
        us = p50_us(lambda s=sess, f={"x": x}: s.run(None, f), args.calls)
        mmi.append({"shape": [k, n], "regime": "hot", "p50_us": round(us, 1), "gb_per_s": round(k * n / us / 1e3, 1)})
    sess = session(matmulinteger_graph(shapes, rng), ort)
    x = rng.integers(0, 256, size=(1, DIMS[0]), dtype=np.uint8)
    total = sum(k * n for k, n in shapes)
    us = p50_us(lambda: sess.run(None, {"x": x}), args.calls)
    mmi.append({"shape": "all four layers", "regime": "chain", "p50_us": round(us, 1),
                "weights_mb": round(total / 1e6, 2), "gb_per_s": round(total / us / 1e3, 1)})
    out["matmulinteger"] = mmi

    sel = prototype_with_real_shapes()
    runner = OnnxPrototype(prototype_graph(sel, "int8"), threads=1)
    h = rng.normal(size=(1, LAYOUT["d_h"])).astype(np.float32)
    r = rng.random((1, LAYOUT["d_r"]), dtype=np.float32)
    e = rng.normal(size=(1, LAYOUT["k"], LAYOUT["d_e"])).astype(np.float32)
    e /= np.linalg.norm(e, axis=2, keepdims=True)
    feeds = {"h": h, "r": r, "e": e}
    out["graph"] = {
        "n_parameters": int(sum(p.numel() for p in sel.model_.parameters())),
        "session_run_p50_us": round(p50_us(lambda: runner.session.run(["scores"], feeds), args.calls), 1),
        "onnxprototype_scores_p50_us": round(p50_us(lambda: runner.scores(h, r, e), args.calls), 1),
    }

    if args.model:
        out["model"] = time_saved_model(args, rng)

    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'what':<34}{'p50 us':>10}{'GB/s':>8}")
    for s in stream:
        print(f"{'fp32 GEMV, ' + str(s['weights_mb']) + ' MB':<34}{s['p50_us']:>10.1f}{s['gb_per_s']:>8.1f}")
    for m in mmi:
        name = f"MatMulInteger {m['shape']} {m['regime']}"
        print(f"{name:<34}{m['p50_us']:>10.1f}{m['gb_per_s']:>8.1f}")
    for key in ("session_run_p50_us", "onnxprototype_scores_p50_us"):
        print(f"{'int8 graph: ' + key.removesuffix('_p50_us'):<34}{out['graph'][key]:>10.1f}")
    if "model" in out:
        for key in ("session_run_p50_us", "score_arrays_p50_us"):
            print(f"{'saved model: ' + key.removesuffix('_p50_us'):<34}{out['model'][key]:>10.1f}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
