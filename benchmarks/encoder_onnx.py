"""Do the selectors keep their accuracy when MiniLM runs on ONNX Runtime (int8, fp32)?

Writes ``benchmarks/results/encoder_onnx.json``.

    nice -n 5 python benchmarks/encoder_onnx.py            # popqa, the full profile's size

PopQA is built as the full profile builds it (``limit=3000``, K=5 wiki-w100 passages);
LambdaMART and the anchored selector without generator blocks
(``q+chunk+letor+lambdamart``, one member) are trained on its training split with the
shipped MiniLM embeddings, as the benchmark trains them. On the test split the question
and every candidate (``title + " " + text``, as the corpus was embedded) are embedded
again by each encoder - sentence-transformers (torch), ONNX fp32 and ONNX int8 - and each
selector scores the test instances with those embeddings (retrieval scores ``q . e``
from the same encoder; the candidates themselves stay the retriever's). Reported per
selector and encoder: rank-1 accuracy on answerable questions, and its difference from
sentence-transformers (the target: within 0.3 point for int8); per encoder the cosine to
the sentence-transformers embedding of each text (min, p1, mean) and the encoding time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "encoder_onnx.json"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="popqa")
    ap.add_argument("--limit", type=int, default=3000, help="questions built (the full profile: 3000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import torch

    from chunksel.build import build_instances
    from chunksel.eval.metrics import evaluate
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.onnx_encoder import OnnxEncoder
    from chunksel.selectors import make_selector
    from chunksel.types import candidate_mask, label_matrix

    started = time.perf_counter()
    load_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    built = build_instances(args.dataset, k=5, limit=args.limit, seed=args.seed, progress=False)
    train = [i for i in built.instances if i.split == "train"]
    val = [i for i in built.instances if i.split == "val"]
    test = [i for i in built.instances if i.split == "test"]
    selectors = {
        "lambdamart": make_selector("lambdamart", progress=False),
        "anchored": make_selector("anchored", blocks="q+chunk+letor+lambdamart", members=1, progress=False),
    }
    for sel in selectors.values():
        sel.fit(train, None, val)

    questions = [i.question.text for i in test]
    chunks = [f"{c.title} {c.text}".strip() for i in test for c in i.candidates]
    encoders = {"sentence-transformers": Encoder(), "onnx-fp32": OnnxEncoder(quantize="fp32", threads=2),
                "onnx-int8": OnnxEncoder(quantize="int8", threads=2)}
    torch.set_num_threads(2)
    vectors, timing = {}, {}
    for name, enc in encoders.items():
        enc.encode(["warm up"], progress=False)
        t = time.perf_counter()
        vectors[name] = (enc.encode(questions, progress=False), enc.encode(chunks, progress=False))
        timing[name] = round(time.perf_counter() - t, 1)

    def with_vectors(qv: np.ndarray, cv: np.ndarray) -> list:
        out, at = [], 0
        for n, inst in enumerate(test):
            cands = []
            for c in inst.candidates:
                cands.append(replace(c, embedding=cv[at], score=float(qv[n] @ cv[at])))
                at += 1
            out.append(replace(inst, question=replace(inst.question, embedding=qv[n]), candidates=cands))
        return out

    ref_q, ref_c = vectors["sentence-transformers"]
    results: dict = {"selectors": {}, "encoders": {}}
    for name, (qv, cv) in vectors.items():
        cos = np.concatenate([(qv * ref_q).sum(1), (cv * ref_c).sum(1)])
        results["encoders"][name] = {"encode_s": timing[name], "texts": int(cos.size),
                                     "cosine_to_st": {"min": round(float(cos.min()), 5),
                                                      "p1": round(float(np.percentile(cos, 1)), 5),
                                                      "mean": round(float(cos.mean()), 5)}}
    batches = {name: with_vectors(*v) for name, v in vectors.items()}
    for sname, sel in selectors.items():
        row = {}
        for ename, batch in batches.items():
            scores = sel.score(batch)
            res = evaluate(scores, label_matrix(batch, k=scores.shape[1]), candidate_mask(batch, k=scores.shape[1]))
            row[ename] = {"accuracy": round(100 * res["accuracy"], 2), "answerable": res["answerable"]}
        base = row["sentence-transformers"]["accuracy"]
        for ename in row:
            row[ename]["delta_points"] = round(row[ename]["accuracy"] - base, 2)
        results["selectors"][sname] = row
        print(sname, json.dumps(row), flush=True)
    import onnxruntime

    out = {
        "benchmark": "encoder_onnx", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["nice -n 5 python benchmarks/encoder_onnx.py", *sys.argv[1:]]),
        "data": {"dataset": args.dataset, "limit": args.limit, "k": 5, "train": len(train), "val": len(val),
                 "test": len(test)},
        "target": "int8 rank-1 within 0.3 point of sentence-transformers; cosine >= 0.99 per text",
        **results,
        "machine": {"cpus": os.cpu_count(), "uptime_start": load_start,
                    "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "onnxruntime": onnxruntime.__version__},
        "total_s": round(time.perf_counter() - started, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
