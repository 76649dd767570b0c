"""Agreement of the LLM judge's semantic labels with answer containment and with gold evidence.

For each dataset it takes a deterministic sample of questions from the ``limit=500``
instance store (the questions with the smallest sha256 of their id; on datasets whose
gold evidence covers only some questions, among those that carry it), judges all K = 5
candidates of each with :func:`chunksel.labels.judge.label_instances` (the paper's
prompt, Yes/No read from log-probabilities) and compares:

- **judge vs containment** (DPR answer containment, the label the paper replaced):
  confusion matrix (rows: containment 0/1, columns: judge 0/1), raw agreement (the
  paper reports 78% between containment and its GPT-5.1 judge) and Cohen's kappa
  (scikit-learn), plus the ROC AUC of the judge's Yes probability against containment;
- **judge vs gold evidence** the data carries: NQ oracle passages (``gold``), HotpotQA
  supporting paragraphs (``gold``), MS MARCO TREC DL qrels (``qrels``, grade >= 2):
  precision and recall of the judge's Yes, next to those of containment on the same
  pairs, and the AUC of the Yes probability.

With ``--reference`` it judges the questions that carry the reference semantic labels of
the benchmark data (``semantic/``: TriviaQA, PopQA, MS MARCO test questions, all K = 5
candidates, built as the full and large profiles build them, ``limit=None``) and compares
the judge with them: agreement, kappa (95% intervals resampling questions), and the
judge's precision and recall of the reference positives, next to answer containment's on
the same pairs. ``--questions`` then takes that many labelled questions per dataset (the
smallest sha256 of their id; 0: all). Writes ``benchmarks/results/judge_agreement_reference.json``
(or the ``--out`` given).

Every judgement goes through the response cache, so a killed run resumes (re-run the
same command) and a larger ``--questions`` only judges the new pairs. The judge's labels
are also written as the dataset's sidecar (``chunksel label`` does the same), so
``--label semantic`` sees them. Writes ``benchmarks/results/judge_agreement.json``.

    nice -n 19 python benchmarks/judge_agreement.py [--questions 30] [--datasets ...]
        [--judge local|URL] [--model NAME] [--threads 1] [--reference]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results" / "judge_agreement.json"
REFERENCE_RESULTS = RESULTS.with_name("judge_agreement_reference.json")
REFERENCE_DATASETS = ("triviaqa", "popqa", "msmarco")
#: per dataset: the gold-evidence label source compared with the judge (None: none)
GOLD_SOURCE = {"triviaqa": None, "nq": "gold", "hotpotqa": "gold", "msmarco": "qrels",
               "popqa": "gold", "squad2": "gold"}
PAPER_AGREEMENT = 0.78
_T0 = time.perf_counter()


def stage(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def sample(instances, n: int, source: str | None):
    """The ``n`` instances with the smallest sha256 of their id (among those with every
    candidate labelled by ``source`` when given)."""
    pool = [i for i in instances if source is None or all(source in c.labels for c in i.candidates)]
    pool.sort(key=lambda i: hashlib.sha256(i.id.encode()).hexdigest())
    return pool[:n]


def _f(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), 4)


def _auc(y: np.ndarray, p: np.ndarray) -> float | None:
    from sklearn.metrics import roc_auc_score

    ok = ~np.isnan(p)
    if ok.sum() < 2 or len(set(y[ok].tolist())) < 2:
        return None
    return _f(roc_auc_score(y[ok], p[ok]))


def bootstrap_ci(judge: np.ndarray, contain: np.ndarray, groups: np.ndarray, n: int = 2000, seed: int = 0) -> dict:
    """95% percentile intervals of agreement and kappa, resampling *questions* (their K pairs
    stay together: the pairs of one question are not independent)."""
    from sklearn.metrics import cohen_kappa_score

    rng = np.random.default_rng(seed)
    uniq = np.unique(groups)
    rows = [np.flatnonzero(groups == g) for g in uniq]
    agree, kappa = [], []
    for _ in range(n):
        idx = np.concatenate([rows[i] for i in rng.integers(0, len(rows), len(rows))])
        j, c = judge[idx], contain[idx]
        agree.append((j == c).mean())
        if len(set(j.tolist()) | set(c.tolist())) > 1:
            kappa.append(cohen_kappa_score(c, j, labels=[0, 1]))
    q = lambda xs: [_f(np.quantile(xs, 0.025)), _f(np.quantile(xs, 0.975))] if xs else None  # noqa: E731
    return {"agreement_ci95": q(agree), "kappa_ci95": q(kappa), "resamples": n, "unit": "question"}


def versus_containment(judge: np.ndarray, contain: np.ndarray, p_yes: np.ndarray,
                       groups: np.ndarray | None = None) -> dict:
    from sklearn.metrics import cohen_kappa_score, confusion_matrix

    cm = confusion_matrix(contain, judge, labels=[0, 1])
    ci = bootstrap_ci(judge, contain, groups) if groups is not None and len(judge) else {}
    return {
        "pairs": int(len(judge)),
        "confusion": {"rows": "containment 0/1", "cols": "judge 0/1", "matrix": cm.tolist()},
        "agreement": _f((judge == contain).mean()),
        "kappa": _f(cohen_kappa_score(contain, judge, labels=[0, 1])) if len(judge) else None,
        "judge_positive_rate": _f(judge.mean()),
        "containment_positive_rate": _f(contain.mean()),
        "auc_p_yes": _auc(contain, p_yes),
        **ci,
    }


def _pr(pred: np.ndarray, gold: np.ndarray) -> dict:
    tp = int((pred & gold).sum())
    return {"precision": _f(tp / pred.sum()) if pred.sum() else None,
            "recall": _f(tp / gold.sum()) if gold.sum() else None, "predicted_positive": int(pred.sum())}


def versus_gold(judge, gold, contain, p_yes, source: str) -> dict:
    out = {"source": source, "pairs": int(len(judge)), "gold_positive": int(gold.sum()),
           "judge": _pr(judge.astype(bool), gold.astype(bool)), "auc_p_yes": _auc(gold, p_yes)}
    if contain is not None:
        out["containment"] = _pr(contain.astype(bool), gold.astype(bool))
    return out


def arrays(instances, source: str) -> np.ndarray:
    """Per pair (instance then candidate order): the label under ``source``, -1 where absent."""
    return np.array([c.labels.get(source, -1) for i in instances for c in i.candidates], dtype=int)


def make_backend(judge: str, model: str | None, batch_size: int):
    from chunksel.llm.backends import get_backend

    if judge == "local":
        return get_backend("local", model_path=model, batch_size=batch_size)
    if not model:
        raise SystemExit("--judge URL needs --model NAME")
    return get_backend("openai", base_url=judge, model=model)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["triviaqa", "nq", "hotpotqa", "msmarco"])
    ap.add_argument("--questions", type=int, default=30, help="questions per dataset (x 5 candidates)")
    ap.add_argument("--judge", "--llm", dest="judge", default="local",
                    help="local, or an OpenAI-compatible base URL (a served judge; --model names its model)")
    ap.add_argument("--model", default=None, help="local model path / server model name")
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default=None, help=f"default {RESULTS.name} ({REFERENCE_RESULTS.name} with --reference)")
    ap.add_argument("--reference", action="store_true",
                    help="judge the questions with reference semantic labels and compare with them")
    args = ap.parse_args(argv)
    args.out = args.out or str(REFERENCE_RESULTS if args.reference else RESULTS)
    if args.reference and args.datasets == ap.get_default("datasets"):
        args.datasets = list(REFERENCE_DATASETS)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    from chunksel.threads import set_threads

    set_threads(args.threads)
    from chunksel.build import build_instances
    from chunksel.labels.judge import JUDGE_PROMPT, label_instances, write_sidecar

    backend = make_backend(args.judge, args.model, args.batch_size)
    stage(f"judge {backend.name}/{backend.model_id}")
    if args.reference:
        return against_reference(args, backend)
    report: dict = {
        "judge": f"{backend.name}/{backend.model_id}",
        "prompt": JUDGE_PROMPT,
        "decision": "argmax of log p(Yes) vs log p(No) as the answer's first token",
        "sample": {"questions_per_dataset": args.questions, "k": 5, "store": "flat index, limit=500",
                   "selection": "smallest sha256(question id); among questions carrying the gold source"},
        "paper": {"agreement_containment": PAPER_AGREEMENT, "judge": "GPT-5.1"},
        "machine": {"cpu_threads": args.threads, "platform": platform.platform(), "nice": os.nice(0)},
        "datasets": {},
    }
    pooled: dict[str, list[np.ndarray]] = {"judge": [], "contain": [], "p": [], "g": []}
    new_pairs, new_seconds, wall = 0, 0.0, 0.0
    for ds in args.datasets:
        built = build_instances(ds, k=5, index="flat", limit=500, progress=False)
        source = GOLD_SOURCE.get(ds)
        batch = sample(built.instances, args.questions, source)
        stage(f"{ds}: {len(batch)} questions, {sum(len(i.candidates) for i in batch)} pairs")
        res = label_instances(batch, backend, batch_size=args.batch_size, progress=True)
        write_sidecar(built.path, res)
        new_pairs += res.stats["misses"]
        new_seconds += res.stats["seconds"]
        wall += res.seconds if res.stats["misses"] else 0.0
        judge = arrays(batch, "semantic")
        p_yes = np.array([np.nan if r.p_yes is None else r.p_yes for r in res.rows])
        entry: dict = {"questions": len(batch), "pairs": int(len(judge)), "unparsed": len(res.failures),
                       "judge_positive_rate": _f(judge.mean()),
                       "answerable_pct_judge": _f(100 * np.mean([i.answerable("semantic") for i in batch]))}
        contain = arrays(batch, "containment")
        has_c = contain >= 0  # MS MARCO: only questions with an answer string have it
        if has_c.any():
            groups = np.array([f"{ds}:{i.id}" for i in batch for _ in i.candidates])
            entry["vs_containment"] = versus_containment(judge[has_c], contain[has_c], p_yes[has_c],
                                                         groups[has_c])
            pooled["judge"].append(judge[has_c])
            pooled["contain"].append(contain[has_c])
            pooled["p"].append(p_yes[has_c])
            pooled["g"].append(groups[has_c])
        if source is not None:
            gold = arrays(batch, source)
            entry["vs_gold"] = versus_gold(judge, gold, None, p_yes, source)
            both = has_c & (gold >= 0)
            if both.any():  # containment as a predictor of the same gold, on the pairs with both
                entry["vs_gold"]["containment_same_pairs"] = {
                    "pairs": int(both.sum()),
                    "judge": _pr(judge[both].astype(bool), gold[both].astype(bool)),
                    "containment": _pr(contain[both].astype(bool), gold[both].astype(bool)),
                }
        report["datasets"][ds] = entry
        stage(f"{ds}: {json.dumps(entry)}")
    if pooled["judge"]:
        report["pooled_vs_containment"] = versus_containment(
            np.concatenate(pooled["judge"]), np.concatenate(pooled["contain"]), np.concatenate(pooled["p"]),
            np.concatenate(pooled["g"]))
    report["throughput"] = {
        "new_pairs": new_pairs,
        "pairs_per_s_backend": _f(new_pairs / new_seconds) if new_seconds else None,
        "pairs_per_s_wall": _f(new_pairs / wall) if wall else None,
        "note": "pairs judged in this run (cache hits excluded); backend time covers tokenising "
                "and the forward passes; one torch thread, niced, on a 2-core machine shared "
                "with another benchmark",
    }
    out = Path(args.out)
    if not new_pairs and out.is_file():  # everything was cached: keep the measured figure
        report["throughput"] = json.loads(out.read_text()).get("throughput", report["throughput"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    stage(f"wrote {args.out}")
    return 0


def against_reference(args, backend) -> int:
    """``--reference``: the judge (and answer containment) against the reference labels."""
    from chunksel.build import build_instances
    from chunksel.data.reference_labels import EVIDENCE, attach_reference, load_reference
    from chunksel.labels.judge import JUDGE_PROMPT, label_instances, write_sidecar

    report: dict = {
        "judge": f"{backend.name}/{backend.model_id}", "prompt": JUDGE_PROMPT,
        "decision": "argmax of log p(Yes) vs log p(No) as the answer's first token",
        "reference": "semantic/ of the benchmark data (evaluation-only reference labels, field 'evidence')",
        "sample": {"questions_per_dataset": args.questions or "all", "k": 5,
                   "store": "flat index, limit=None, grouped splits (the full and large profiles' candidates)",
                   "selection": "smallest sha256(question id) among the labelled questions"},
        "paper": {"agreement_containment": PAPER_AGREEMENT, "judge": "GPT-5.1"},
        "machine": {"cpu_threads": args.threads, "platform": platform.platform(), "nice": os.nice(0)},
        "datasets": {},
    }
    pooled: dict[str, list[np.ndarray]] = {"judge": [], "ref": [], "p": [], "g": []}
    new_pairs, new_seconds = 0, 0.0
    for ds in args.datasets:
        ref = load_reference(ds)
        built = build_instances(ds, k=5, index="flat", limit=None, split="grouped", progress=True)
        labelled = attach_reference(built.instances, ref)
        batch = sample(labelled, args.questions or len(labelled), None)
        stage(f"{ds}: {len(batch)} of {len(ref.sample)} labelled questions, "
              f"{sum(len(i.candidates) for i in batch)} pairs")
        res = label_instances(batch, backend, batch_size=args.batch_size, progress=True)
        write_sidecar(built.path, res)
        new_pairs += res.stats["misses"]
        new_seconds += res.stats["seconds"]
        judge = arrays(batch, "semantic")
        gold = arrays(batch, EVIDENCE)
        p_yes = np.array([np.nan if r.p_yes is None else r.p_yes for r in res.rows])
        groups = np.array([f"{ds}:{i.id}" for i in batch for _ in i.candidates])
        entry: dict = {"questions": len(batch), "pairs": int(len(judge)), "unparsed": len(res.failures),
                       "reference_positive_rate": _f(gold.mean()), "judge_positive_rate": _f(judge.mean()),
                       "judge_vs_reference": versus_containment(judge, gold, p_yes, groups),
                       "judge_as_predictor": versus_gold(judge, gold, None, p_yes, EVIDENCE)}
        contain = arrays(batch, "containment")
        has_c = contain >= 0
        if has_c.any():
            entry["containment_vs_reference"] = {
                **versus_containment(contain[has_c], gold[has_c], contain[has_c].astype(float), groups[has_c]),
                "as_predictor": _pr(contain[has_c].astype(bool), gold[has_c].astype(bool))}
        for key, x in (("judge", judge), ("ref", gold), ("p", p_yes), ("g", groups)):
            pooled[key].append(x)
        report["datasets"][ds] = entry
        stage(f"{ds}: {json.dumps(entry)[:400]}")
    report["pooled"] = versus_containment(np.concatenate(pooled["judge"]), np.concatenate(pooled["ref"]),
                                          np.concatenate(pooled["p"]), np.concatenate(pooled["g"]))
    report["note"] = ("'confusion' rows are the reference (0/1) and columns the judge (0/1); in "
                      "containment_vs_reference the columns are containment")
    report["throughput"] = {"new_pairs": new_pairs,
                            "pairs_per_s_backend": _f(new_pairs / new_seconds) if new_seconds else None}
    out = Path(args.out)
    if not new_pairs and out.is_file():
        report["throughput"] = json.loads(out.read_text()).get("throughput", report["throughput"])
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    stage(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
