"""The accurate operating point of the flagship (``anchored-ce``): the retrieval-anchored
selector with the cross-encoder's score stacked on it.

score = z(base) + w z(member) within each set (:func:`~chunksel.selectors.crossencoder.standardised`),
the base being the anchored selector and the member the cross-encoder trained here. The
one stacking parameter, ``w``, is chosen on the validation split among :data:`STACK_WEIGHTS`
(rank-1; ties go to the smaller weight, so ``w = 0``, the base alone, wins unless the
cross-encoder helps). Neither member trains on the validation split (the anchored
selector's guard and the cross-encoder's prior weight read it as a model choice, as this
weight does), so the weight is fitted on scores both members give to questions they were
not trained on: a stacked, held-out (blending) feature rather than a k-fold cross-fitted
input of the interaction MLP, which would cost ``ltr_folds`` cross-encoder trainings and,
on the evidence of ``docs/decisions/crossencoder-peer.md``, has no cross-encoder signal to
learn from. With ``w = 0`` the cross-encoder is not run at query time.

A study fits the members once (the anchored selector per dataset, the cross-encoder once
per seed on the pooled training splits: :meth:`with_members`) and hands their scores over
(:meth:`given_scores`) so nothing is scored twice; used alone, :meth:`fit` trains both on
the training split it gets.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.crossencoder import rank1, standardised
from chunksel.selectors.late_features import late_cost
from chunksel.types import Instance

#: stacking weights tried on validation with ``weight="auto"`` (0: the base alone)
STACK_WEIGHTS: tuple[float, ...] = (0.0, 0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
BASE_DIR, MEMBER_DIR = "base", "member"


def stacked_scores(base: np.ndarray, member: np.ndarray, instances: Sequence[Instance], weight: float) -> np.ndarray:
    """z(base) + ``weight`` z(member) within each set (padding -inf); the base's own scores
    when ``weight`` is 0."""
    if weight == 0:
        return np.asarray(base, dtype=np.float64)
    return standardised(base, instances) + weight * standardised(member, instances)


class StackedSelector(Selector):
    """The anchored selector with the cross-encoder's score stacked on it (``anchored-ce``).

    Args:
        weight: the cross-encoder's weight, or ``"auto"`` (chosen on validation rank-1
            among :data:`STACK_WEIGHTS`).
        base_params, member_params: settings of the anchored selector and of the
            cross-encoder when :meth:`fit` trains them (their ``seed`` and ``progress``
            are this selector's).
        seed, progress: as the members'.
    """

    name = "anchored-ce"
    display_name = "Anchored + cross-encoder (stacked)"
    family = "prototype"
    role = "flagship"
    query_cost = "warmup+bm25"
    stacked = True
    base_name, member_name = "anchored", "crossencoder"

    def __init__(self, weight: str | float = "auto", base_params: Mapping[str, Any] | None = None,
                 member_params: Mapping[str, Any] | None = None, seed: int = 0, progress: bool = False) -> None:
        if weight != "auto" and (isinstance(weight, bool) or not isinstance(weight, (int, float))
                                 or not np.isfinite(weight) or weight < 0):
            raise ConfigError(f"{self.name} weight must be 'auto' or a number >= 0, got {weight!r}")
        for label, p in (("base_params", base_params), ("member_params", member_params)):
            if p is not None and not isinstance(p, Mapping):
                raise ConfigError(f"{self.name} {label} must be a mapping of settings, got {type(p).__name__}")
        from chunksel.selectors import get_selector_class
        from chunksel.selectors.params import check_ranges, coerce_params

        for label, p, member in (("base_params", base_params, self.base_name),
                                 ("member_params", member_params, self.member_name)):
            if p:  # a misspelt or out-of-range member setting fails here, before any data loads
                cls = get_selector_class(member)
                check_ranges(member, coerce_params(cls, p, f"{self.name} {label}"))
        self.weight = weight
        self.base_params = dict(base_params or {})
        self.member_params = dict(member_params or {})
        # the base's late-interaction columns add its token vectors to the query cost
        self.query_cost = late_cost(type(self).query_cost, bool(self.base_params.get("late")))
        self.seed = seed
        self.progress = progress
        self.base_: Any = None
        self.member_: Any = None
        self._given: dict[str, dict[str, np.ndarray]] = {}

    @property
    def corpus(self) -> str | None:
        """The base's corpus statistics (its LETOR features read them)."""
        return getattr(self.base_, "corpus", None)

    @corpus.setter
    def corpus(self, value: str | None) -> None:
        if self.base_ is not None:
            self.base_.corpus = value

    # ------------------------------------------------------------------ members
    def _new(self, name: str, params: Mapping[str, Any]) -> Selector:
        from chunksel.selectors import get_selector_class

        cls = get_selector_class(name)
        names = cls._param_names()
        settings = {**params, **{k: v for k, v in (("seed", self.seed), ("progress", self.progress)) if k in names}}
        return cls(**settings)

    def with_members(self, base: Selector, member: Selector) -> StackedSelector:
        """Use already fitted members (:meth:`fit` then only chooses the weight)."""
        for label, sel, want in (("base", base, self.base_name), ("member", member, self.member_name)):
            if getattr(sel, "name", None) != want or not sel.is_fitted():
                raise ConfigError(f"{self.name}: the {label} must be a fitted {want!r} selector, "
                                  f"got {getattr(sel, 'name', type(sel).__name__)!r}")
        self.base_, self.member_ = base, member
        return self

    def given_scores(self, base: Mapping[str, np.ndarray], member: Mapping[str, np.ndarray]) -> StackedSelector:
        """The members' score rows by instance id, already computed (a study hands over those
        of its Table 1 rows); read instead of scoring again until :meth:`forget_scores`."""
        self._given = {"base": dict(base), "member": dict(member)}
        return self

    def forget_scores(self) -> None:
        self._given = {}

    def _member_scores(self, which: str, batch: Sequence[Instance], features: QuestionFeatures | None) -> np.ndarray:
        given = self._given.get(which, {})
        if given and all(i.id in given for i in batch):
            k = max(len(i.candidates) for i in batch)
            out = np.full((len(batch), k), -np.inf)
            for b, inst in enumerate(batch):
                row = np.asarray(given[inst.id], dtype=np.float64)[: len(inst.candidates)]
                if len(row) != len(inst.candidates):
                    raise DataError(f"{self.name}: {len(row)} given {which} scores for instance {inst.id!r}, "
                                    f"which has {len(inst.candidates)} candidates")
                out[b, : len(row)] = row
            return out
        sel = self.base_ if which == "base" else self.member_
        return sel.score(batch, features)

    # ------------------------------------------------------------------ fitting
    def fit(self, train: Sequence[Instance], features: QuestionFeatures | None = None,
            val: Sequence[Instance] | None = None) -> StackedSelector:
        if self.base_ is None:
            self.base_ = self._new(self.base_name, self.base_params).fit(train, features, val)
        if self.member_ is None:
            self.member_ = self._new(self.member_name, self.member_params).fit(train, features, val)
        answerable = [i for i in (val or []) if i.answerable()]
        if self.weight != "auto":
            self.weight_, self.weight_val_ = float(self.weight), {}
        elif not answerable:
            raise DataError(f"{self.name}: weight='auto' chooses the cross-encoder's weight on validation: "
                            "pass a validation split with answerable instances (val=), or a fixed weight")
        else:
            b = self._member_scores("base", answerable, features)
            m = self._member_scores("member", answerable, features)
            by_w = {w: rank1(stacked_scores(b, m, answerable, w), answerable) for w in STACK_WEIGHTS}
            self.weight_ = max(STACK_WEIGHTS, key=lambda w: (by_w[w], -w))
            self.weight_val_ = {str(w): round(v, 4) for w, v in by_w.items()}
        return super().fit(train, features, val)

    def _end_fit(self) -> None:
        """After the fit: what the members kept for their own fit (fitted inside this one,
        they were not calibrated at the top level) is dropped."""
        for m in (self.base_, self.member_):
            end = getattr(m, "_end_fit", None)
            if callable(end):
                end()

    # ------------------------------------------------------------------ scoring
    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        base = self._member_scores("base", batch, features)
        if self.weight_ == 0:  # the cross-encoder is not run
            return base
        return stacked_scores(base, self._member_scores("member", batch, features), batch, self.weight_)

    def required_inputs(self) -> frozenset[str]:
        from chunksel.selectors.provenance import selector_inputs

        out = set(selector_inputs(self.base_)) if self.base_ is not None else set()
        if self.member_ is not None and float(getattr(self, "weight_", 1.0)) > 0:
            out |= selector_inputs(self.member_)
        return frozenset(out)

    def n_parameters(self) -> int:
        members = [self.base_] + ([self.member_] if float(getattr(self, "weight_", 1.0)) > 0 else [])
        return sum(m.n_parameters() for m in members if m is not None)

    # ---------------------------------------------------------------- save/load
    def _state_config(self) -> dict[str, Any]:
        return {"weight": float(self.weight_), "weight_val_rank1": getattr(self, "weight_val_", {})}

    def _save_state(self, path: Path) -> None:
        self.base_.save(path / BASE_DIR)
        self.member_.save(path / MEMBER_DIR)

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        from chunksel.selectors import load_selector

        if "weight" not in state:
            raise DataError(f"corrupt checkpoint {path}: config.json has no stacking weight")
        for sub in (BASE_DIR, MEMBER_DIR):
            if not (path / sub / "config.json").is_file():
                raise DataError(f"corrupt checkpoint {path}: {sub}/config.json is missing")
        self.with_members(load_selector(path / BASE_DIR), load_selector(path / MEMBER_DIR))
        if getattr(self.base_, "corpus", None) is not None or (self.base_.provenance_ or {}).get("corpora"):
            from chunksel.selectors.bm25_stats import use_saved_corpus

            try:
                use_saved_corpus(self.base_, path / BASE_DIR)  # the statistics saved with it
            except ConfigError:
                pass  # several corpora: the caller names one (ChunkSelector.load(corpus=))
        self.weight_ = float(state["weight"])
        self.weight_val_ = dict(state.get("weight_val_rank1", {}))
        self._given = {}
