"""Transfer: leave one dataset out.

For each dataset of the study, the transfer rows (:data:`TRANSFER_ROWS`, those the study
runs) are trained on the pool of the *other* datasets' training splits (early stopping and
calibration on the pool of their validation splits) and tested on the held-out dataset's
test split: what a user gets who applies a trained selector to questions of a source it
never saw. One seed (the study's). Each row carries its test rank-1 with a bootstrap
interval per held-out dataset, and every row but LambdaMART its paired difference against
LambdaMART over all held-out test questions together. The cross-encoder trains a shorter
recipe here than in Table 1 (:data:`TRANSFER_OVERRIDES`); the stacked row (``anchored-ce``)
stacks the anchored selector and the cross-encoder fitted on the same pool, its weight
chosen on the pool's validation splits.

WikiQA (:data:`NEVER_TRAINED`) is a further held-out column that no row is ever trained
on: every row is trained on all the study's datasets (pooled) and tested on WikiQA's
questions (every question of the profile's sample: none is trained on). Its candidate
sentences ship with the data in document order; :func:`retriever_ranked` orders them as a
retriever would hand them over (MiniLM cosine to the question, top K), so retrieval order
means the same there as on the six; their BM25 statistics are the Wikipedia corpus's.

A profile runs the stage where ``Profile.transfer`` is set (full and large), or
``chunksel bench --transfer``; it needs at least three datasets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from chunksel.data.datasets import DATASETS
from chunksel.study.fitting import evaluate_selector, make_selector, say, settings_of
from chunksel.study.profiles import CE_QUICK, FLAGSHIP, STACKED
from chunksel.study.records import TransferRow

#: the rows of the transfer table, in order (those the study runs)
TRANSFER_ROWS: tuple[str, ...] = ("retrieval", "bm25", "lambdamart", "crossencoder", FLAGSHIP, STACKED)
#: settings the transfer stage replaces (seven trainings a row): the cross-encoder trains the
#: quick profile's short recipe (600 answerable questions of the pool, about 4 min each on one
#: thread) on every profile, not full/large's 6,000-question one (about 1.9 h each)
TRANSFER_OVERRIDES: dict[str, dict[str, Any]] = {"crossencoder": CE_QUICK}
#: the row every other is compared with
REFERENCE = "lambdamart"
#: held-out datasets no row is trained on (the registry's non-benchmark datasets: given
#: candidates, re-ranked by the retriever)
NEVER_TRAINED: tuple[str, ...] = tuple(n for n, s in DATASETS.items() if not s.benchmark)
#: build a given-candidates dataset with every candidate (WikiQA ships at most 30 a question)
_ALL_GIVEN = 64


def retriever_ranked(instances: Sequence[Any], k: int) -> list[Any]:
    """Instances whose given candidates are re-ordered as a retriever hands them over: by
    the cosine of each candidate's retriever embedding to the question's, the top ``k``,
    with that cosine as the retrieval score and the new rank."""
    out = []
    for inst in instances:
        q = np.asarray(inst.question.embedding, dtype=np.float64)
        cos = np.asarray([float(q @ np.asarray(c.embedding, dtype=np.float64)) for c in inst.candidates])
        order = np.argsort(-cos, kind="stable")[:k]
        cands = [replace(inst.candidates[j], score=float(cos[j]), rank=r) for r, j in enumerate(order)]
        out.append(replace(inst, candidates=cands))
    return out


def never_trained_instances(limit: int | None, k: int, seed: int, split: str, progress: bool) -> dict[str, list]:
    """:data:`NEVER_TRAINED` datasets' instances (every split of the profile's sample),
    candidates re-ranked by :func:`retriever_ranked`."""
    from chunksel.build import build_instances

    out = {}
    for ds in NEVER_TRAINED:
        built = build_instances(ds, k=_ALL_GIVEN, index="flat", limit=limit, seed=seed, progress=progress,
                                split=split)
        out[ds] = retriever_ranked(built.instances, k)
    return out


def lodo_pools(splits: Mapping[str, Mapping[str, Sequence[Any]]], held_out: str) -> tuple[list, list]:
    """The training and validation pools for ``held_out``: the other datasets' training and
    validation splits (in the study's order), never an instance of ``held_out`` (for a
    dataset outside the study, such as WikiQA: every dataset's)."""
    others = [ds for ds in splits if ds != held_out]  # a dataset outside the study: every one
    train = [i for ds in others for i in splits[ds]["train"]]
    val = [i for ds in others for i in splits[ds]["val"]]
    return train, val


def transfer(study: Any) -> dict[str, TransferRow]:
    """The leave-one-dataset-out rows (empty unless the profile asks and there are at
    least three datasets; a ``bench --jobs`` worker pools nothing)."""
    from chunksel.eval.significance import bootstrap_interval, paired_bootstrap

    if not getattr(study.prof, "transfer", False) or len(study.datasets) < 3 or study.part_of:
        return {}
    from chunksel.study.memo import features_fingerprint, instances_fingerprint

    names = [n for n in TRANSFER_ROWS if n in study.selectors]
    hits: dict[str, dict[str, np.ndarray]] = {n: {} for n in names}
    extra = dict(getattr(study, "never_trained", None) or {})
    every = {ds: study.split_fp[ds] for ds in study.datasets}
    plan = [(held, *lodo_pools(study.splits, held), study.splits[held]["test"], every) for held in study.datasets]
    for ds, insts in extra.items():
        ids = [i.id for i in insts]
        data = {**every, ds: {"test": instances_fingerprint(insts), "features": features_fingerprint(study.features, ids)}}
        plan.append((ds, *lodo_pools(study.splits, ds), list(insts), data))
    prof = replace(study.prof, overrides={**study.prof.overrides, **TRANSFER_OVERRIDES})
    for held, train, val, test, data in plan:
        fitted: dict[str, Any] = {}  # this held-out dataset's fitted rows (a stacked row's members)
        for name in names:
            key = study.memo.key(stage="transfer", held_out=held, data=data, **settings_of(name, study.seed, prof))
            got = study.memo.get(key)
            if got is None:
                sel = _fit_on_pool(name, study, prof, train, val, fitted)
                _, h, ans = evaluate_selector(sel, test, study.features)
                got = study.memo.put(key, {"hits": np.asarray(h, dtype=float)[ans].tolist()})
            hits[name][held] = np.asarray(got["hits"], dtype=float)
            say(f"transfer: {name} held out {held}: {100 * hits[name][held].mean():.2f}")
    rows: dict[str, TransferRow] = {}
    for name in names:
        held_out, ci, n, diff = {}, {}, {}, {}
        for ds, h in hits[name].items():
            m, lo, hi = bootstrap_interval(h)
            held_out[ds], ci[ds], n[ds] = 100 * m, [100 * lo, 100 * hi], int(len(h))
            if REFERENCE in hits and name != REFERENCE:
                diff[ds] = [100 * x for x in paired_bootstrap(h, hits[REFERENCE][ds])]
        vs = None
        if REFERENCE in hits and name != REFERENCE:
            a = np.concatenate([hits[name][ds] for ds in study.datasets])
            b = np.concatenate([hits[REFERENCE][ds] for ds in study.datasets])
            vs = [100 * x for x in paired_bootstrap(a, b)]
        rows[name] = TransferRow(held_out=held_out, ci=ci, answerable=n, vs_reference=vs,
                                 reference=REFERENCE if vs is not None else None, diff=diff,
                                 never_trained=list(extra))
    return rows


def _fit_on_pool(name: str, study: Any, prof: Any, train: list, val: list, fitted: dict[str, Any]) -> Any:
    """``name`` fitted on one held-out dataset's pools (``fitted``: those fitted already; a
    stacked row stacks on its members fitted there)."""
    if name not in fitted:
        sel = make_selector(name, study.seed, study.progress, prof)
        cls = type(sel)
        if cls.stacked:
            sel.with_members(_fit_on_pool(cls.base_name, study, prof, train, val, fitted),
                             _fit_on_pool(cls.member_name, study, prof, train, val, fitted))
        fitted[name] = sel.fit(train, study.features, val)
    return fitted[name]
