"""RankGPT's own benchmark: TREC DL 2019 / 2020 passage ranking, nDCG@10, on 100-candidate
lists; and the utility selector on a sample of the same lists.

**Lists**: BM25 (``bm25s``, its defaults k1 = 1.5, b = 0.75, English stopwords, no
stemming) over the ``msmarco-sub`` corpus (31,604 MS MARCO passages that hold every passage
of the track's official BM25 top-100 lists, plus other samples), top 100 per query. The
collection statistics are those of this sub-corpus, not of the 8.8M-passage collection,
so the lists are comparable to the official ones but not identical; the overlap of each
list with the passages judged for that query is reported.

**Rankers**, every one re-ranking the same top-100 list:

- ``bm25``: the list itself;
- ``minilm``: cosine of all-MiniLM-L6-v2 embeddings (the corpus's shipped embeddings,
  the project's query encoder);
- ``lambdamart``: LightGBM lambdarank over five features (BM25 score and rank, MiniLM
  cosine, query-term overlap, passage length), trained on the 600 MS MARCO queries of
  ``bm25top20`` (their official 0/1 labels; queries disjoint from TREC DL);
- ``rankgpt``: :meth:`chunksel.llm.listwise.ListwiseLLM.rank`, window 20 and step 10 (9
  windows over 100 passages, back to front), with the given backend (the local
  SmolLM2-135M-Instruct by default; ``--llm URL --llm-model NAME`` for a server). Run on
  the first ``--queries`` topics of each year (file order); the other rankers are scored
  on the same topics and on all topics.

**Utility** on the first ``--utility-queries`` DL19 topics: the selection (dynamic k),
its precision against qrels (grade >= 2, the track's binary threshold), and the nDCG@10
of the selection followed by the rest in BM25 order.

nDCG@10 with ``ranx`` (graded qrels, the track's gains). Costs per query: LLM calls,
prompt and generated tokens, backend seconds (cached calls count what they cost when
made) and wall seconds. Writes ``benchmarks/results/trec_dl.json`` (``trec_dl.md`` beside it
reads a run).

    nice -n 5 python benchmarks/trec_dl.py --queries 10 --utility-queries 3
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results" / "trec_dl.json"
_T0 = time.perf_counter()


def stage(msg: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] {msg}", file=sys.stderr, flush=True)


def data_root() -> Path:
    return Path(os.environ.get("CHUNKSEL_DATA", "/work/shared/data"))


def load_corpus() -> tuple[list[str], list[str]]:
    ids, texts = [], []
    with gzip.open(data_root() / "corpus" / "msmarco-sub.tsv.gz", "rt", encoding="utf-8") as f:
        next(f)
        for line in f:
            pid, text = line.rstrip("\n").split("\t")[:2]
            ids.append(pid)
            texts.append(text)
    return ids, texts


def load_topics(year: str) -> list[tuple[str, str]]:
    path = data_root() / "qa" / "msmarco" / "trec-dl" / f"topics.dl{year}.tsv"
    return [tuple(line.rstrip("\n").split("\t", 1)) for line in path.open(encoding="utf-8") if line.strip()]


def load_qrels(year: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for line in (data_root() / "qa" / "msmarco" / "trec-dl" / f"qrels.dl{year}-passage.txt").open():
        qid, _, pid, grade = line.split()
        out.setdefault(qid, {})[f"msmarco:{pid}"] = int(grade)
    return out


def corpus_embeddings() -> np.ndarray:
    z = np.load(data_root() / "corpus" / "msmarco-sub.all-MiniLM-L6-v2.i8.npz")
    x = (z["codes"].astype(np.float32) + 128) * z["step"] + z["lo"]
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def tokens(text: str) -> set[str]:
    return {w for w in "".join(c.lower() if c.isalnum() else " " for c in text).split() if len(w) > 2}


def features(query: str, rows: list[int], bm25: list[float], cos: np.ndarray, texts: list[str]) -> np.ndarray:
    q = tokens(query)
    out = []
    for rank, (row, score) in enumerate(zip(rows, bm25, strict=True)):
        t = tokens(texts[row])
        out.append([score, rank, float(cos[rank]), len(q & t) / max(1, len(q)), len(texts[row].split())])
    return np.asarray(out, dtype=np.float32)


def ndcg10(qrels: dict, run: dict) -> tuple[float, dict[str, float]]:
    from ranx import Qrels, Run, evaluate

    q = Qrels({k: qrels[k] for k in run})
    r = Run(run)
    mean = evaluate(q, r, "ndcg@10")
    per = r.scores["ndcg@10"]  # by query id (ranx orders queries its own way)
    return float(mean), {k: round(float(per[k]), 4) for k in run}


def scores_from_order(ids: list[str], order: list[int]) -> dict[str, float]:
    return {ids[p]: float(len(order) - i) for i, p in enumerate(order)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--years", nargs="+", default=["19", "20"])
    ap.add_argument("--queries", type=int, nargs="+", default=[10],
                    help="rankgpt on the first N topics of each year (one N, or one per year)")
    ap.add_argument("--utility-queries", type=int, default=3)
    ap.add_argument("--depth", type=int, default=100)
    ap.add_argument("--llm", default="local")
    ap.add_argument("--llm-model", default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the local model")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    import bm25s
    import lightgbm as lgb
    import torch

    from chunksel.llm.listwise import ListwiseLLM
    from chunksel.retrieval.encoder import Encoder

    torch.set_num_threads(args.threads)
    stage("loading msmarco-sub, its embeddings and the BM25 index")
    ids, texts = load_corpus()
    emb = corpus_embeddings()
    retriever = bm25s.BM25()
    retriever.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    enc = Encoder()

    def top(query: str, depth: int) -> tuple[list[int], list[float], np.ndarray]:
        docs, scores = retriever.retrieve(bm25s.tokenize([query], stopwords="en", show_progress=False),
                                          k=depth, show_progress=False)
        rows = [int(d) for d in docs[0]]
        qv = enc.encode([query], progress=False)[0]
        return rows, [float(s) for s in scores[0]], emb[rows] @ qv

    stage("training LambdaMART on the 600 bm25top20 queries")
    train_x, train_y, groups = [], [], []
    path = data_root() / "qa" / "msmarco" / "bm25top20" / "msmarco_bm25top20_600q.jsonl"
    dl_qids = {q for y in ("19", "20", "21", "22") for q, _ in load_topics(y)}
    n_train = 0
    for line in path.open(encoding="utf-8"):
        rec = json.loads(line)
        if str(rec["qid"]) in dl_qids:
            continue
        rows, bm, cos = top(rec["query"], 20)
        labels = {f"msmarco:{c['pid']}": int(c.get("msmarco_label") or 0) for c in rec["candidates"]}
        y = [labels.get(ids[r], 0) for r in rows]
        if not any(y):
            continue
        train_x.append(features(rec["query"], rows, bm, cos, texts))
        train_y += y
        groups.append(len(rows))
        n_train += 1
    ranker = lgb.LGBMRanker(objective="lambdarank", n_estimators=200, learning_rate=0.05, num_leaves=15,
                            min_child_samples=10, random_state=0, verbose=-1, n_jobs=1)
    ranker.fit(np.concatenate(train_x), np.asarray(train_y), group=groups)

    if args.llm == "local":
        from chunksel.llm.backends import get_backend

        backend = get_backend("local", model_path=args.llm_model)
    else:
        from chunksel.llm.backends import get_backend

        backend = get_backend("openai", base_url=args.llm, model=args.llm_model)
    llm = ListwiseLLM(backend, window=20, step=10)
    util = ListwiseLLM(backend, window=20, carry=10)
    result: dict = {
        "benchmark": "trec_dl", "machine": platform.platform(), "load_at_start": os.getloadavg(),
        "settings": {"depth": args.depth, "queries_per_year": args.queries,
                     "lists": "bm25s (k1 1.5, b 0.75, English stopwords, no stemming) over msmarco-sub, top 100", "window": 20, "step": 10,
                     "backend": f"{backend.name}/{getattr(backend, 'model_id', '?')}", "threads": args.threads,
                     "lambdamart_train_queries": n_train, "max_passage_words": 120, "max_new_tokens": 128},
        "years": {},
    }
    per_year = dict(zip(args.years, args.queries * len(args.years) if len(args.queries) == 1 else args.queries,
                        strict=True))
    for year in args.years:
        topics, qrels = load_topics(year), load_qrels(year)
        topics = [(q, t) for q, t in topics if q in qrels]
        runs: dict[str, dict] = {"bm25": {}, "minilm": {}, "lambdamart": {}}
        lists, judged_share = {}, []
        for qid, query in topics:
            rows, bm, cos = top(query, args.depth)
            lists[qid] = (query, rows, bm)
            pids = [ids[r] for r in rows]
            judged_share.append(sum(p in qrels[qid] for p in pids) / len(pids))
            runs["bm25"][qid] = {p: s for p, s in zip(pids, bm, strict=True)}
            runs["minilm"][qid] = {p: float(c) for p, c in zip(pids, cos, strict=True)}
            lm = ranker.predict(features(query, rows, bm, cos, texts))
            runs["lambdamart"][qid] = {p: float(s) for p, s in zip(pids, lm, strict=True)}
        sub = [q for q, _ in topics[: per_year[year]]]
        entry: dict = {"topics": len(topics), "rankgpt_topics": sub,
                       "judged_share_of_list": round(float(np.mean(judged_share)), 4),
                       "ndcg10_all_topics": {}, "ndcg10_rankgpt_topics": {}}
        for name, run in runs.items():
            entry["ndcg10_all_topics"][name] = round(ndcg10(qrels, run)[0], 4)
            if sub:
                entry["ndcg10_rankgpt_topics"][name] = round(ndcg10(qrels, {q: run[q] for q in sub})[0], 4)
        if not sub:  # rankgpt not run on this year
            result["years"][year] = entry
            write(result, Path(args.out))
            continue
        rank_runs = []
        rg: dict[str, dict[str, float]] = {}
        result["years"][year] = entry
        for n, qid in enumerate(sub, 1):
            query, rows, _ = lists[qid]
            pids = [ids[r] for r in rows]
            r = llm.rank(f"dl{year}:{qid}", query, [texts[x] for x in rows], pids)
            rank_runs.append(r)
            rg[qid] = scores_from_order(pids, r.order)
            stage(f"DL{year} {n}/{len(sub)} {qid}: {r.calls} calls, {r.seconds:.1f}s, "
                  f"repairs {r.repairs.total()}, fallback {r.fallback}")
            entry["rankgpt_cost"] = cost(rank_runs)
            entry["ndcg10_rankgpt_done_so_far"] = round(ndcg10(qrels, rg)[0], 4)
            write(result, Path(args.out))
        mean, per = ndcg10(qrels, rg)
        entry["ndcg10_rankgpt_topics"]["rankgpt"] = round(mean, 4)
        entry["rankgpt_per_query_ndcg10"] = per
        entry["bm25_per_query_ndcg10"] = ndcg10(qrels, {q: runs["bm25"][q] for q in sub})[1]
        entry["rankgpt_cost"] = cost(rank_runs)
        if year == "19" and args.utility_queries:
            util_runs, urun, prec = [], {}, []
            for qid in sub[: args.utility_queries]:
                query, rows, _ = lists[qid]
                pids = [ids[r] for r in rows]
                u = util.select(f"dl{year}:{qid}", query, [texts[x] for x in rows], pids)
                util_runs.append(u)
                order = list(u.order) + [p for p in range(len(rows)) if p not in set(u.order)]
                urun[qid] = scores_from_order(pids, order)
                rel = [qrels[qid].get(pids[p], 0) >= 2 for p in u.order]
                prec.append(sum(rel) / len(rel) if rel else None)
                stage(f"DL{year} utility {qid}: k={u.k}, {u.calls} calls, {u.seconds:.1f}s, fallback {u.fallback}")
            entry["utility"] = {
                "topics": [q for q in sub[: args.utility_queries]],
                "k": [u.k for u in util_runs], "precision_grade2": prec,
                "relevant_grade2_in_list": [sum(qrels[q].get(ids[r], 0) >= 2 for r in lists[q][1])
                                            for q in sub[: args.utility_queries]],
                "ndcg10_selection_then_bm25": round(ndcg10(qrels, urun)[0], 4),
                "bm25_ndcg10_same_topics": round(ndcg10(qrels, {q: runs["bm25"][q] for q in urun})[0], 4),
                "cost": cost(util_runs),
            }
        result["years"][year] = entry
        write(result, Path(args.out))
    result["wall_seconds"] = round(time.perf_counter() - _T0, 1)
    result["load_at_end"] = os.getloadavg()
    result["backend_usage"] = backend.usage.to_dict()
    write(result, Path(args.out))
    stage(f"wrote {args.out}")
    return 0


def cost(runs) -> dict:
    n = max(1, len(runs))
    return {
        "queries": len(runs), "fallbacks": sum(r.fallback is not None for r in runs),
        "calls_per_query": round(sum(r.calls for r in runs) / n, 2),
        "prompt_tokens_per_query": round(sum(r.prompt_tokens for r in runs) / n, 1),
        "output_tokens_per_query": round(sum(r.output_tokens for r in runs) / n, 1),
        "llm_seconds_per_query": round(sum(r.seconds for r in runs) / n, 2),
        "llm_seconds_median": round(float(np.median([r.seconds for r in runs])), 2) if runs else None,
        "wall_seconds_per_query_this_run": round(sum(r.wall_seconds for r in runs) / n, 2),
        "windows_per_query": round(sum(len(r.windows) for r in runs) / n, 2),
        "repairs": {k: sum(r.repairs.to_dict()[k] for r in runs) for k in (runs[0].repairs.to_dict() if runs else {})},
        "outputs_repaired": sum(r.repairs.malformed() for r in runs),
    }


def write(result: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
