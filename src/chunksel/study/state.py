"""The state the study's stages share (:class:`Study`): the splits, the memo, the
per-seed hits, picks and validation accuracies, and the one memoised fit + evaluation
every stage goes through."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np

from chunksel.study.cost import measure_cost
from chunksel.study.fitting import evaluate_selector, make_selector, settings_of
from chunksel.study.memo import (
    Memo,
    code_fingerprint,
    digest,
    features_fingerprint,
    instances_fingerprint,
)
from chunksel.study.records import Table1Row


class Study:
    """What the stages of :func:`~chunksel.study.run.run_study` share: the splits, the memo
    and the hits."""

    def __init__(self, instances, selectors, prof, features, seed, progress, reuse, timings,
                 part_of: str | None = None) -> None:
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
        self.memo = Memo(reuse, {"code": code_fingerprint()})
        # a dataset's memo keys read its own instances and features only, so runs over
        # different sets of datasets (e.g. two processes, then the whole study) share them
        self.split_fp = {
            ds: {**{sp: instances_fingerprint(v) for sp, v in self.splits[ds].items()},
                 "features": features_fingerprint(features, [i.id for i in instances[ds]])} if reuse else {}
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
        #: the transfer stage's datasets no row is trained on (run_study's never_trained)
        self.never_trained: dict[str, list] = {}
        self.t1: dict[str, Table1Row] = {}
        #: in a worker of ``bench --jobs``: the whole study's first dataset (else None)
        self.part_of = part_of
        #: where Table 1 measures the cost columns: the (whole) study's first dataset
        self.cost_dataset = self.part_of or self.datasets[0]
        #: the encoder of the cost stage's raw-text path (None: the packaged MiniLM)
        self.encoder: Any = None
        #: the members of the stacked rows (``anchored-ce``): their Table 1 fits keep their
        #: validation and test scores and their fitted models, which the stacked row reads
        self.stack_members: set[str] = set()
        for name in selectors:
            cls = _class(name)
            if cls.stacked:
                self.stack_members |= {cls.base_name, cls.member_name}
        self._models: dict[str, Any] = {}  # memo key -> a fitted member model (this process)

    # ---------------------------------------------------------------- one fit
    def seeds_of(self, name: str) -> tuple[int, ...]:
        """The seeds Table 1 runs ``name`` with: the profile's (a ``pooled_fit`` selector:
        its ``pooled_seeds`` where set), the study's one for a selector without training."""
        cls = _class(name)
        if not cls.requires_fit:
            return (self.seed,)
        if cls.pooled_fit and self.prof.pooled_seeds:
            return tuple(self.prof.pooled_seeds)
        return tuple(self.prof.seeds)

    def pooled_seed(self, name: str, s: int) -> int:
        """The seed of the pooled model ``name`` that seed ``s`` of a stacked row reads."""
        seeds = self.seeds_of(name)
        return s if s in seeds else seeds[0]

    def wants_cost(self, name: str, s: int, ds: str) -> bool:
        """Whether Table 1 measures ``name``'s cost columns on this fit: its first seed on the
        cost dataset."""
        return s == self.seeds_of(name)[0] and ds == self.cost_dataset

    def _fit_key(self, name: str, s: int, ds: str, stage: str, want_cost: bool, member: bool,
                 extra: dict[str, Any]) -> str:
        return self.memo.key(stage=stage, data=self.split_fp[ds], cost=want_cost,
                             **({"member": True} if member else {}), **settings_of(name, s, self.prof, **extra))

    def fit_eval(self, name: str, s: int, ds: str, stage: str = "table1", want_cost: bool = False,
                 **extra: Any) -> dict[str, Any]:
        """Fit ``name`` (seed ``s``) on ``ds``'s training split; test and validation metrics
        (a stacked row's member's Table 1 fit: also its scores, and the model is kept)."""
        member = stage == "table1" and name in self.stack_members and not extra
        key = self._fit_key(name, s, ds, stage, want_cost, member, extra)
        res = self.memo.get(key)
        if res is not None and member and self._kept(key) is None:
            res = None  # the member's model is gone: fit again
        if res is None:
            sel = make_selector(name, s, self.progress, self.prof, **extra)
            sp = self.splits[ds]
            sel.fit(sp["train"], self.features, sp["val"])
            # the calibrated probabilities on every test set, for Table 1 (study.abstention)
            res = self._evaluate(sel, sp, want_cost, abstention=stage == "table1", keep_scores=member)
            if member:
                self._keep(key, sel)
            res = self.memo.put(key, res)
        return res

    def _keep(self, key: str, sel: Any) -> None:
        """Keep a stacked row's member model: in this process, and (memo on) under
        ``<cache>/bench-models/fit-<key>/`` for the other processes of ``bench --jobs``."""
        self._models[key] = sel
        if self.memo.enabled:
            from chunksel.config import cache_root

            sel.save(cache_root() / "bench-models" / f"fit-{key}")

    def _kept(self, key: str) -> Any:
        """The member model :meth:`_keep` kept under ``key`` (None: none, or a corrupt save)."""
        if key in self._models or not self.memo.enabled:
            return self._models.get(key)
        from chunksel.config import cache_root
        from chunksel.errors import ChunkselError
        from chunksel.selectors import load_selector

        folder = cache_root() / "bench-models" / f"fit-{key}"
        try:
            self._models[key] = load_selector(folder) if (folder / "config.json").is_file() else None
        except ChunkselError:
            self._models[key] = None
        return self._models[key]

    def _evaluate(self, sel: Any, sp: dict[str, list], want_cost: bool, abstention: bool,
                  keep_scores: bool = False) -> dict[str, Any]:
        """A fitted selector's result on one dataset's splits: test metrics, hits and picks,
        validation accuracy, the cost columns (``want_cost``), the abstention summary
        (``abstention``, when calibrated) and, with ``keep_scores``, the validation and test
        scores by instance id; each split is scored once."""
        scores = sel.score(sp["test"], self.features)
        metrics, h, ans, picks = evaluate_selector(sel, sp["test"], self.features, picks=True, scores=scores)
        val_scores = sel.score(sp["val"], self.features) if sp["val"] else None
        val = (evaluate_selector(sel, sp["val"], self.features, scores=val_scores)[0]["accuracy"]
               if sp["val"] else None)
        cost = (measure_cost(sel, sp["test"], self.features, self.prof.latency_queries, self.encoder)
                if want_cost else None)
        ab = None
        if abstention and sel.calibrator_ is not None:
            from chunksel.study.abstention import abstention_of

            ab = abstention_of(sel, sp["test"], self.features, scores=scores)
        out = {"metrics": metrics, "hits": h, "answerable": ans, "cost": cost,
               "val_accuracy": val, "picks": picks, "abstention": ab}
        if keep_scores:
            out["scores"] = {split: _by_id(sp[split], sc) for split, sc in (("val", val_scores), ("test", scores))}
        return out

    def fit_eval_stacked(self, name: str, s: int, ds: str) -> dict[str, Any]:
        """A stacked row (``anchored-ce``, seed ``s``) on ``ds``: its base's Table 1 fit on
        ``ds`` and its member's pooled model, their scores handed over (nothing scored
        twice), the stacking weight chosen on ``ds``'s validation split; the cost columns
        (the whole query path, both members cold) on the cost dataset."""
        cls = _class(name)
        want_cost = self.wants_cost(name, s, ds)
        base_cost = self.wants_cost(cls.base_name, s, ds)
        base_key = self._fit_key(cls.base_name, s, ds, "table1", base_cost, True, {})
        key = self.memo.key(stage="table1-stacked", data=[self.split_fp[d] for d in self.datasets], dataset=ds,
                            cost=want_cost, **settings_of(name, s, self.prof))
        res = self.memo.get(key)
        if res is None:
            base_res = self.fit_eval(cls.base_name, s, ds, want_cost=base_cost)
            ms = self.pooled_seed(cls.member_name, s)
            member_res = self.fit_eval_pooled(cls.member_name, ms)[ds]
            sel = make_selector(name, s, self.progress, self.prof).with_members(
                self._kept(base_key), self.pooled_model(cls.member_name, ms))
            sel.given_scores({**base_res["scores"]["val"], **base_res["scores"]["test"]},
                             {**member_res["scores"]["val"], **member_res["scores"]["test"]})
            sp = self.splits[ds]
            sel.fit(sp["train"], self.features, sp["val"])
            res = self._evaluate(sel, sp, want_cost=False, abstention=True)
            sel.forget_scores()  # the cost columns time the whole path, cold
            if want_cost:
                res["cost"] = measure_cost(sel, sp["test"], self.features, self.prof.latency_queries, self.encoder)
            res["weight"] = sel.weight_
            res = self.memo.put(key, res)
        return res

    def table1_result(self, name: str, s: int, ds: str) -> dict[str, Any] | None:
        """Table 1's result of ``name`` (seed ``s``) on ``ds``: its per-dataset fit or, for a
        ``pooled_fit`` selector, the pooled model's (None in a ``bench --jobs`` worker, which
        leaves pooled and stacked rows to the whole study)."""
        from chunksel.selectors import get_selector_class

        cls = get_selector_class(name)
        if cls.stacked:
            return None if self.part_of else self.fit_eval_stacked(name, s, ds)
        if cls.pooled_fit and cls.requires_fit:
            return None if self.part_of else self.fit_eval_pooled(name, s)[ds]
        return self.fit_eval(name, s, ds, want_cost=self.wants_cost(name, s, ds))

    def fit_eval_pooled(self, name: str, s: int) -> dict[str, dict[str, Any]]:
        """Fit ``name`` (seed ``s``, a ``pooled_fit`` selector) once on the pooled training
        splits of every dataset (validation: their pooled validation splits); per dataset,
        the same result :meth:`fit_eval` gives, the cost measured on the cost dataset."""
        member = name in self.stack_members
        key = self.memo.key(stage="table1-pooled", data=[self.split_fp[ds] for ds in self.datasets],
                            cost_dataset=self.cost_dataset, **({"member": True} if member else {}),
                            **settings_of(name, s, self.prof))
        res = self.memo.get(key)
        if res is None:
            sel = self.pooled_model(name, s)
            res = {ds: self._evaluate(sel, self.splits[ds], ds == self.cost_dataset, abstention=True,
                                      keep_scores=member)
                   for ds in self.datasets}
            res = self.memo.put(key, res)
        return res

    def pooled_model(self, name: str, s: int) -> Any:
        """``name`` (seed ``s``) fitted on the pooled training splits, kept under
        ``<cache>/bench-models/<key>/`` (key: its settings and the pooled instances and, for
        a selector that reads them, the generator features; not the code: a long training
        run survives code changes, and a run without the generator trains the model a
        whole study reads; ``--no-reuse``
        or deleting the folder trains it again). A selector whose ``fit`` takes a
        ``checkpoint_dir`` (the cross-encoder) checkpoints its training in
        ``<key>.partial/``, so an interrupted run resumes it."""
        from chunksel.config import cache_root
        from chunksel.errors import ChunkselError
        from chunksel.selectors import load_selector
        from chunksel.study.fitting import say

        train = [i for ds in self.datasets for i in self.splits[ds]["train"]]
        val = [i for ds in self.datasets for i in self.splits[ds]["val"]]
        ids = [i.id for i in train + val]
        reads = "warmup" in _class(name).query_cost  # the generator features, where it reads them
        key = digest({"settings": settings_of(name, s, self.prof), "train": instances_fingerprint(train),
                      "val": instances_fingerprint(val),
                      "features": features_fingerprint(self.features, ids) if reads else None})
        folder = cache_root() / "bench-models" / f"{name}-{key}"
        if folder.name in self._models:  # this process's
            return self._models[folder.name]
        if self.memo.enabled and (folder / "config.json").is_file():
            try:
                sel = self._models[folder.name] = load_selector(folder)
                say(f"table 1: {name} seed {s}: the pooled model from {folder}")
                return sel
            except ChunkselError as exc:  # a torn or corrupt save: train again
                say(f"table 1: {name}: {exc}; training again")
        sel = make_selector(name, s, self.progress, self.prof)
        resumable = self.memo.enabled and "checkpoint_dir" in inspect.signature(sel.fit).parameters
        partial = folder.with_name(folder.name + ".partial")  # its training checkpoints
        resuming = " (resuming from its checkpoints)" if resumable and partial.is_dir() else ""
        say(f"table 1: {name} seed {s}: one model on the pooled training splits ({len(train)} questions){resuming}")
        if resumable:
            sel.fit(train, self.features, val, checkpoint_dir=partial)
        else:
            sel.fit(train, self.features, val)
        if self.memo.enabled:
            sel.save(folder)
        self._models[folder.name] = sel
        return sel

    def strongest(self, names: Sequence[str], ds: str | None = None) -> str | None:
        """The baseline with the best validation accuracy (on ``ds``, or averaged over the
        datasets); test accuracy is never read."""
        def score(n: str) -> float:
            dss = [ds] if ds else self.datasets
            vals = [np.mean(self.val_acc[n][d]) for d in dss if self.val_acc.get(n, {}).get(d)]
            return float(np.mean(vals)) if vals else -np.inf

        names = [n for n in names if n in self.val_acc]
        return max(names, key=score) if names else None


def _class(name: str) -> Any:
    from chunksel.selectors import get_selector_class

    return get_selector_class(name)


def _by_id(batch: Sequence[Any], scores: np.ndarray | None) -> dict[str, list[float]]:
    """``{instance id: its real candidates' scores}`` (JSON-ready)."""
    if scores is None:
        return {}
    return {inst.id: [float(x) for x in row[: len(inst.candidates)]] for inst, row in zip(batch, scores, strict=True)}
