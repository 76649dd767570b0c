"""Which int8 graph of the MiniLM encoder: speed and per-text cosine of the candidate recipes.

Writes ``benchmarks/results/encoder_int8_recipes.json`` (the table of
``docs/decisions/encoder-int8-recipe.md``).

    nice -n 5 python benchmarks/encoder_int8_recipes.py   # idle machine: it times one thread

Texts: the first ``--questions`` questions of a split (``--split``, default test) of PopQA, NQ and SQuAD 2.0 as the full
profile builds them (``limit=3000``, K=5), each with its 5 chunks (``title + " " + text``,
as the corpus was embedded). Every graph is made from the one fp32 export by ONNX
Runtime's dynamic quantisation (8-bit per-channel weights; 7-bit where the CPU's int8
kernels may saturate) with the settings its row names; each text is encoded alone (as the
int8 encoder does), one thread, and the graphs are timed in turn on the same question
(interleaved, so machine noise falls on all of them alike). Reported per graph: p50/p95 of
question + 5 chunks, the cosine to sentence-transformers per text (min, p1, mean) and the
texts below 0.99.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
DATASETS = ("popqa", "nq", "squad2")


def texts(questions: int, seed: int, split: str) -> list[list[str]]:
    from chunksel.build import build_instances

    groups = []
    for name in DATASETS:
        built = build_instances(name, k=5, limit=3000, seed=seed, progress=False)
        chosen = [i for i in built.instances if i.split == split][:questions]
        groups += [[i.question.text] + [f"{c.title} {c.text}".strip() for c in i.candidates] for i in chosen]
    return groups


def graphs(folder: Path, work: Path) -> dict[str, tuple[Path, str]]:
    """name -> (graph file, session kind: "int8" leaves SkipLayerNorm fusion off)."""
    import onnx

    from chunksel.export.encoder import (
        ffn_output_matmuls,
        outlier_channels,
        quantize_matmuls,
        split_outlier_channels,
    )

    fp32 = folder / "encoder.fp32.onnx"
    names = [n.name for n in ffn_output_matmuls(onnx.load(str(fp32)))]
    quantize_matmuls(fp32, work / "r4.onnx", fp32_nodes=names[:4])
    quantize_matmuls(fp32, work / "all.onnx")
    peaks = outlier_channels(fp32, folder / "tokenizer.json", 256, n=1536)  # every channel, by calibrated peak
    split = {
        # recipe 5: channels whose peak exceeds twice the layer's 16th-largest (1-2 in layers 0-3)
        "r5": {k: v[:2] if k == 2 else v[:1] if k < 4 else [] for k, v in peaks.items()},
        "r4top": {k: v[:4] for k, v in peaks.items()},
        "r6": outlier_channels(fp32, folder / "tokenizer.json", 256),  # the shipped one: top 8
    }
    for name, channels in split.items():
        model, keep = split_outlier_channels(onnx.load(str(fp32)), channels)
        onnx.save(model, str(work / "split.fp32.onnx"))
        quantize_matmuls(work / "split.fp32.onnx", work / f"{name}.onnx", fp32_nodes=keep)
    return {
        "fp32": (fp32, "fp32"),
        "first four FFN outputs fp32 (recipe 4)": (work / "r4.onnx", "fp32"),
        "first four FFN outputs fp32, SkipLayerNorm fusion off": (work / "r4.onnx", "int8"),
        "every weight MatMul int8, SkipLayerNorm fusion off": (work / "all.onnx", "int8"),
        "1-2 outlier channels split off in layers 0-3 (recipe 5)": (work / "r5.onnx", "int8"),
        "top 4 channels split off per layer": (work / "r4top.onnx", "int8"),
        "top 8 channels split off per layer, SkipLayerNorm fusion on": (work / "r6.onnx", "fp32"),
        "top 8 channels split off per layer, SkipLayerNorm fusion off (recipe 6, shipped)": (work / "r6.onnx", "int8"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--questions", type=int, default=100, help="questions per dataset (default 100)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--split", choices=("train", "val", "test"), default="test",
                    help="whose texts (default test; the recipe was chosen on train and val texts)")
    ap.add_argument("--out", type=Path, default=None, help="default results/encoder_int8_recipes[_<split>].json")
    args = ap.parse_args()
    if args.questions < 1:
        ap.error(f"--questions must be >= 1, got {args.questions}")
    args.out = args.out or RESULTS / ("encoder_int8_recipes.json" if args.split == "test"
                                      else f"encoder_int8_recipes_{args.split}.json")

    import onnxruntime as ort

    from chunksel.export.encoder import default_dir, load_tokenizer, session
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    load_before = os.getloadavg()[0]
    groups = texts(args.questions, args.seed, args.split)
    flat = [t for g in groups for t in g]
    want = Encoder().encode(flat, progress=False)
    enc = OnnxEncoder(quantize="fp32").load()  # exports the graphs when absent
    folder = default_dir(enc.model_id)
    tok = load_tokenizer(folder / "tokenizer.json", 256)
    with tempfile.TemporaryDirectory() as tmp:
        made = graphs(folder, Path(tmp))
        sessions = {name: session(path, kind, threads=1) for name, (path, kind) in made.items()}
        rows = [np.asarray([e.ids[: sum(e.attention_mask)]], dtype=np.int64) for e in tok.encode_batch(flat)]
        times: dict[str, list[float]] = {name: [] for name in sessions}
        got: dict[str, list[np.ndarray]] = {name: [] for name in sessions}
        for s in sessions.values():  # warm-up
            s.run(None, {"input_ids": rows[0], "attention_mask": np.ones_like(rows[0])})
        start = 0
        for g in groups:
            batch = rows[start: start + len(g)]
            start += len(g)
            for name, s in sessions.items():
                t = time.perf_counter()
                out = [s.run(None, {"input_ids": r, "attention_mask": np.ones_like(r)})[0][0] for r in batch]
                times[name].append((time.perf_counter() - t) * 1e3)
                got[name] += out
    result = {"about": {"datasets": list(DATASETS), "split": args.split, "questions_per_dataset": args.questions,
                        "texts": len(flat), "mean_tokens": round(float(np.mean([r.shape[1] for r in rows])), 1),
                        "threads": 1, "onnxruntime": ort.__version__, "machine": platform.processor() or platform.machine(),
                        "load_before": load_before, "commit": subprocess.run(
                            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip(),
                        "date": datetime.now(timezone.utc).isoformat(timespec="seconds")}, "graphs": {}}
    for name in sessions:
        cos = (np.asarray(got[name]) * want).sum(1)
        t = np.asarray(times[name])
        result["graphs"][name] = {"question_and_5_chunks_ms": {"p50": round(float(np.median(t)), 2),
                                                               "p95": round(float(np.percentile(t, 95)), 2)},
                                  "cosine": {"min": round(float(cos.min()), 5), "p1": round(float(np.percentile(cos, 1)), 5),
                                             "mean": round(float(cos.mean()), 5)},
                                  "texts_below_0.99": int((cos < 0.99).sum())}
        r = result["graphs"][name]
        print(f"{name:75s} p50 {r['question_and_5_chunks_ms']['p50']:6.1f} ms  min cos {r['cosine']['min']:.4f}"
              f"  below 0.99: {r['texts_below_0.99']}", flush=True)
    result["about"]["load_after"] = os.getloadavg()[0]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
