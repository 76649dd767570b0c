"""The SRAS paper's protocol on chunksel's data (SRAS paper, Sec. IV-V).

Pools (Sec. IV-B): for each question, ``n = 8`` candidates -- its gold passage and 7
passages drawn at random from the corpus (seeded per question, fixed across runs) --
ordered by MiniLM cosine to the question (so "top-k cosine" is retrieval order). Data:
NQ's oracle gold passages (``chunksel.data.datasets.load_questions("nq")``, gold
resolved in ``wiki-w100``); training questions from the train+val splits, test
questions from the test split.

Selectors pick ``k = 3`` chunks; a frozen generator (SmolLM2-135M-Instruct,
``LocalBackend``, greedy, 32 new tokens) answers from them; answers are scored with
relaxed F1 and BERTScore F1 (local all-MiniLM-L6-v2, layer 5, no rescaling: see
:mod:`chunksel.labels.answers`) against the NQ answers. Rows:

- top-k cosine (``retrieval``), random (``random``, per seed), the supervised
  feed-forward selector (``sras`` with ``ppo_epochs=0``: the same scorer, cross-entropy
  only), SRAS (warm-up + PPO on the hybrid reward), and the ablations without warm-up
  (NoSW), without reward shaping (NoRS: exact-match reward) and without curriculum (NoCL);
- reward curves (mean sampled reward per PPO epoch) for SRAS and the ablations;
- SQuAD v2 zero-shot (Sec. V-D): answerable SQuAD 2.0 dev questions, the same pool
  recipe with the question's paragraph as gold, ``k = 1``, the NQ-trained SRAS;
- intervals over seeds (mean and a 95% t-interval of the per-seed means);
- latency: selector only (batch 1, one thread) and end to end (question embedding +
  scoring + generation), separately; parameters and size on disk.

Everything is resumable: generations go through the LLM response cache, trained
selectors and per-(selector, seed) evaluations are kept under ``--work`` (default
``CHUNKSEL_CACHE/sras_paper/<data key>``), so a killed run picks up where it stopped.
The budget (questions, epochs, seeds) is set on the command line; the defaults are the
paper's (25 PPO epochs, 300 test pairs, 250 SQuAD pairs), which take many hours on two
cores (about 1 s per generated answer). A smoke run::

    nice -n 19 python benchmarks/sras_paper.py --train-questions 16 --ppo-epochs 1 \\
        --test-questions 16 --squad-questions 16 --seeds 0,1 --out /tmp/sras_smoke.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
DEFAULT_OUT = HERE / "results" / "sras_paper.json"
#: the ablations (Sec. V-B) as settings changed from full SRAS
VARIANTS: dict[str, dict[str, Any]] = {
    "sras": {},
    "nosw": {"warmup_epochs": 0},
    "nors": {"reward": "sparse"},
    "nocl": {"curriculum": False},
}
DISPLAY = {
    "retrieval": "Top-k cosine", "random": "Random", "supervised": "Supervised (FF)",
    "sras": "SRAS (PPO)", "nosw": "SRAS NoSW", "nors": "SRAS NoRS", "nocl": "SRAS NoCL",
}


def log(msg: str) -> None:
    print(f"[sras_paper {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def stable_hash(obj: Any, n: int = 12) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:n]


def write_json(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".part")
    tmp.write_text(json.dumps(obj, indent=2, default=str))
    os.replace(tmp, path)


# --------------------------------------------------------------------- pools
def build_pools(dataset: str, questions: list, corpus, emb: np.ndarray, gold_index, n_pool: int,
                data_seed: int) -> list:
    """Instances of ``n_pool`` candidates: the gold passage + random corpus passages,
    ordered by cosine to the question (embeddings must be on the questions)."""
    from chunksel.labels.gold import gold_corpus_ids
    from chunksel.types import Candidate, Instance

    out = []
    n = len(corpus)
    for q in questions:
        gold = sorted(gold_corpus_ids(q, gold_index))
        if not gold or not q.answers:
            continue
        grow = corpus.row_of[gold[0]]
        rng = np.random.default_rng([data_seed, *hashlib.sha256(q.id.encode()).digest()[:8]])
        rows = [grow]
        while len(rows) < n_pool:
            r = int(rng.integers(n))
            if r not in rows and corpus.ids[r] not in gold:
                rows.append(r)
        cos = emb[rows] @ q.embedding
        cands = []
        for rank, j in enumerate(np.argsort(-cos, kind="stable")):
            row = rows[j]
            cands.append(Candidate(
                id=corpus.ids[row], text=corpus.texts[row], title=corpus.titles[row], score=float(cos[j]),
                rank=rank, labels={"gold": int(row == grow)}, embedding=np.asarray(emb[row], np.float32),
            ))
        out.append(Instance(q, cands, split=q.meta.get("split", "test"), label_source="gold"))
    return out


def load_split(dataset: str, split: tuple[str, ...], limit: int, corpus, gold_index) -> list:
    """Questions of ``dataset`` in ``split`` that have answers and a gold passage in the
    corpus; a deterministic sample of ``limit``."""
    from chunksel.build import sample_questions
    from chunksel.data.datasets import load_questions
    from chunksel.data.splits import split_of_text
    from chunksel.labels.gold import gold_corpus_ids

    qs = []
    for q in load_questions(dataset, progress=False):
        s = split_of_text(q.text)
        if s in split and q.answers and gold_corpus_ids(q, gold_index):
            q.meta["split"] = s
            qs.append(q)
    return sample_questions(qs, limit)


def embed_questions(questions: list) -> None:
    from chunksel.retrieval.encoder import Encoder

    vecs = Encoder().encode_questions(questions, progress=False)
    for q, v in zip(questions, vecs, strict=True):
        q.embedding = np.asarray(v, np.float32)


# ------------------------------------------------------------------ metrics
def interval(values: list[float]) -> dict[str, Any]:
    """Mean and 95% t-interval over seeds (no interval from one value)."""
    v = np.asarray(values, dtype=float)
    out: dict[str, Any] = {"mean": float(v.mean()), "per_seed": [float(x) for x in v], "n": len(v)}
    if len(v) > 1:
        from scipy import stats

        half = float(stats.t.ppf(0.975, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
        out.update(lo=out["mean"] - half, hi=out["mean"] + half)
    return out


def evaluate(sel, instances: list, k: int, reward, path: Path) -> dict[str, Any]:
    """Select ``k`` chunks, generate, score; cached at ``path``."""
    if path.is_file():
        return json.loads(path.read_text())
    picks = sel.select(instances, k=k)
    comp = reward.components(instances, [p.indices for p in picks], with_bertscore=True)
    gold_hit = [float(any(inst.candidates[j].labels.get("gold", 0) for j in p.indices))
                for inst, p in zip(instances, picks)]
    res = {
        "relaxed_f1": float(np.mean(comp["relaxed_f1"])),
        "bertscore_f1": float(np.mean(comp["bertscore"])),
        "exact_match": float(np.mean(comp["exact_match"])),
        "gold_in_selection": float(np.mean(gold_hit)),
        "n": len(instances),
        "examples": [{"id": i.id, "answers": i.question.answers[:3], "generated": a}
                     for i, a in zip(instances[:3], comp["answers"][:3])],
    }
    write_json(path, res)
    return res


def summarise(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    keys = ("relaxed_f1", "bertscore_f1", "exact_match", "gold_in_selection")
    out = {key: interval([r[key] for r in per_seed]) for key in keys}
    out["n_questions"] = per_seed[0]["n"]
    out["examples"] = per_seed[0].get("examples", [])
    return out


# ------------------------------------------------------------------ latency
def selector_latency(sel, instances: list, repeats: int) -> dict[str, float]:
    """Median and mean ms of ``select([inst], k)`` at batch 1 on one thread."""
    import torch

    torch.set_num_threads(1)
    times = []
    for r in range(repeats):
        inst = instances[r % len(instances)]
        t0 = time.perf_counter()
        sel.select([inst], k=1)
        times.append((time.perf_counter() - t0) * 1000)
    times = times[min(5, len(times) - 1):]  # drop warm-up calls
    return {"median_ms": float(np.median(times)), "mean_ms": float(np.mean(times)),
            "p95_ms": float(np.percentile(times, 95)), "calls": len(times)}


def end_to_end_latency(sel, instances: list, k: int, backend, n: int, max_new_tokens: int) -> dict[str, Any]:
    """Per question: embed the question, score and select, generate (uncached)."""
    from chunksel.retrieval.encoder import Encoder
    from chunksel.training.rewards import AnswerGenerator

    enc = Encoder()
    enc.encode_questions([instances[0].question], progress=False)  # load and warm
    gen = AnswerGenerator(backend, max_new_tokens=max_new_tokens)
    parts: dict[str, list[float]] = {"embed_ms": [], "select_ms": [], "generate_ms": [], "total_ms": []}
    for inst in instances[:n]:
        t0 = time.perf_counter()
        inst.question.embedding = enc.encode_questions([inst.question], progress=False)[0]
        t1 = time.perf_counter()
        pick = sel.select([inst], k=k)[0]
        t2 = time.perf_counter()
        backend.generate([gen.prompt(inst, pick.indices)], max_new_tokens, temperature=0.0)
        t3 = time.perf_counter()
        for key, v in (("embed_ms", t1 - t0), ("select_ms", t2 - t1), ("generate_ms", t3 - t2), ("total_ms", t3 - t0)):
            parts[key].append(v * 1000)
    return {key: float(np.median(v)) for key, v in parts.items()} | {"questions": min(n, len(instances))}


# -------------------------------------------------------------------- plots
def plot(results: dict[str, Any], out_dir: Path, stem: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    curves = results.get("reward_curves", {})
    if curves:
        fig, ax = plt.subplots(figsize=(6, 4))
        for name, per_seed in curves.items():
            arr = np.array([c for c in per_seed if c])
            if arr.size == 0:
                continue
            x = np.arange(1, arr.shape[1] + 1)
            mean = arr.mean(0)
            ax.plot(x, mean, marker="o", label=DISPLAY.get(name, name))
            if len(arr) > 1:
                ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)
        ax.set_xlabel("PPO epoch")
        ax.set_ylabel("mean sampled reward")
        ax.set_title("SRAS reward per epoch (band: min-max over seeds)")
        ax.legend()
        fig.tight_layout()
        path = out_dir / f"{stem}_reward_curves.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        files.append(str(path))
    for table, title in (("main", f"NQ pools (n={results['config']['pool']}, k={results['config']['k']})"),
                         ("squad2", f"SQuAD v2 zero-shot (k={results['config']['squad_k']})")):
        rows = results.get(table, {})
        if not rows:
            continue
        names = list(rows)
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.8))
        for ax, metric in zip(axes, ("relaxed_f1", "bertscore_f1")):
            means = [rows[n][metric]["mean"] for n in names]
            err = [[rows[n][metric]["mean"] - rows[n][metric].get("lo", rows[n][metric]["mean"]) for n in names],
                   [rows[n][metric].get("hi", rows[n][metric]["mean"]) - rows[n][metric]["mean"] for n in names]]
            ax.bar(range(len(names)), means, yerr=err, capsize=3)
            ax.set_xticks(range(len(names)), [DISPLAY.get(n, n) for n in names], rotation=35, ha="right")
            ax.set_title(metric)
        fig.suptitle(title)
        fig.tight_layout()
        path = out_dir / f"{stem}_{table}.png"
        fig.savefig(path, dpi=120)
        plt.close(fig)
        files.append(str(path))
    return files


# --------------------------------------------------------------------- main
def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--dataset", default="nq", help="training/test dataset with gold passages (nq)")
    p.add_argument("--train-questions", type=int, default=750, help="training questions (the paper: 750 QA pairs in all)")
    p.add_argument("--test-questions", type=int, default=300, help="test questions (the paper: 300)")
    p.add_argument("--squad-questions", type=int, default=250, help="SQuAD v2 zero-shot questions (0 = skip)")
    p.add_argument("--pool", type=int, default=8, help="candidates per question (1 gold + random)")
    p.add_argument("--k", type=int, default=3, help="chunks selected per question")
    p.add_argument("--squad-k", type=int, default=1, help="chunks selected on SQuAD v2")
    p.add_argument("--warmup-epochs", type=int, default=10)
    p.add_argument("--ppo-epochs", type=int, default=25)
    p.add_argument("--ppo-questions", type=int, default=None, help="PPO budget in questions (default: all training)")
    p.add_argument("--seeds", default="0,1,2", help="comma-separated training seeds")
    p.add_argument("--variants", default="sras,nosw,nors,nocl", help="SRAS variants to train")
    p.add_argument("--data-seed", type=int, default=0, help="seeds the random distractors")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--generator", default=None, help="generator folder or .gguf (default SmolLM2)")
    p.add_argument("--latency-repeats", type=int, default=200)
    p.add_argument("--e2e-questions", type=int, default=5)
    p.add_argument("--work", default=None, help="resumable state (default CHUNKSEL_CACHE/sras_paper/<key>)")
    p.add_argument("--out", default=str(DEFAULT_OUT))
    p.add_argument("--quiet", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    import torch

    torch.set_num_threads(1)
    if args.quiet:
        os.environ["TQDM_DISABLE"] = "1"
    from chunksel.config import cache_root
    from chunksel.data.corpus import Corpus
    from chunksel.labels.answers import BertScoreF1
    from chunksel.labels.gold import GoldIndex
    from chunksel.llm.local import LocalBackend
    from chunksel.retrieval.embeddings import corpus_embeddings
    from chunksel.retrieval.encoder import Encoder
    from chunksel.selectors import load_selector, make_selector
    from chunksel.training.rewards import AnswerGenerator, QAReward

    seeds = [int(s) for s in args.seeds.split(",") if s.strip()]
    variants = [v for v in args.variants.split(",") if v.strip()]
    bad = set(variants) - set(VARIANTS)
    if bad:
        raise SystemExit(f"unknown variants {sorted(bad)}; known: {list(VARIANTS)}")
    data_key = {"dataset": args.dataset, "train": args.train_questions, "test": args.test_questions,
                "squad": args.squad_questions, "pool": args.pool, "data_seed": args.data_seed, "v": 1}
    work = Path(args.work) if args.work else cache_root() / "sras_paper" / stable_hash(data_key)
    work.mkdir(parents=True, exist_ok=True)
    log(f"work dir {work}")

    t0 = time.perf_counter()
    corpus = Corpus.load("wiki-w100", progress=False)
    emb = corpus_embeddings(corpus, Encoder(), progress=False)
    gold_index = GoldIndex(corpus)
    log(f"corpus {len(corpus)} passages ready in {time.perf_counter() - t0:.0f} s")
    train_q = load_split(args.dataset, ("train", "val"), args.train_questions, corpus, gold_index)
    test_q = load_split(args.dataset, ("test",), args.test_questions, corpus, gold_index)
    squad_q = load_split("squad2", ("train", "val", "test"), args.squad_questions, corpus, gold_index) \
        if args.squad_questions > 0 else []
    embed_questions(train_q + test_q + squad_q)
    train = build_pools(args.dataset, train_q, corpus, emb, gold_index, args.pool, args.data_seed)
    test = build_pools(args.dataset, test_q, corpus, emb, gold_index, args.pool, args.data_seed)
    squad = build_pools("squad2", squad_q, corpus, emb, gold_index, args.pool, args.data_seed)
    del emb, gold_index
    log(f"pools: {len(train)} train, {len(test)} test, {len(squad)} squad2")

    backend = LocalBackend(args.generator)
    bertscore = BertScoreF1()
    generator = AnswerGenerator(backend, max_new_tokens=args.max_new_tokens, progress=not args.quiet)
    rewards = {mode: QAReward(generator, mode=mode, bertscore=bertscore) for mode in ("hybrid", "sparse")}
    evaluator = rewards["hybrid"]

    base = dict(k=args.pool, select_k=args.k, warmup_epochs=args.warmup_epochs, ppo_epochs=args.ppo_epochs,
                max_questions=args.ppo_questions, max_new_tokens=args.max_new_tokens,
                generator=args.generator, progress=not args.quiet, encoder_id=Encoder().model_id)

    def trained(name: str, seed: int):
        settings = dict(base, seed=seed)
        if name == "supervised":
            settings["ppo_epochs"] = 0
        else:
            settings.update(VARIANTS[name])
        folder = work / "models" / f"{name}-s{seed}-{stable_hash(settings)}"
        if (folder / "config.json").is_file():
            sel = load_selector(folder)
            summary = json.loads((folder.parent / (folder.name + ".summary.json")).read_text())
            return sel, summary, folder
        log(f"training {name} seed {seed}")
        sel = make_selector("sras", **settings)
        sel.fit(train, reward_fn=None if name == "supervised" else rewards[settings.get("reward", "hybrid")])
        sel.save(folder)
        write_json(folder.parent / (folder.name + ".summary.json"), sel.summary_)
        return sel, sel.summary_, folder

    results: dict[str, Any] = {
        "config": {**vars(args), "seeds": seeds, "variants": variants, "work": str(work),
                   "generator": None, "bertscore_model": bertscore.model_id},
        "data": {"train": len(train), "test": len(test), "squad2": len(squad),
                 "cosine_gold_at_1": float(np.mean([i.candidates[0].labels["gold"] for i in test])) if test else None},
        "main": {}, "ablations": {}, "squad2": {}, "reward_curves": {}, "training": {},
    }
    results["config"]["generator"] = backend.model_id
    per_seed: dict[str, list[dict[str, Any]]] = {}
    squad_seed: dict[str, list[dict[str, Any]]] = {}
    ev = work / "eval"
    for seed in seeds:
        sels: dict[str, Any] = {"retrieval": make_selector("retrieval"), "random": make_selector("random", seed=seed)}
        # evaluation files are named after what made the picks (a trained model: its folder,
        # whose name hashes its settings), so a changed budget never reuses stale scores
        tags = {"retrieval": "retrieval", "random": f"random-s{seed}"}
        for name in ["supervised", *variants]:
            sel, summary, folder = trained(name, seed)
            sels[name], tags[name] = sel, folder.name
            if name != "supervised":
                results["reward_curves"].setdefault(name, []).append(summary.get("reward_per_epoch", []))
            results["training"].setdefault(name, []).append(
                {k: summary.get(k) for k in ("n_warmup", "n_ppo", "ppo_epochs_run", "reward_calls",
                                             "seconds_warmup", "seconds_ppo")})
        for name, sel in sels.items():
            if name == "retrieval" and seed != seeds[0]:
                continue  # deterministic: one evaluation, no interval
            tag = tags[name]
            log(f"evaluating {name} seed {seed} on {len(test)} test questions")
            per_seed.setdefault(name, []).append(evaluate(sel, test, args.k, evaluator, ev / f"nq-k{args.k}-{tag}.json"))
            if squad and name in ("retrieval", "random", "sras"):
                if name == "retrieval" and name in squad_seed:
                    continue
                squad_seed.setdefault(name, []).append(
                    evaluate(sel, squad, args.squad_k, evaluator, ev / f"squad2-k{args.squad_k}-{tag}.json"))
        write_json(Path(args.out).with_suffix(".partial.json"), results)
    for name, rows in per_seed.items():
        table = "ablations" if name in ("nosw", "nors", "nocl") else "main"
        results[table][name] = summarise(rows)
    for name, rows in squad_seed.items():
        results["squad2"][name] = summarise(rows)

    # latency, parameters and size (SRAS of the first seed)
    sras, _, folder = trained("sras" if "sras" in variants else "supervised", seeds[0])
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file())
    results["size"] = {"parameters": sras.n_parameters(), "weights_bytes": (folder / "model.safetensors").stat().st_size,
                       "total_bytes": size, "total_mb": size / 1e6}
    lat_sel = {"retrieval": make_selector("retrieval"), "random": make_selector("random"), "sras": sras}
    results["latency"] = {
        "selector_only": {n: selector_latency(s, test, args.latency_repeats) for n, s in lat_sel.items()},
        "end_to_end": {n: end_to_end_latency(s, test, args.k, backend, args.e2e_questions, args.max_new_tokens)
                       for n, s in lat_sel.items() if n != "random"},
        "threads": torch.get_num_threads(),
    }
    results["generation"] = generator.stats.to_dict()
    results["seconds"] = time.perf_counter() - t0
    out = Path(args.out)
    results["plots"] = plot(results, out.parent, out.stem)
    write_json(out, results)
    Path(args.out).with_suffix(".partial.json").unlink(missing_ok=True)
    log(f"wrote {out}")
    return results


if __name__ == "__main__":
    main()
