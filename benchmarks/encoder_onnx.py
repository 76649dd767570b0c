"""Do the selectors keep their accuracy when MiniLM runs on ONNX Runtime (int8, fp32)?

Writes ``benchmarks/results/encoder_onnx.json``.

    nice -n 5 python benchmarks/encoder_onnx.py            # the six datasets, full profile size

Each dataset is built as the full profile builds it (``limit=3000``, K=5 retrieved
passages); LambdaMART and the anchored selector without generator blocks
(``q+chunk+letor+lambdamart``, one member) are trained on its training split with the
shipped MiniLM embeddings, as the benchmark trains them. On the test split the question
and every candidate (``title + " " + text``, as the corpus was embedded) are embedded
again by each encoder - sentence-transformers (torch), ONNX fp32 and ONNX int8 - and each
selector scores the test instances with those embeddings (retrieval scores ``q . e``
from the same encoder; the candidates themselves stay the retriever's). Reported per
dataset and selector: rank-1 accuracy on answerable questions, its difference from
sentence-transformers (the target: within 0.3 point for int8) and the questions that
flip; pooled over the datasets, the difference with its paired bootstrap interval. Per
encoder the cosine to the sentence-transformers embedding of each text (min, p1, mean)
and the encoding time (two threads).
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


def run_dataset(name: str, limit: int, seed: int, encoders: dict) -> dict:
    from chunksel.build import build_instances
    from chunksel.eval.metrics import evaluate, per_instance_hits
    from chunksel.selectors import make_selector
    from chunksel.types import candidate_mask, label_matrix

    built = build_instances(name, k=5, limit=limit, seed=seed, progress=False)
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
    vectors, timing = {}, {}
    for ename, enc in encoders.items():
        t = time.perf_counter()
        vectors[ename] = (enc.encode(questions, progress=False), enc.encode(chunks, progress=False))
        timing[ename] = round(time.perf_counter() - t, 1)

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
    res: dict = {"data": {"limit": limit, "k": 5, "train": len(train), "val": len(val), "test": len(test)},
                 "selectors": {}, "encoders": {}}
    for ename, (qv, cv) in vectors.items():
        cos = np.concatenate([(qv * ref_q).sum(1), (cv * ref_c).sum(1)])
        res["encoders"][ename] = {"encode_s": timing[ename], "texts": int(cos.size),
                                  "cosine_to_st": {"min": round(float(cos.min()), 5),
                                                   "p1": round(float(np.percentile(cos, 1)), 5),
                                                   "mean": round(float(cos.mean()), 5)},
                                  "_cos": cos}
    batches = {ename: with_vectors(*v) for ename, v in vectors.items()}
    answerable = np.array([i.answerable() for i in test])
    for sname, sel in selectors.items():
        row = {}
        for ename, batch in batches.items():
            scores = sel.score(batch)
            lab, mask = label_matrix(batch, k=scores.shape[1]), candidate_mask(batch, k=scores.shape[1])
            ev = evaluate(scores, lab, mask)
            row[ename] = {"accuracy": round(100 * ev["accuracy"], 2), "answerable": ev["answerable"],
                          "_hits": per_instance_hits(scores, lab, mask)[answerable]}
        ref = row["sentence-transformers"]["_hits"]
        for r in row.values():
            r["delta_points"] = round(r["accuracy"] - row["sentence-transformers"]["accuracy"], 2)
            r["flips"] = {"lost": int((ref & ~r["_hits"]).sum()), "gained": int((~ref & r["_hits"]).sum())}
        res["selectors"][sname] = row
        print(name, sname, json.dumps({e: (r["accuracy"], r["flips"]) for e, r in row.items()}), flush=True)
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", default="triviaqa,popqa,msmarco,nq,squad2,hotpotqa")
    ap.add_argument("--limit", type=int, default=3000, help="questions built (the full profile: 3000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()
    import onnxruntime
    import torch

    from chunksel.eval.significance import paired_bootstrap
    from chunksel.export.encoder import default_dir
    from chunksel.retrieval.encoder import Encoder
    from chunksel.retrieval.onnx_encoder import OnnxEncoder

    started = time.perf_counter()
    load_start = subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    encoders = {"sentence-transformers": Encoder(), "onnx-fp32": OnnxEncoder(quantize="fp32", threads=2),
                "onnx-int8": OnnxEncoder(quantize="int8", threads=2)}
    torch.set_num_threads(2)
    for enc in encoders.values():
        enc.encode(["warm up"], progress=False)
    per = {name: run_dataset(name, args.limit, args.seed, encoders) for name in args.datasets.split(",")}

    pooled: dict = {"selectors": {}, "encoders": {}}
    for ename in encoders:
        cos = np.concatenate([per[d]["encoders"][ename].pop("_cos") for d in per])
        pooled["encoders"][ename] = {"texts": int(cos.size), "cosine_to_st": {
            "min": round(float(cos.min()), 5), "p1": round(float(np.percentile(cos, 1)), 5),
            "mean": round(float(cos.mean()), 5), "below_0.99": int((cos < 0.99).sum())}}
    for sname in ("lambdamart", "anchored"):
        ref = np.concatenate([per[d]["selectors"][sname]["sentence-transformers"]["_hits"] for d in per])
        row = {}
        for ename in encoders:
            hits = np.concatenate([per[d]["selectors"][sname][ename]["_hits"] for d in per])
            diff, lo, hi = paired_bootstrap(hits, ref)
            row[ename] = {"accuracy": round(100 * float(hits.mean()), 2), "answerable": int(hits.size),
                          "delta_points": round(100 * diff, 2), "delta_ci95": [round(100 * lo, 2), round(100 * hi, 2)],
                          "flips": {"lost": int((ref & ~hits).sum()), "gained": int((~ref & hits).sum())},
                          "datasets_within_0.3": sum(abs(per[d]["selectors"][sname][ename]["delta_points"]) <= 0.3
                                                     for d in per)}
        pooled["selectors"][sname] = row
        for d in per:
            for r in per[d]["selectors"][sname].values():
                r.pop("_hits")
    meta = json.loads((default_dir(encoders["onnx-int8"].model_id) / "meta.json").read_text())
    out = {
        "benchmark": "encoder_onnx", "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(["nice -n 5 python benchmarks/encoder_onnx.py", *sys.argv[1:]]),
        "target": "int8 rank-1 within 0.3 point of sentence-transformers; cosine >= 0.99 per text",
        "int8_recipe": meta.get("int8"),
        "pooled": pooled, "datasets": per,
        "machine": {"cpus": os.cpu_count(), "uptime_start": load_start,
                    "uptime_end": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
                    "python": platform.python_version(), "torch": torch.__version__,
                    "onnxruntime": onnxruntime.__version__},
        "total_s": round(time.perf_counter() - started, 1),
    }
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps(pooled, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
