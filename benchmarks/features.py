"""Throughput of the generator warm-up pass with and without feature extraction.

For SmolLM2-135M-Instruct (dense, viewed as 30 x 64 experts) on real TriviaQA dev
questions, and for a random-initialised OLMoE of the OLMoE-1B-7B layout scaled down
(16 layers, 64 experts, top-8; hidden 2048 -> 256, expert intermediate 1024 -> 128,
16 -> 4 heads, SmolLM2's vocabulary), measures questions/s at batch 1 and batch 32 for

- ``plain``: the warm-up forward (``use_cache=False``, last-token logits only), and
- ``extract``: the same forward with the ``h`` / ``r`` hooks
  (:func:`chunksel.features.extract.forward_with_features`),

on identical padded batches (prompts sorted by length, as ``extract_features`` does),
alternating which of the two runs first per batch. ``overhead`` = extract time / plain
time over the whole run. Writes ``benchmarks/results/features.json``.

Usage: ``python benchmarks/features.py --threads 2 [--n 200] [--n1 50] [--skip-olmoe]``
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

from chunksel.config import data_root
from chunksel.features.adapters import make_adapter
from chunksel.features.extract import forward_with_features, pad_batch, tokenizer_pad_id
from chunksel.llm.models import load_generator
from chunksel.llm.prompts import question_prompt_ids
from chunksel.threads import set_threads

OLMOE_SCALED = dict(
    num_hidden_layers=16, num_experts=64, num_experts_per_tok=8, hidden_size=256,
    intermediate_size=128, num_attention_heads=4, num_key_value_heads=4,
    max_position_embeddings=4096, tie_word_embeddings=False,
)


def trivia_questions(n: int) -> list[str]:
    path = data_root() / "qa" / "triviaqa" / "topics.dpr.trivia.dev.txt"
    out = []
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh, delimiter="\t"):
            if row and row[0].strip():
                out.append(row[0])
            if len(out) >= n:
                break
    return out


def _percentiles(xs: list[float]) -> dict[str, float]:
    return {"p50_s": float(np.percentile(xs, 50)), "p95_s": float(np.percentile(xs, 95))}


def measure(model, tok, questions: list[str], batch_size: int, progress: bool) -> dict:
    """Time plain vs extracting forwards on the same batches (alternating order)."""
    adapter = make_adapter(model)
    prompts = sorted((question_prompt_ids(tok, q) for q in questions), key=len)
    batches = [prompts[i:i + batch_size] for i in range(0, len(prompts), batch_size)]
    pad = tokenizer_pad_id(tok)
    kw = {"use_cache": False, "logits_to_keep": 1}

    def plain(batch):
        ids, mask, pos = pad_batch(batch, pad)
        out = model(input_ids=ids, attention_mask=mask, position_ids=pos, **kw)
        return out.logits

    def extract(batch):
        h, r, _ = forward_with_features(model, adapter, batch, pad, **kw)
        return h.numpy(), r.numpy()

    t_plain, t_extract = [], []
    with torch.inference_mode():
        plain(batches[0])  # warm-up of both paths (allocations, cached QR factors)
        extract(batches[0])
        for k, batch in enumerate(batches):
            order = (("plain", plain), ("extract", extract))
            for name, fn in order if k % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                fn(batch)
                (t_plain if name == "plain" else t_extract).append(time.perf_counter() - t0)
            if progress:
                print(f"\r  batch {batch_size}: {k + 1}/{len(batches)}", end="", file=sys.stderr)
    if progress:
        print(file=sys.stderr)
    n = len(prompts)
    return {
        "batch_size": batch_size,
        "questions": n,
        "mean_prompt_tokens": float(np.mean([len(p) for p in prompts])),
        "plain_q_per_s": n / sum(t_plain),
        "extract_q_per_s": n / sum(t_extract),
        "overhead": sum(t_extract) / sum(t_plain),
        "batch_overhead_median": statistics.median(e / p for e, p in zip(t_extract, t_plain,
                                                                          strict=True)),
        "plain_batch": _percentiles(t_plain),
        "extract_batch": _percentiles(t_extract),
        "r_dim": adapter.r_dim,
        "layers_used": len(adapter.layers),
        "experts_per_layer": adapter.n_experts,
    }


def scaled_olmoe(vocab_size: int, seed: int = 0):
    import transformers as tf

    torch.manual_seed(seed)
    cfg = tf.OlmoeConfig(vocab_size=vocab_size, **OLMOE_SCALED)
    return tf.OlmoeForCausalLM(cfg).eval()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--n", type=int, default=200, help="TriviaQA dev questions")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--n1", type=int, default=None,
                    help="questions for batch size 1 (default: --n; batch 1 is slow)")
    ap.add_argument("--olmoe-n", type=int, default=64, help="questions for the OLMoE run")
    ap.add_argument("--skip-olmoe", action="store_true")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "features.json"))
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    set_threads(args.threads)
    questions = trivia_questions(args.n)
    model, tok, gen_id = load_generator()
    n1 = args.n1 or args.n

    def subset(qs: list[str], b: int) -> list[str]:
        return qs[:n1] if b == 1 else qs

    runs = {gen_id: [measure(model, tok, subset(questions, b), b, not args.quiet)
                     for b in args.batch_sizes]}
    if not args.skip_olmoe:
        olmoe = scaled_olmoe(len(tok))
        name = "olmoe-1b-7b-layout-scaled(random)"
        runs[name] = [measure(olmoe, tok, subset(questions[: args.olmoe_n], b), b,
                              not args.quiet)
                      for b in args.batch_sizes]
    result = {
        "benchmark": "features",
        "threads": args.threads,
        "torch": torch.__version__,
        "transformers": __import__("transformers").__version__,
        "machine": platform.machine(),
        "olmoe_scaled_config": OLMOE_SCALED,
        "runs": runs,
    }
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(f"{'model':42s} {'batch':>5s} {'plain q/s':>10s} {'extract q/s':>12s} {'overhead':>9s}")
    for name, rows in runs.items():
        for row in rows:
            print(f"{name:42s} {row['batch_size']:5d} {row['plain_q_per_s']:10.2f} "
                  f"{row['extract_q_per_s']:12.2f} {row['overhead']:9.3f}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
