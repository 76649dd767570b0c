"""The zero-shot report (``reports/zeroshot/``): the shipped pretrained selectors on
collections they never saw, ``python -m chunksel.study.zeroshot`` (``make zeroshot``).

Collections (:data:`COLLECTIONS`):

- WikiQA: 3,000 of the 3,047 questions of its three files (the full profile's sample),
  its own candidate sentences in MiniLM order
  (:func:`~chunksel.study.transfer.never_trained_instances`), human labels;
- TREC DL 2019 and 2020 over ``msmarco-sub``: BM25 top-100 and MiniLM top-20 lists, graded
  NIST judgements (rank-1 and MRR@10 at grade >= 2, nDCG@10 graded);
- NFCorpus and ArguAna (BEIR): BM25 and MiniLM top-20 over their own corpora (rank-1 at
  the top grade, nDCG@10 graded);
- each of the six benchmark datasets held out (leave one dataset out): LambdaMART and the
  anchored selector retrained by the pretrained recipe without it (its settings, the
  pooled training and validation splits of the other five), tested on its test split's
  MiniLM top-5 lists and, separately, on BM25 top-5 lists (``build_instances(index="bm25")``).

Rows (:data:`ROWS`): retrieval order; BM25 with the collection's own statistics;
``lambdamart-base`` and ``anchored-base`` (the shipped models, the shipped Wikipedia
statistics; on NFCorpus also with NFCorpus's own, ``corpus=``); the MiniLM-L6
cross-encoder trained here on the pretrained recipe's pooled training split (no TREC DL
topic; the transfer stage's short recipe) on the unseen collections; and, where its
SmolLM2 warm-up features exist (WikiQA and the held-out datasets, whose questions the
full profile extracts), the generator-coupled flagship (``anchored`` with its default
blocks: h, r, the q/E prototype, the K = 5 chunk block, LETOR and stacked LambdaMART),
trained by the same recipe with the generator's features. Its chunk block scores the first
five candidates of a longer list; the rest rank after them. TREC DL, NFCorpus and ArguAna
have no generator features here, so it is no row there.

On BM25 lists the learned rows read the lists in BM25's order with MiniLM cosines as
their retrieval scores (:func:`minilm_scored`: what ``ChunkSelector`` computes for a
caller who passes no ``chunk_scores``; BM25 scores are refused, being on another scale
than the cosines the models were trained on). A question whose list is empty (BM25 finds
no corpus term of it) is left out of every row and counted. Per collection and row: rank-1 with a bootstrap interval, nDCG@10 and MRR@10 where graded;
the paired bootstrap interval and McNemar's p against the strongest row by rank-1 and
against retrieval order; calibration transfer for the calibrated rows (chunk ECE, set
AUROC, ``k="auto"`` chunks and recall). Zero-shot average: rank-1 over WikiQA, NFCorpus,
ArguAna (MiniLM lists) and the six held-out datasets. Nothing is tuned here: every model
and operating point comes from the recipe's validation splits.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.study.zeroshot_parts import AVERAGE, backfill_parts, parts_to_rerun
from chunksel.types import Instance

OUT = Path("reports/zeroshot")
ROWS = ("retrieval", "bm25", "lambdamart-base", "anchored-base", "crossencoder")
#: the rows that carry a calibrator (the pretrained models and the cross-encoder)
DISPLAY = {"retrieval": "Retrieval order", "bm25": "BM25 (own statistics)", "lambdamart-base": "lambdamart-base",
           "anchored-base": "anchored-base", "crossencoder": "Cross-encoder (trained here)",
           "lambdamart-base (own stats)": "lambdamart-base, NFCorpus statistics",
           "anchored-base (own stats)": "anchored-base, NFCorpus statistics",
           "lambdamart (LODO)": "LambdaMART, recipe without the dataset",
           "anchored (LODO)": "anchored, recipe without the dataset"}
#: WikiQA's sample: the full profile's (3,000 of its 3,047 questions)
WIKIQA_LIMIT = 3000
#: the collection whose own statistics are tried beside the shipped ones
OWN_STATS = "nfcorpus/minilm"


def say(msg: str) -> None:
    print(f"[zeroshot {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ------------------------------------------------------------------ collections
def _wikiqa(progress: bool) -> list[Instance]:
    from chunksel.study.transfer import never_trained_instances

    return never_trained_instances(WIKIQA_LIMIT, 64, 0, "grouped", progress)["wikiqa"]


def collections(progress: bool) -> dict[str, tuple[Callable[[], list[Instance]], str]]:
    """``{key: (builder, statistics corpus of the BM25 row)}``."""
    from chunksel.study import zeroshot_data as zd

    out: dict[str, tuple[Callable[[], list[Instance]], str]] = {"wikiqa": (lambda: _wikiqa(progress), "wiki-w100")}
    for year in ("19", "20"):
        for ret, k in (("bm25", 100), ("minilm", 20)):
            out[f"trec-dl-20{year}/{ret}"] = (
                lambda year=year, ret=ret, k=k: zd.trec_dl_instances(year, ret, k, progress=progress), "msmarco-sub")
    for name in ("nfcorpus", "arguana"):
        for ret in ("minilm", "bm25"):
            out[f"{name}/{ret}"] = (lambda name=name, ret=ret: zd.beir_instances(name, ret, 20, progress=progress),
                                    str(zd.beir_corpus_path(name)))
    return out


#: the collections whose questions have generator features (the full profile extracts WikiQA's)
GENERATOR_COLLECTIONS = ("wikiqa",)


# ------------------------------------------------------------------ rows
def pretrained_selector(name: str, corpus: str | None = None) -> Any:
    """A shipped model's selector with its statistics registered (or the user's ``corpus``)."""
    from chunksel import ChunkSelector

    return ChunkSelector.load(name, corpus=corpus).selector


def crossencoder(progress: bool) -> Any:
    """The cross-encoder trained here on the pretrained recipe's pooled training split
    (TREC DL left out), the transfer stage's short recipe; cached under the cache root."""
    from chunksel.config import cache_root, config_hash
    from chunksel.selectors import load_selector, make_selector
    from chunksel.study import pretrain
    from chunksel.study.transfer import TRANSFER_OVERRIDES

    settings = dict(TRANSFER_OVERRIDES["crossencoder"])
    folder = cache_root() / "zeroshot" / f"crossencoder-{config_hash({'settings': settings, 'limit': pretrain.LIMIT})}"
    if (folder / "config.json").is_file():
        return load_selector(folder)
    train, val, _ = pretrain.load_pooled(pretrain.LIMIT, progress)
    pretrain.no_trec_dl(train + val)
    say(f"training the cross-encoder on {len(train)} pooled questions ({settings})")
    sel = make_selector("crossencoder", progress=progress, **settings)
    sel.fit(train, None, val)
    sel.save(folder)
    return sel


#: the generator-coupled flagship's row (the anchored selector's default blocks)
GENERATOR_ROW = "anchored, generator"


def generator_features(insts: Sequence[Instance], progress: bool) -> Any:
    """The default generator's warm-up features of ``insts``' questions (the feature store:
    extracted once, cached; the full profile's run has them already)."""
    from chunksel.build import extract_question_features

    return extract_question_features([i.question for i in insts], progress=progress)


def fit_generator_flagship(train: Sequence[Instance], val: Sequence[Instance], progress: bool) -> Any:
    """The flagship with its default blocks, fitted by the pretrained recipe (its
    statistics corpus) on ``train`` with the generator's features."""
    from chunksel.selectors import make_selector
    from chunksel.study import pretrain

    feats = generator_features(list(train) + list(val), progress)
    sel = make_selector("anchored", corpus=pretrain.CORPUS, progress=progress)
    sel.fit(list(train), feats, list(val))
    return sel


def generator_flagship(progress: bool) -> Any:
    """The generator-coupled flagship trained on the recipe's pooled six datasets (TREC DL
    left out), cached under the cache root."""
    from chunksel.config import cache_root, config_hash
    from chunksel.selectors import load_selector
    from chunksel.study import pretrain

    folder = cache_root() / "zeroshot" / f"anchored-generator-{config_hash({'limit': pretrain.LIMIT})}"
    if (folder / "config.json").is_file():
        return load_selector(folder)
    train, val, _ = pretrain.load_pooled(pretrain.LIMIT, progress)
    pretrain.no_trec_dl(train + val)
    say(f"training the generator-coupled flagship on {len(train)} pooled questions")
    sel = fit_generator_flagship(train, val, progress)
    sel.save(folder)
    return sel


def minilm_scored(insts: Sequence[Instance]) -> list[Instance]:
    """The lists in their retriever's order, each candidate's score the MiniLM cosine to the
    question: what ``ChunkSelector`` computes when a caller whose retriever is not MiniLM
    passes no ``chunk_scores`` (the pretrained models read MiniLM cosines; a BM25 score
    is refused, :func:`~chunksel.pipeline.select_inputs.check_score_scale`)."""
    from dataclasses import replace

    out = []
    for inst in insts:
        q = np.asarray(inst.question.embedding, dtype=np.float64)
        cands = [replace(c, score=float(q @ np.asarray(c.embedding, dtype=np.float64))) for c in inst.candidates]
        out.append(replace(inst, candidates=cands))
    return out


#: questions per scoring call (the progress bar's step)
SCORE_CHUNK = 256


def _scores(sel: Any, insts: Sequence[Instance], features: Any = None, progress: bool = False,
            name: str = "") -> np.ndarray:
    from tqdm.auto import tqdm

    from chunksel.config import show_progress

    insts = list(insts)
    width = max(len(i.candidates) for i in insts)
    s = np.full((len(insts), width), -1e9)  # a fixed-K row scores the first K: the rest rank after them
    with tqdm(total=len(insts), desc=f"scoring {name}".strip(), unit="q",
              disable=not show_progress(progress) or len(insts) <= SCORE_CHUNK) as bar:
        for a in range(0, len(insts), SCORE_CHUNK):
            part = np.asarray(sel.score(insts[a:a + SCORE_CHUNK], features), dtype=np.float64)
            s[a:a + len(part), :min(part.shape[1], width)] = part[:, :width]
            bar.update(len(part))
    for b, inst in enumerate(insts):
        s[b, len(inst.candidates):] = -np.inf
    return s


def evaluate_row(sel: Any, insts: Sequence[Instance], graded: bool, features: Any = None,
                 progress: bool = False, name: str = "") -> dict[str, Any]:
    """Rank-1 hits (answerable questions), nDCG@10 / MRR@10 when graded, calibration
    (``features``: the generator's, for a selector that reads them); a progress bar
    (``name``) over more than :data:`SCORE_CHUNK` questions."""
    from chunksel.eval.metrics import per_instance_hits
    from chunksel.study.abstention import abstention_of
    from chunksel.types import label_matrix

    t = time.perf_counter()
    scores = _scores(sel, insts, features, progress, name)
    seconds = time.perf_counter() - t
    labels = label_matrix(list(insts), k=scores.shape[1])
    answerable = labels.any(axis=1)
    hits = per_instance_hits(scores, labels)[answerable]
    out: dict[str, Any] = {"hits": hits.astype(int).tolist(), "rank1": 100.0 * float(hits.mean()),
                           "n": int(answerable.sum()), "n_all": len(insts), "score_seconds": seconds}
    if graded:
        from chunksel.study.zeroshot_data import graded_ndcg_at_10, mrr_at_10

        nd, rr = graded_ndcg_at_10(scores, insts), mrr_at_10(scores, insts)
        out.update(ndcg10=100.0 * float(nd.mean()), mrr10=100.0 * float(rr.mean()),
                   ndcg10_values=nd.tolist())
    if getattr(sel, "calibrator_", None) is not None:
        ab = abstention_of(sel, list(insts), features, scores=np.where(np.isfinite(scores), scores, -np.inf))
        out["calibration"] = {k: ab.get(k) for k in ("chunk_ece", "set_ece", "auroc", "auto", "k1", "k2",
                                                      "answerable_rate")}
    return out


def compare_rows(rows: dict[str, dict[str, Any]], ref: str) -> dict[str, dict[str, Any]]:
    """Each row against ``ref`` on rank-1: the paired bootstrap interval and McNemar's p
    (points), and whether both tests agree."""
    from chunksel.study.zeroshot_report import paired

    out = {}
    for name, r in rows.items():
        if name == ref:
            continue
        c = paired(r, rows[ref])
        del c["n"]  # the record's keys as before
        out[name] = c
    return out


def _finish(rows: dict[str, dict[str, Any]]) -> dict[str, Any]:
    strongest = max(rows, key=lambda n: rows[n]["rank1"])
    return {"rows": rows, "strongest": strongest, "vs_strongest": compare_rows(rows, strongest),
            "vs_retrieval": compare_rows(rows, "retrieval") if "retrieval" in rows else {}}


# ------------------------------------------------------------------ leave one dataset out
#: the candidate lists of the held-out datasets: the build's ``index`` for each
LODO_CANDIDATES = {"minilm": "flat", "bm25": "bm25"}


def lodo(progress: bool, only: Sequence[str] | None = None, candidates: str = "minilm",
         generator: bool = True) -> dict[str, Any]:
    """Each benchmark dataset held out: the recipe's LambdaMART and anchored selector
    retrained on the other five (pooled training, validation: the recipe's MiniLM lists),
    tested on its test split's top-5 lists of ``candidates`` (``minilm`` or ``bm25``);
    with ``generator``, the generator-coupled flagship too."""
    from chunksel.build import build_instances
    from chunksel.data.datasets import BENCHMARK_DATASETS
    from chunksel.selectors import make_selector
    from chunksel.study import pretrain

    shipped = {name: json.loads((_pretrained_dir(name) / "config.json").read_text())["params"]
               for name in ("anchored-base", "lambdamart-base")}  # the recipe's choices
    blocks = shipped["anchored-base"]["blocks"]
    train, val, _ = pretrain.load_pooled(pretrain.LIMIT, progress)
    out = {}
    for ds in only or BENCHMARK_DATASETS:
        test = [i for i in build_instances(ds, k=pretrain.K, index=LODO_CANDIDATES[candidates], limit=pretrain.LIMIT,
                                           split=pretrain.SPLIT, progress=progress).instances
                if i.split == "test" and i.candidates]
        tr = [i for i in train if i.question.dataset != ds]
        va = [i for i in val if i.question.dataset != ds]
        rows = {"retrieval": evaluate_row(make_selector("retrieval"), test, False)}
        if candidates != "bm25":  # on BM25 lists the BM25 row is retrieval order
            rows["bm25"] = evaluate_row(make_selector("bm25", progress=False), test, False)
        learned = minilm_scored(test) if candidates == "bm25" else test
        for key, name, params in (
                ("lambdamart (LODO)", "lambdamart", {"late": shipped["lambdamart-base"].get("late", False)}),
                ("anchored (LODO)", "anchored", {"blocks": blocks, "late": shipped["anchored-base"].get("late", False)})):
            t = time.time()
            sel = make_selector(name, corpus=pretrain.CORPUS, progress=progress, **params)
            sel.fit(tr, None, va)
            rows[key] = evaluate_row(sel, learned, False, progress=progress, name=key)
            rows[key]["fit_seconds"] = time.time() - t
        if generator:
            t = time.time()
            sel = fit_generator_flagship(tr, va, progress)
            rows[f"{GENERATOR_ROW} (LODO)"] = evaluate_row(sel, learned, False, generator_features(test, progress),
                                                            progress=progress, name=GENERATOR_ROW)
            rows[f"{GENERATOR_ROW} (LODO)"]["fit_seconds"] = time.time() - t
        out[ds] = _finish(rows)
        out[ds]["anchored_vs_lambdamart"] = compare_rows(
            {k: rows[k] for k in ("anchored (LODO)", "lambdamart (LODO)")}, "lambdamart (LODO)")["anchored (LODO)"]
        say(f"held out {ds} ({candidates} lists): " + ", ".join(f"{k} {v['rank1']:.2f}" for k, v in rows.items()))
    return out


def _pretrained_dir(name: str) -> Path:
    from chunksel.pretrained import pretrained_dir

    return pretrained_dir(name)


# ------------------------------------------------------------------ the run
def run(out: Path = OUT, progress: bool = True, only: Sequence[str] | None = None,
        lodo_candidates: Sequence[str] = tuple(LODO_CANDIDATES), with_ce: bool = True,
        update: bool = False, generator: bool = True, stale: bool = False) -> dict[str, Any]:
    """Run the collections (``only``: those keys; ``()``: none) and the held-out datasets
    for each of ``lodo_candidates``; ``update`` keeps what ``out/results.json`` holds for
    the parts not run (each part's figures depend on its own inputs alone). Each part
    records the pretrained models and the code it was measured with (``results["parts"]``),
    so a report that keeps an earlier run's parts names them and marks what pools them
    with newer ones as provisional. ``results.json`` is saved after each part, so an
    interrupted run loses only the part it was in; ``stale`` (with ``update``) narrows the
    run to the parts not yet measured on the current pretrained models, which resumes it."""
    from chunksel.pretrained import read_manifest
    from chunksel.selectors import make_selector
    from chunksel.study.fitting import git_commit
    from chunksel.study.zeroshot_data import instance_stats

    results: dict[str, Any] = {"collections": {}, "stats": {}, "lodo": {}, "seconds": {}, "parts": {}}
    if update and (out / "results.json").is_file():
        results.update(json.loads((out / "results.json").read_text()))
        results.setdefault("lodo", {})
        if not isinstance(results.get("seconds"), dict):
            results["seconds"] = {}
        backfill_parts(results)
    results["pretrained_commit"] = read_manifest().get("commit")
    made = {"pretrained_commit": results["pretrained_commit"], "commit": git_commit()}
    every = collections(progress)
    if stale:
        keys, lodo_candidates = parts_to_rerun(results, results["pretrained_commit"],
                                               [k for k in every if only is None or k in only], lodo_candidates)
        say("not yet on the current pretrained models: " + (", ".join(keys + [f"lodo/{c}" for c in lodo_candidates])
                                                            or "none"))
        only = keys
    todo = {k: v for k, v in every.items() if only is None or k in only}
    ce = crossencoder(progress) if with_ce and todo else None
    for key, (build, stats_corpus) in todo.items():
        tk = time.time()
        built = build()
        insts = [i for i in built if i.candidates]  # BM25 finds nothing for a query without a corpus term
        graded = key != "wikiqa"
        results["stats"][key] = instance_stats(built) if graded else {"questions": len(built)}
        results["stats"][key]["no_candidates"] = len(built) - len(insts)
        rows: dict[str, dict[str, Any]] = {}
        rows["retrieval"] = evaluate_row(make_selector("retrieval"), insts, graded)
        rows["bm25"] = evaluate_row(make_selector("bm25", corpus=stats_corpus, progress=False), insts, graded)
        learned = minilm_scored(insts) if key.endswith("/bm25") else insts  # BM25's order, MiniLM cosines
        for name in ("lambdamart-base", "anchored-base"):
            rows[name] = evaluate_row(pretrained_selector(name), learned, graded)
            if key == OWN_STATS:
                rows[f"{name} (own stats)"] = evaluate_row(pretrained_selector(name, stats_corpus), learned, graded)
        if ce is not None:
            rows["crossencoder"] = evaluate_row(ce, learned, graded, progress=progress, name="crossencoder")
        if key in GENERATOR_COLLECTIONS and generator:
            flag = generator_flagship(progress)
            rows[GENERATOR_ROW] = evaluate_row(flag, learned, graded, generator_features(learned, progress),
                                              progress=progress, name=GENERATOR_ROW)
        results["collections"][key] = _finish(rows)
        results["seconds"][key] = time.time() - tk
        results["parts"][key] = dict(made)
        save(results, out)
        say(f"{key}: " + ", ".join(f"{k} {v['rank1']:.2f}" for k, v in rows.items()))
    for cand in lodo_candidates:
        tk = time.time()
        results["lodo"][cand] = lodo(progress, candidates=cand, generator=generator)
        results["seconds"][f"lodo/{cand}"] = time.time() - tk
        results["parts"][f"lodo/{cand}"] = dict(made)
        save(results, out)
    save(results, out)
    from chunksel.study.zeroshot_report import write_report

    write_report(results, out)
    return results


def save(results: dict[str, Any], out: Path) -> None:
    """Write ``out/results.json`` with the average over the parts measured so far (atomically:
    an interruption leaves the previous save)."""
    results["average"] = zero_shot_average(results)
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "results.json.tmp"
    tmp.write_text(json.dumps(results, indent=1, default=float) + "\n")
    tmp.replace(out / "results.json")


def zero_shot_average(results: dict[str, Any]) -> dict[str, Any]:
    """Rank-1 averaged over :data:`AVERAGE` and the held-out datasets, per row (the LODO
    rows stand for the pretrained models there), and anchored-base minus lambdamart-base
    with a bootstrap interval over the pooled questions of those collections."""
    from chunksel.eval.significance import compare

    parts = [results["collections"][k]["rows"] for k in AVERAGE if k in results["collections"]]
    parts += [{"retrieval": r["rows"]["retrieval"], "bm25": r["rows"]["bm25"],
               "lambdamart-base": r["rows"]["lambdamart (LODO)"], "anchored-base": r["rows"]["anchored (LODO)"]}
              for r in ((results.get("lodo") or {}).get("minilm") or {}).values()]
    if not parts:
        return {}
    names = [n for n in ("retrieval", "bm25", "lambdamart-base", "anchored-base") if all(n in p for p in parts)]
    out: dict[str, Any] = {"collections": len(parts),
                           "rank1": {n: float(np.mean([p[n]["rank1"] for p in parts])) for n in names}}
    a = np.concatenate([p["anchored-base"]["hits"] for p in parts])
    b = np.concatenate([p["lambdamart-base"]["hits"] for p in parts])
    c = compare(a, b)
    out["anchored_minus_lambdamart_pooled"] = {"diff": 100 * c["diff"], "lo": 100 * c["lo"],
                                               "hi": 100 * c["hi"], "p": c["p"], "n": c["n"]}
    return out


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m chunksel.study.zeroshot", description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--only", action="append", default=None, help="collection key(s) to run ('none': no collection)")
    p.add_argument("--lodo", nargs="*", default=list(LODO_CANDIDATES), choices=list(LODO_CANDIDATES),
                   help="the held-out datasets' candidate lists to run (none: skip)")
    p.add_argument("--no-ce", action="store_true")
    p.add_argument("--no-generator", action="store_true",
                   help="leave out the generator-coupled flagship (its SmolLM2 warm-up features)")
    p.add_argument("--update", action="store_true", help="keep the parts of OUT/results.json not run now")
    p.add_argument("--stale", action="store_true",
                   help="with --update: run only the parts not yet on the current pretrained models (resumes a run)")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    only = [] if args.only == ["none"] else args.only
    if args.stale and not args.update:
        p.error("--stale keeps the parts already re-run, so it needs --update")
    unknown = sorted(set(only or ()) - set(collections(False)))
    if unknown:
        p.error(f"unknown collection(s) {', '.join(unknown)}; known: {', '.join(collections(False))}")
    run(args.out, progress=not args.quiet, only=only, lodo_candidates=args.lodo, with_ce=not args.no_ce,
        update=args.update, generator=not args.no_generator, stale=args.stale)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
