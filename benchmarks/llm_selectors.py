"""The LLM selectors of the utility-selection paper on real candidate lists, and their
distillation into a small selector.

**Selection** (``--part select``): for NQ and HotpotQA, the ``--candidates`` (20) top
passages of the MiniLM + FAISS flat retriever (the ``limit=500`` question sample of the
quick profile, built with ``k=20``); from its test split, the ``--questions`` questions
with the smallest sha256 of their id among those that carry the gold source (NQ oracle
gold passages, HotpotQA supporting paragraphs; both are the label source ``gold``).
On each, with the local backend (SmolLM2-135M-Instruct GGUF unless ``--model``):

- ``rankgpt``: listwise permutation (window 20, step 10), read from the generated text;
- ``utility``: pseudo-answer + selection per window (window 20, carry 10), dynamic k;
  on the local backend the selection is read from Yes/No log-probabilities per passage
  given the window's pseudo-answer (see :mod:`chunksel.llm.listwise`).

Conditions compared on the same questions: retrieval order top-1 / top-5 / top-k with k
= utility's k for that question ("matched"), rankgpt top-1 / top-5 / top-k matched, and
utility's own selection. Per condition: evidence precision, recall and micro-F1 against
the gold passages (micro: sums over questions; recall's denominator is the gold passages
among the candidates, the most any selector can find — the share of gold passages that
the candidate list holds is reported beside it), the answer table's exact match and token
F1 (:func:`chunksel.study.answer_table.answer_table`, SmolLM2 as the generator, the chosen
passages in the prompt), the distribution of k, and per query the LLM calls, prompt
tokens and seconds.

**Distillation** (``--part distill``): on HotpotQA's K = 5 store (the quick profile's
``limit=500``), the utility teacher labels ``--distill-train`` training questions and
``--distill-test`` test questions (:mod:`chunksel.labels.utility`; the sidecar is written,
so ``--label utility`` sees it). Each student (:data:`STUDENTS`: the anchored selector
on retriever embeddings only and with its default blocks, the paper prototype, SRAS's
supervised warm-up) is trained on the same training questions once on the teacher's
``utility`` labels and once on answer ``containment`` labels, over ``--distill-seeds``,
and evaluated on the same test questions under ``utility``, ``containment`` and ``gold``
(rank-1 accuracy, MRR on answerable questions).

Every LLM call goes through the response cache and every answer through the answer
cache: a killed run resumes, a rerun is free. Writes
``benchmarks/results/llm_selectors.json`` and ``.md``.

    nice -n 19 python benchmarks/llm_selectors.py [--questions 10] [--part select distill]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "llm_selectors.json"
_T0 = time.perf_counter()


def stage(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def sample(instances, n: int, source: str = "gold"):
    pool = [i for i in instances if all(source in c.labels for c in i.candidates)]
    pool.sort(key=lambda i: hashlib.sha256(i.id.encode()).hexdigest())
    return pool[:n]


def evidence(instances, picks, source: str = "gold") -> dict:
    """Micro precision / recall / F1 of the picks against ``source`` positives."""
    hits = chosen = gold = 0
    for inst, pick in zip(instances, picks, strict=True):
        lab = inst.labels(source)
        hits += int(sum(lab[j] for j in pick))
        chosen += len(pick)
        gold += int(lab.sum())
    p = hits / chosen if chosen else 0.0
    r = hits / gold if gold else 0.0
    f = 2 * p * r / (p + r) if p + r else 0.0
    return {"precision": round(p, 4), "recall": round(r, 4), "f1": round(f, 4), "selected": chosen,
            "hits": hits, "gold_in_candidates": gold, "mean_k": round(chosen / len(instances), 3)}


def cost(runs) -> dict:
    n = len(runs)
    return {
        "queries": n,
        "calls_per_query": round(sum(r.calls for r in runs) / n, 2),
        "prompt_tokens_per_query": round(sum(r.prompt_tokens for r in runs) / n, 1),
        "output_tokens_per_query": round(sum(r.output_tokens for r in runs) / n, 1),
        "llm_seconds_per_query": round(sum(r.seconds for r in runs) / n, 2),
        "windows_per_query": round(sum(len(r.windows) for r in runs) / n, 2),
        "cached_call_share_this_run": round(sum(r.cached for r in runs) / max(1, sum(r.calls for r in runs)), 3),
        "repairs": {k: sum(r.repairs.to_dict()[k] for r in runs) for k in runs[0].repairs.to_dict()},
        "outputs_repaired": sum(r.repairs.malformed() for r in runs),
        "text_repairs": {k: sum(r.text_repairs.to_dict()[k] for r in runs) for k in runs[0].text_repairs.to_dict()},
    }


def part_select(args, backend) -> dict:
    from chunksel.build import build_instances
    from chunksel.llm.listwise import ListwiseLLM
    from chunksel.study.answer_table import answer_table

    out = {}
    llm_text = ListwiseLLM(backend, read="text", max_new_tokens=args.max_new_tokens)
    llm_util = ListwiseLLM(backend, read=args.read, max_new_tokens=args.max_new_tokens)
    for ds in args.datasets:
        stage(f"{ds}: building k={args.candidates} candidate lists (limit {args.limit})")
        built = build_instances(ds, k=args.candidates, limit=args.limit, progress=False)
        test = [i for i in built.instances if i.split == "test"]
        insts = sample(test, args.questions)
        stage(f"{ds}: {len(insts)} questions of {len(test)} test questions")
        rank_runs, util_runs = [], []
        for n, inst in enumerate(insts, 1):
            a = (inst.id, inst.question.text, [c.text for c in inst.candidates],
                 [c.id for c in inst.candidates], [c.title for c in inst.candidates])
            rank_runs.append(llm_text.rank(*a))
            util_runs.append(llm_util.select(*a))
            stage(f"{ds} {n}/{len(insts)}: rankgpt {rank_runs[-1].seconds:.1f}s "
                  f"({rank_runs[-1].repairs.total()} repairs), utility k={util_runs[-1].k} "
                  f"{util_runs[-1].seconds:.1f}s")
        ks = [r.k for r in util_runs]
        picks = {
            "retrieval_top1": [[0] for _ in insts],
            "retrieval_top5": [list(range(min(5, len(i.candidates)))) for i in insts],
            "retrieval_topk_matched": [list(range(k)) for k in ks],
            "rankgpt_top1": [r.order[:1] for r in rank_runs],
            "rankgpt_top5": [r.order[:5] for r in rank_runs],
            "rankgpt_topk_matched": [r.order[:k] for r, k in zip(rank_runs, ks, strict=True)],
            "utility": [list(r.order) for r in util_runs],
        }
        ev = {name: evidence(insts, p) for name, p in picks.items()}
        gold_total = sum(max(len(i.question.gold_ids), len(i.question.gold_texts)) for i in insts)
        entry = {
            "questions": len(insts), "test_questions": len(test), "candidates": args.candidates,
            "gold_in_candidates": ev["utility"]["gold_in_candidates"], "gold_passages_listed": gold_total,
            "questions_with_gold_in_candidates": sum(bool(i.labels("gold").any()) for i in insts),
            "evidence": ev,
            "k_distribution": dict(sorted(Counter(ks).items())),
            "empty_selections": sum(r.empty for r in util_runs),
            "cost": {"rankgpt": cost(rank_runs), "utility": cost(util_runs)},
            "runs": {"rankgpt": [r.to_dict() for r in rank_runs], "utility": [r.to_dict() for r in util_runs]},
        }
        if not args.no_answers and (args.answer_datasets is None or ds in args.answer_datasets):
            stage(f"{ds}: answers")
            table = answer_table(insts, picks, generator=backend, references=("no_context",), label="gold",
                                 max_new_tokens=32, noreuse_pairs=0, progress=False, keep_answers=False)
            entry["answers"] = {name: {"em": c["em"], "f1": c["f1"], "acc": c["acc"], "chunks": c["chunks"]}
                                for name, c in table["conditions"].items()}
            entry["answer_cache"] = table["cache"]
        out[ds] = entry
        RESULTS.with_suffix(".partial.json").write_text(json.dumps(out, indent=1))
    llm_text.close()
    llm_util.close()
    RESULTS.with_suffix(".partial.json").unlink(missing_ok=True)
    return out


#: the distillation students: each is trained once on the teacher's labels and once on
#: containment labels (SRAS: its supervised warm-up only; PPO trains on a QA reward, not
#: on labels); the small training sample gets the selectors' own defaults otherwise
STUDENTS: dict[str, dict] = {
    "anchored (q+chunk: retriever embeddings only)": {"name": "anchored", "blocks": ["q", "chunk"],
                                                     "max_epochs": 40, "patience": 8, "features": False},
    "anchored (default blocks, with generator h, r)": {"name": "anchored", "max_epochs": 40, "patience": 8,
                                                       "features": True},
    "prototype (paper configuration)": {"name": "prototype", "features": True},
    "sras (supervised warm-up, no PPO)": {"name": "sras", "ppo_epochs": 0, "features": False},
}


def part_distill(args, backend) -> dict:
    from chunksel.build import build_instances, extract_question_features
    from chunksel.eval.metrics import evaluate
    from chunksel.labels.utility import label_instances, write_sidecar
    from chunksel.selectors import make_selector
    from chunksel.types import candidate_mask, label_matrix

    ds = args.distill_dataset
    built = build_instances(ds, k=5, limit=args.limit, progress=False)
    train = sample([i for i in built.instances if i.split == "train"], args.distill_train, "gold")
    test = sample([i for i in built.instances if i.split == "test"], args.distill_test, "gold")
    stage(f"distill {ds}: teacher on {len(train)} train + {len(test)} test questions")
    res = label_instances(train + test, backend, read=args.read, max_new_tokens=args.max_new_tokens,
                          progress=False)
    sidecar = write_sidecar(built.path, res)
    stage(f"distill: teacher done ({res.summary()})")
    own = built.instances[0].label_source
    train_sets = {"utility": "utility", "containment": "containment"}
    eval_sets = {**train_sets, "gold": "gold"}
    out = {"dataset": ds, "k": 5, "train_questions": len(train), "test_questions": len(test),
           "dataset_label": own, "teacher": res.teacher, "teacher_summary": res.summary(),
           "sidecar": str(sidecar), "seeds": list(args.distill_seeds), "students": {}}
    runs = {r.question_id: r for r in res.runs}
    picks = [list(runs[i.id].order) for i in train + test]
    out["teacher_at_k5"] = {
        "evidence_vs_gold": evidence(train + test, picks, "gold"),
        "evidence_vs_containment": evidence(train + test, picks, "containment"),
        "retrieval_top1_vs_gold": evidence(train + test, [[0] for _ in picks], "gold"),
        "k_distribution": dict(sorted(Counter(len(p) for p in picks).items())),
        "cost": cost(res.runs),
    }
    for name in ("containment", "gold"):
        agree = [int(c.labels["utility"] == int(c.is_positive(name))) for i in test for c in i.candidates]
        out[f"teacher_vs_{name}_agreement_test_pairs"] = round(float(np.mean(agree)), 4)
    out["positive_rate_test_pairs"] = {name: round(float(np.mean([c.is_positive(name) for i in test for c in i.candidates])), 4)
                                       for name in eval_sets}
    batch = test
    mask = candidate_mask(batch, k=5)
    features = extract_question_features([i.question for i in train + test], progress=False)
    for student, settings in STUDENTS.items():
        reads_features = settings["features"]
        for train_label, spec in train_sets.items():
            per_seed: dict[str, list[dict]] = {}
            for seed in args.distill_seeds:
                sel = make_selector(settings["name"], label=spec, progress=False, seed=seed,
                                    **{k: v for k, v in settings.items() if k not in ("name", "features")})
                sel.fit(train, features if reads_features else None)
                scores = sel.score(batch, features if reads_features else None)
                for eval_label, espec in eval_sets.items():
                    m = evaluate(scores, label_matrix(batch, espec, k=5), mask)
                    per_seed.setdefault(eval_label, []).append(m)
            out["students"].setdefault(student, {})[f"trained_on_{train_label}"] = {
                eval_label: {"accuracy": round(float(np.mean([m["accuracy"] for m in ms])), 4),
                             "accuracy_seeds": [round(m["accuracy"], 4) for m in ms],
                             "mrr": round(float(np.mean([m["mrr"] for m in ms])), 4),
                             "answerable": ms[0]["answerable"]}
                for eval_label, ms in per_seed.items()}
            stage(f"distill: {student} on {train_label}: " + " ".join(
                f"{e} {v['accuracy']:.3f}" for e, v in out["students"][student][f"trained_on_{train_label}"].items()))
    ret = np.tile(-np.arange(5, dtype=float), (len(batch), 1))
    out["retrieval_order"] = {
        name: {k: round(v, 4) if isinstance(v, float) else v for k, v in evaluate(ret, label_matrix(batch, espec, k=5), mask).items()
               if k in ("accuracy", "mrr", "answerable")}
        for name, espec in eval_sets.items()}
    return out


def markdown(doc: dict) -> str:
    lines = ["# LLM selectors (rankgpt, utility) on real candidate lists", ""]
    sel = doc.get("select") or {}
    for ds, e in sel.items():
        lines += [f"## {ds}: {e['questions']} test questions, {e['candidates']} MiniLM candidates", "",
                  f"Gold passages among the candidates: {e['gold_in_candidates']} "
                  f"({e['questions_with_gold_in_candidates']} questions have one). "
                  f"Utility k distribution: {e['k_distribution']} (empty selections: {e['empty_selections']}).", "",
                  "| condition | evidence P | R | micro-F1 | mean k | answer EM | answer F1 |",
                  "|---|---|---|---|---|---|---|"]
        for name, ev in e["evidence"].items():
            a = (e.get("answers") or {}).get(name)
            em = f"{a['em']['mean']:.3f}" if a else "-"
            f1 = f"{a['f1']['mean']:.3f}" if a else "-"
            lines.append(f"| {name} | {ev['precision']:.3f} | {ev['recall']:.3f} | {ev['f1']:.3f} | "
                         f"{ev['mean_k']:.2f} | {em} | {f1} |")
        if e.get("answers", {}).get("no_context"):
            a = e["answers"]["no_context"]
            lines.append(f"| no_context | - | - | - | 0 | {a['em']['mean']:.3f} | {a['f1']['mean']:.3f} |")
        lines += ["", "| LLM selector | calls/query | prompt tokens/query | LLM s/query | windows/query | outputs repaired | repairs |",
                  "|---|---|---|---|---|---|---|"]
        for name, c in e["cost"].items():
            lines.append(f"| {name} | {c['calls_per_query']} | {c['prompt_tokens_per_query']} | "
                         f"{c['llm_seconds_per_query']} | {c['windows_per_query']} | {c['outputs_repaired']} | "
                         f"{ {k: v for k, v in c['repairs'].items() if v} } |")
        lines.append("")
    dist = doc.get("distill")
    if dist:
        seeds = dist.get("seeds", [0])
        lines += [f"## Distillation: {dist['dataset']} K=5, {dist['train_questions']} train / "
                  f"{dist['test_questions']} test questions, seeds {seeds}", "",
                  f"Teacher {dist['teacher']}: {dist['teacher_summary']}", "",
                  f"Teacher at K=5 ({dist['train_questions'] + dist['test_questions']} questions): evidence vs "
                  f"gold {dist['teacher_at_k5']['evidence_vs_gold']}; k distribution "
                  f"{dist['teacher_at_k5']['k_distribution']}; retrieval top-1 vs gold "
                  f"{dist['teacher_at_k5']['retrieval_top1_vs_gold']}", "",
                  "Rank-1 accuracy (mean over the seeds) / MRR on the answerable test questions under each "
                  "label set (answerable counts differ per label set).", "",
                  "| student | trained on | utility labels | containment labels | gold (supporting paragraphs) |",
                  "|---|---|---|---|---|"]
        students = dist["students"]
        if students and "trained_on_utility" in students:  # an older single-student file
            students = {dist.get("student", "anchored"): students}
        rows = [(st, tr.removeprefix("trained_on_"), r) for st, per in students.items() for tr, r in per.items()]
        rows.append(("retrieval order (no training)", "-", dist["retrieval_order"]))
        for st, tr, r in rows:
            cells = [f"{r[e]['accuracy']:.3f} / {r[e]['mrr']:.3f} (n={r[e]['answerable']})"
                     for e in ("utility", "containment", "gold")]
            lines.append(f"| {st} | {tr} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--part", nargs="+", default=["select", "distill"], choices=["select", "distill"])
    ap.add_argument("--datasets", nargs="+", default=["nq", "hotpotqa"])
    ap.add_argument("--questions", type=int, default=10, help="test questions per dataset (default 10)")
    ap.add_argument("--candidates", type=int, default=20)
    ap.add_argument("--limit", type=int, default=500, help="the instance store's question sample")
    ap.add_argument("--model", default=None, help="local model (default SmolLM2-135M-Instruct GGUF)")
    ap.add_argument("--read", default=None, choices=["text", "logprobs"], help="utility's read (default: logprobs locally)")
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--no-answers", action="store_true")
    ap.add_argument("--answer-datasets", nargs="+", default=None,
                    help="the datasets that get the answer table (default: every one)")
    ap.add_argument("--distill-dataset", default="hotpotqa")
    ap.add_argument("--distill-train", type=int, default=60)
    ap.add_argument("--distill-test", type=int, default=30)
    ap.add_argument("--distill-seeds", type=int, nargs="+", default=[0, 1, 2])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    torch.set_num_threads(args.threads)
    from chunksel.llm.local import LocalBackend

    backend = LocalBackend(args.model)
    doc: dict = {}
    doc.update({
        "backend": f"{backend.name}/{backend.model_id}",
        "machine": {"cpu_threads": args.threads, "platform": platform.platform(), "nice": os.nice(0)},
        "settings": {"window": 20, "step": 10, "carry": 10, "max_new_tokens": args.max_new_tokens,
                     "max_passage_words": 120, "utility_read": args.read or "logprobs (local default)",
                     "rankgpt_read": "text"},
    })
    if "select" in args.part:
        doc["select"] = part_select(args, backend)
        doc["select_sample"] = {"questions_per_dataset": args.questions, "candidates": args.candidates,
                                "store": f"flat index, limit={args.limit}, k={args.candidates}",
                                "selection": "test split, smallest sha256(question id) among questions carrying gold"}
    if "distill" in args.part:
        doc["distill"] = part_distill(args, backend)
    doc["wall_seconds_last_run"] = round(time.perf_counter() - _T0, 1)
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    # merged into what an earlier (or concurrent) run of the other part wrote
    merged = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    merged.update(doc)
    doc = merged
    RESULTS.write_text(json.dumps(doc, indent=1) + "\n")
    md = markdown(doc)
    RESULTS.with_suffix(".md").write_text(md + "\n")
    print(md)


if __name__ == "__main__":
    main()
