"""Classical learning-to-rank baselines over the LETOR features of :mod:`.letor`.

- :class:`RankSVMSelector`: RankSVM (Joachims 2002, "Optimizing search engines using
  clickthrough data"). Within each training instance every (positive, negative) pair
  gives a difference vector ``x_pos - x_neg`` of standardised features; every second
  pair is flipped (``x_neg - x_pos`` with label -1) so the two classes balance, and a
  linear SVM without intercept (scikit-learn ``LinearSVC``, squared hinge, L2, ``C``)
  learns ``w``. Score = ``w . x``.
- :class:`LambdaMARTSelector`: LambdaMART (Burges 2010, "From RankNet to LambdaRank to
  LambdaMART") as LightGBM's ``LGBMRanker(objective="lambdarank")`` with one query group
  per instance, early stopping on the validation NDCG@1, saved as LightGBM's text model
  (``model.txt``). Trees are scale-invariant, so no feature scaling.

Both train only on instances with at least one positive and one negative candidate;
labels come from the label spec ``label`` (default: each instance's own). With
``late=True`` both read three late-interaction columns after the twelve LETOR ones
(MaxSim over MiniLM's token vectors, :mod:`.late_features`).
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError, require
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.late_features import feature_names, late_cost, late_features
from chunksel.selectors.letor import FEATURE_NAMES, letor_features
from chunksel.types import Instance


def _contested(instances: Sequence[Instance], label: str | None) -> list[Instance]:
    return [i for i in instances if i.contested(label)]


def train_lambdarank(
    x: np.ndarray,
    y: np.ndarray,
    groups: Sequence[int],
    valid: tuple[np.ndarray, np.ndarray, Sequence[int]] | None = None,
    *,
    n_estimators: int = 300,
    learning_rate: float = 0.05,
    num_leaves: int = 15,
    min_child_samples: int = 20,
    early_stopping_rounds: int = 30,
    seed: int = 0,
    n_jobs: int = 1,
    feature_names: Sequence[str] = FEATURE_NAMES,
):
    """A LightGBM LambdaMART booster on flat LETOR rows ``x`` (one query group per
    instance, ``groups`` their sizes; ``feature_names`` name its columns), early-stopped on
    the validation NDCG@1 when ``valid = (x, y, groups)`` is given. Returns a ``lightgbm.Booster`` holding exactly
    the kept trees (so a saved and reloaded copy scores identically)."""
    lgb = require("lightgbm", "ltr")
    model = lgb.LGBMRanker(
        objective="lambdarank",
        n_estimators=n_estimators,
        learning_rate=learning_rate,
        num_leaves=num_leaves,
        min_child_samples=min_child_samples,
        random_state=seed,
        n_jobs=n_jobs,
        verbose=-1,
    )
    kwargs: dict[str, Any] = {}
    if valid is not None:
        xv, yv, gv = valid
        kwargs = {
            "eval_X": (xv,),
            "eval_y": (yv,),
            "eval_group": [list(gv)],
            "eval_at": [1],
            "callbacks": [lgb.early_stopping(early_stopping_rounds, verbose=False)],
        }
    model.fit(x, y, group=list(groups), feature_name=list(feature_names), **kwargs)
    best = model.best_iteration_ if valid is not None and model.best_iteration_ else None
    return lgb.Booster(model_str=model.booster_.model_to_string(num_iteration=best))


def load_booster(file: Path):
    """A saved LightGBM booster; a missing or damaged file is a ``DataError``."""
    lgb = require("lightgbm", "ltr")
    if not file.is_file():
        raise DataError(f"corrupt checkpoint {file.parent}: {file.name} is missing")
    try:
        return lgb.Booster(model_file=str(file))
    except Exception as err:  # LightGBMError on a damaged model file
        raise DataError(f"corrupt checkpoint {file}: {str(err).splitlines()[0][:300] if str(err) else err!r}") from None


def tree_nodes(booster: Any) -> int:
    """A booster's learned parameters, counted as tree nodes (``2 * leaves - 1`` per tree)."""
    return int(sum(2 * t["num_leaves"] - 1 for t in booster.dump_model()["tree_info"]))


class _LetorSelector(Selector):
    """Shared feature extraction for the LETOR-feature rankers."""

    requires_fit = True
    query_cost = "bm25"

    late: bool = False
    tokens: str | None = None

    def _features(self, batch: Sequence[Instance], progress: bool = False) -> tuple[np.ndarray, np.ndarray]:
        x, mask = letor_features(batch, self.corpus, self.k1, self.b, progress=progress and self.progress)
        if self.late:
            x = np.concatenate([x, late_features(batch, self.tokens, progress=progress and self.progress)], axis=2)
        return x, mask

    def feature_names(self) -> tuple[str, ...]:
        """The names of the columns it reads."""
        return feature_names(FEATURE_NAMES, self.late)

    def _check_names(self, path: Path, state: dict[str, Any]) -> None:
        if state.get("feature_names") != list(self.feature_names()):
            raise DataError(f"{path}: saved with a different feature set ({len(state.get('feature_names') or [])} "
                            f"columns; this build reads {len(self.feature_names())})")

    def _train_set(self, train: Sequence[Instance]) -> list[Instance]:
        kept = _contested(train, self.label)
        if not kept:
            raise DataError(
                f"{self.name}: no training instance has both a positive and a negative candidate"
            )
        return kept


class RankSVMSelector(_LetorSelector):
    """Pairwise linear SVM over standardised LETOR features.

    Args:
        corpus: BM25/TF-IDF statistics corpus (name, TSV path, or None = from dataset).
        C: SVM regularisation (inverse strength).
        k1, b: BM25 settings of the BM25 feature.
        label: label spec for training (None = each instance's default).
        seed: LinearSVC's random state.
        max_iter: LinearSVC iteration cap.
        late: add the three late-interaction columns (MaxSim, :mod:`.late_features`).
        tokens: where the chunks' token vectors are kept (as the ``maxsim`` selector's).
        progress: show progress bars (feature extraction, corpus statistics).
    """

    name = "ranksvm"
    display_name = "RankSVM"
    family = "learning-to-rank"
    role = "baseline"

    def __init__(
        self,
        corpus: str | None = None,
        C: float = 1.0,
        k1: float = 1.5,
        b: float = 0.75,
        label: str | None = None,
        seed: int = 0,
        max_iter: int = 10000,
        late: bool = False,
        tokens: str | None = None,
        progress: bool = True,
    ) -> None:
        self.corpus = corpus
        self.late = late
        self.tokens = tokens
        self.query_cost = late_cost(type(self).query_cost, late)
        self.C = C
        self.k1 = k1
        self.b = b
        self.label = label
        self.seed = seed
        self.max_iter = max_iter
        self.progress = progress

    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ) -> RankSVMSelector:
        """Fit the scaler on all training candidates and the SVM on balanced pair diffs."""
        require("sklearn", "ltr")
        from sklearn.preprocessing import StandardScaler
        from sklearn.svm import LinearSVC

        kept = self._train_set(train)
        x, mask = self._features(kept, progress=self.progress)
        scaler = StandardScaler().fit(x[mask])
        xs = (x - scaler.mean_) / scaler.scale_
        diffs, ys = [], []
        for i, inst in enumerate(kept):
            lab = inst.labels(self.label)
            pos, neg = np.flatnonzero(lab == 1), np.flatnonzero(lab == 0)
            for p in pos:
                for n in neg:
                    sign = 1.0 if len(ys) % 2 == 0 else -1.0
                    diffs.append(sign * (xs[i, p] - xs[i, n]))
                    ys.append(int(sign))
        if len(set(ys)) < 2:  # a single pair: add its mirror so both classes exist
            diffs.append(-diffs[0])
            ys.append(-ys[0])
        svm = LinearSVC(C=self.C, fit_intercept=False, random_state=self.seed, max_iter=self.max_iter)
        svm.fit(np.asarray(diffs), np.asarray(ys))
        self.coef_ = svm.coef_.ravel().astype(np.float64)
        self.mean_ = scaler.mean_.astype(np.float64)
        self.scale_ = scaler.scale_.astype(np.float64)
        self.n_pairs_ = len(ys)
        self.fitted_ = True
        return self

    def n_parameters(self) -> int:
        """Trainable parameters: the weight vector (one per feature; no intercept)."""
        self._check_fitted()
        return len(self.coef_)

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        x, _ = self._features(batch)
        return ((x - self.mean_) / self.scale_) @ self.coef_

    def _state_config(self) -> dict[str, Any]:
        return {
            "feature_names": list(self.feature_names()),
            "coef": self.coef_.tolist(),
            "mean": self.mean_.tolist(),
            "scale": self.scale_.tolist(),
            "n_pairs": self.n_pairs_,
        }

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        self._check_names(path, state)
        self.coef_ = np.asarray(state["coef"], dtype=np.float64)
        self.mean_ = np.asarray(state["mean"], dtype=np.float64)
        self.scale_ = np.asarray(state["scale"], dtype=np.float64)
        self.n_pairs_ = int(state["n_pairs"])


class LambdaMARTSelector(_LetorSelector):
    """LightGBM LambdaMART over LETOR features, one query group per instance.

    Args:
        corpus: BM25/TF-IDF statistics corpus (name, TSV path, or None = from dataset).
        n_estimators: boosting rounds (upper bound under early stopping).
        learning_rate, num_leaves, min_child_samples: LightGBM tree settings.
        early_stopping_rounds: patience on the validation NDCG@1 (used when ``val`` has
            contested instances).
        k1, b: BM25 settings of the BM25 feature.
        label: label spec for training (None = each instance's default).
        seed: LightGBM's random state.
        n_jobs: LightGBM threads.
        late: add the three late-interaction columns (MaxSim, :mod:`.late_features`).
        tokens: where the chunks' token vectors are kept (as the ``maxsim`` selector's).
        progress: show progress bars (feature extraction, corpus statistics).
    """

    name = "lambdamart"
    display_name = "LambdaMART"
    family = "learning-to-rank"
    role = "baseline"

    def __init__(
        self,
        corpus: str | None = None,
        n_estimators: int = 300,
        learning_rate: float = 0.05,
        num_leaves: int = 15,
        min_child_samples: int = 20,
        early_stopping_rounds: int = 30,
        k1: float = 1.5,
        b: float = 0.75,
        label: str | None = None,
        seed: int = 0,
        n_jobs: int = 1,
        late: bool = False,
        tokens: str | None = None,
        progress: bool = True,
    ) -> None:
        self.corpus = corpus
        self.late = late
        self.tokens = tokens
        self.query_cost = late_cost(type(self).query_cost, late)
        self.n_estimators = n_estimators
        self.learning_rate = learning_rate
        self.num_leaves = num_leaves
        self.min_child_samples = min_child_samples
        self.early_stopping_rounds = early_stopping_rounds
        self.k1 = k1
        self.b = b
        self.label = label
        self.seed = seed
        self.n_jobs = n_jobs
        self.progress = progress

    def _flat(self, instances: Sequence[Instance]) -> tuple[np.ndarray, np.ndarray, list[int]]:
        x, mask = self._features(instances, progress=self.progress)
        y = np.concatenate([inst.labels(self.label) for inst in instances]).astype(np.int32)
        return x[mask], y, [len(inst.candidates) for inst in instances]

    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ) -> LambdaMARTSelector:
        """Train the ranker; early stopping on ``val`` (NDCG@1) when it is given."""
        kept = self._train_set(train)
        x, y, groups = self._flat(kept)
        val_kept = _contested(val or [], self.label)
        valid = self._flat(val_kept) if val_kept else None
        self.booster_ = train_lambdarank(
            x, y, groups, valid, n_estimators=self.n_estimators, learning_rate=self.learning_rate,
            num_leaves=self.num_leaves, min_child_samples=self.min_child_samples,
            early_stopping_rounds=self.early_stopping_rounds, seed=self.seed, n_jobs=self.n_jobs,
            feature_names=self.feature_names(),
        )
        self.fitted_ = True
        return self

    def n_parameters(self) -> int:
        """Learned parameters, counted as the total number of tree nodes (split nodes +
        leaves, i.e. ``2 * leaves - 1`` per tree)."""
        self._check_fitted()
        return tree_nodes(self.booster_)

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        x, mask = self._features(batch)
        out = np.zeros(mask.shape)
        out[mask] = self.booster_.predict(x[mask], num_threads=1)  # a few rows: thread start-up would dominate
        return out

    def _state_config(self) -> dict[str, Any]:
        return {"feature_names": list(self.feature_names()), "num_trees": self.booster_.num_trees()}

    def _save_state(self, path: Path) -> None:
        self.booster_.save_model(str(path / "model.txt"))

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        self._check_names(path, state)
        self.booster_ = load_booster(path / "model.txt")



def _late_default(sig: inspect.Signature) -> inspect.Signature:
    return sig.replace(parameters=[p.replace(default=True) if p.name == "late" else p for p in sig.parameters.values()])


class LambdaMARTLateSelector(LambdaMARTSelector):
    """LambdaMART with MiniLM MaxSim's three late-interaction columns (``late=True`` by
    default): the benchmark's row that gives LambdaMART the features the flagship reads, so
    that the flagship's late columns are measured against a ranker that has them too.
    Settings as :class:`LambdaMARTSelector`."""

    name = "lambdamart-late"
    display_name = "LambdaMART + MaxSim"

    def __init__(self, late: bool = True, **kwargs: Any) -> None:
        super().__init__(late=late, **kwargs)

    # its settings are LambdaMART's (``late`` defaults to True): saving, loading and the
    # parameter checks read this signature
    __init__.__signature__ = _late_default(inspect.signature(LambdaMARTSelector.__init__))  # type: ignore[attr-defined]
