"""The one selector interface, its shared behaviour, and the lazy registry.

Contract (docs/architecture.md, "One selector interface"):

- ``__init__`` only stores settings (each a keyword argument kept under the same
  attribute name); learned state lives in attributes ending in ``_``.
- ``fit(train, features=None, val=None)`` returns ``self``.
- ``score(batch, features=None)`` returns a float (B, K) array, higher = better, with
  K the longest candidate list in the batch; padded slots are ``-inf``.
- ``select(batch, features=None, k=1)`` returns one :class:`Selection` per instance with
  ``min(k, real candidates)`` distinct candidates; ties go to the better retrieval rank.
- ``save(path)`` writes ``config.json`` (name, format version, settings, the SHA-256 of
  each state file, the provenance) plus the selector's own state files; ``load(path)``
  checks the digests, rebuilds ``cls(**settings)`` and reads them.
- Provenance: every subclass's ``fit`` is wrapped (``__init_subclass__``) so that a
  finished fit records where the selector came from in ``provenance_``
  (:mod:`chunksel.selectors.provenance`); ``save`` writes it under ``"provenance"``,
  together with the corpus statistics the selector reads (``corpus_stats/``), and
  ``load`` reads it back.
- Calibration: a finished fit given a validation split also fits ``calibrator_``
  (:mod:`chunksel.selectors.calibration`) on it: :meth:`Selector.probabilities` maps
  scores to P(evidence) per chunk and P(some chunk holds it) per set. Scores are never
  changed; ``save`` writes ``calibration.json`` and ``load`` reads it.

This module never imports torch.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
import json
import os
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np

from chunksel.config import json_default
from chunksel.errors import ConfigError, DataError, MissingExtraError, NotFittedError
from chunksel.selectors.checkpoint import state_checksums, verify_checksums
from chunksel.selectors.params import check_ranges, coerce_params
from chunksel.selectors.provenance import record_provenance, selector_inputs
from chunksel.types import Instance, Selection, candidate_mask, refuse_reference_labels

FORMAT_VERSION = 1
S = TypeVar("S", bound="Selector")
#: > 0 inside a selector's fit: only the outermost fit calibrates (not the inner rankers)
_FIT_DEPTH: ContextVar[int] = ContextVar("_FIT_DEPTH", default=0)


class QuestionFeatures(Protocol):
    """Question-side generator features, looked up by question id.

    ``lookup(ids)`` returns ``{"h": (B, d_h), "r": (B, d_r)}`` float32 arrays in the
    order of ``ids``; a missing id raises :class:`chunksel.errors.DataError`.
    """

    def lookup(self, ids: Sequence[str]) -> dict[str, np.ndarray]: ...


class Selector(ABC):
    """Base class of every chunk selector."""

    name: ClassVar[str] = ""
    #: how reports name it, its family ("learning-to-rank", "prototype", ...) and its role
    #: in a study: "baseline", "reference" (oracle, random: never the strongest
    #: baseline), "reproduction" (a paper's configuration as written), "flagship" or "llm"
    display_name: ClassVar[str] = ""
    family: ClassVar[str] = ""
    role: ClassVar[str] = "baseline"
    requires_fit: ClassVar[bool] = True
    #: a study fits one model per seed on the pooled training splits of its datasets and
    #: evaluates it on each (the cross-encoder: one training run, not one per dataset)
    pooled_fit: ClassVar[bool] = False
    #: a stacked row: it combines two selectors a study has already fitted (``base_name``,
    #: fitted per dataset, and ``member_name``), handed over instead of trained again
    stacked: ClassVar[bool] = False
    #: the query-side cost it adds: "none", "bm25" (corpus term statistics),
    #: "warmup" (the generator's question-only pass, which generation needs anyway) or
    #: "warmup+bm25" (both), "llm" (LLM calls per query: the rankgpt / utility selectors),
    #: "tokens" (MiniLM token vectors: ``maxsim``), or a sum with "+tokens" (a ranker built
    #: with ``late=True`` sets it on the instance: :func:`.late_features.late_cost`)
    query_cost: str = "none"
    #: what the calibrator maps to probabilities: the selector's ``"score"`` or the
    #: candidates' ``"retrieval_score"`` (the retrieval-order selector, whose score is -rank)
    calibration_source: ClassVar[str] = "score"
    #: the calibrator fitted on the validation split (None: not calibrated)
    calibrator_: Any = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fit = cls.__dict__.get("fit")
        if fit is not None and not getattr(fit, "_records_provenance", False):
            cls.fit = _recording_fit(fit)
        init = cls.__dict__.get("__init__")
        if init is not None and not getattr(init, "_checks_ranges", False):
            cls.__init__ = _range_checked_init(init)

    # ----------------------------------------------------------------- settings
    @classmethod
    def _param_names(cls) -> list[str]:
        sig = inspect.signature(cls.__init__)
        return [
            p.name
            for p in sig.parameters.values()
            if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        ]

    def get_params(self) -> dict[str, Any]:
        """The constructor settings (scikit-learn style)."""
        return {n: getattr(self, n) for n in self._param_names()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"

    # ------------------------------------------------------------------ fitting
    def fit(
        self: S,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ) -> S:
        """Learn from ``train`` (and ``val`` for early stopping); returns ``self``."""
        refuse_reference_labels(train, val)
        self.fitted_ = True
        record_provenance(self, train, features)
        if _FIT_DEPTH.get() == 0:
            from chunksel.selectors.calibration import calibrate_after_fit

            calibrate_after_fit(self, val, features)
        return self

    def probabilities(
        self, batch: Sequence[Instance], features: QuestionFeatures | None = None, scores: np.ndarray | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Calibrated ``(chunk P(evidence) (B, K), NaN at padding; set P(answerable) (B,))``;
        ``scores``: this selector's :meth:`score` of ``batch`` if computed. NotFittedError
        without a calibrator (fit with a validation split)."""
        from chunksel.selectors.calibration import selector_probabilities

        return selector_probabilities(self, batch, features, scores)

    def n_parameters(self) -> int:
        """Trainable parameters of the fitted selector (0 for selectors that learn nothing)."""
        return 0

    def is_fitted(self) -> bool:
        return not self.requires_fit or bool(getattr(self, "fitted_", False))

    def _check_fitted(self) -> None:
        if not self.is_fitted():
            raise NotFittedError(
                f"selector {self.name!r} is not fitted: call fit(train) or load a saved one"
            )

    # ------------------------------------------------------------------ scoring
    @abstractmethod
    def _score(
        self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int
    ) -> np.ndarray:
        """Raw (B, k') scores for the real candidates, k' <= k; padding is handled by
        :meth:`score`."""

    def score(
        self, batch: Sequence[Instance], features: QuestionFeatures | None = None
    ) -> np.ndarray:
        """(B, K) float64 scores, higher = better, ``-inf`` at padded slots.

        Raises:
            DataError: a real candidate's score is NaN (never a silent pick).
        """
        self._check_fitted()
        batch = list(batch)
        if not batch:
            return np.zeros((0, 0))
        for inst in batch:
            if not inst.candidates:
                raise DataError(f"instance {inst.id!r} has no candidates")
        mask = candidate_mask(batch)
        k = mask.shape[1]
        raw = np.asarray(self._score(batch, features, k), dtype=np.float64)
        if raw.ndim != 2 or raw.shape[0] != len(batch) or raw.shape[1] > k:
            raise RuntimeError(f"{self.name}: _score returned shape {raw.shape}, expected ({len(batch)}, <= {k})")
        out = np.full((len(batch), k), -np.inf)
        out[:, : raw.shape[1]] = raw
        out[~mask] = -np.inf
        nan = np.isnan(out)
        if nan.any():
            b, j = (int(x[0]) for x in np.nonzero(nan))
            raise DataError(
                f"selector {self.name!r} scored NaN for candidate {batch[b].candidates[j].id!r} of "
                f"instance {batch[b].id!r} ({int(nan.sum())} NaN scores in all): its weights or "
                "input features are not finite (a corrupt checkpoint?), so nothing can be selected"
            )
        return out

    def select(
        self,
        batch: Sequence[Instance],
        features: QuestionFeatures | None = None,
        k: int = 1,
    ) -> list[Selection]:
        """The top ``k`` real candidates of each instance; ties go to retrieval order."""
        if k < 1:
            raise ConfigError(f"k must be >= 1, got {k}")
        scores = self.score(batch, features)
        return [selection_from_scores(inst, row, k) for inst, row in zip(batch, scores)]

    # --------------------------------------------------------------- save/load
    def save(self, path: str | Path) -> None:
        """Write the selector's state files and ``config.json`` into directory ``path``.

        The state files are written into a staging folder first, so every file
        :meth:`_save_state` writes is known: their SHA-256 digests go into
        ``config.json`` (``"checksums"``), which is written last, and :meth:`load`
        checks them (:mod:`chunksel.selectors.checkpoint`).
        """
        self._check_fitted()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        config = {
            "name": self.name,
            "format_version": FORMAT_VERSION,
            "params": self.get_params(),
            "state": self._state_config(),
        }
        provenance = dict(getattr(self, "provenance_", None) or {})
        staging = Path(tempfile.mkdtemp(prefix=".saving-", dir=path))
        try:
            self._save_state(staging)
            if self.calibrator_ is not None:
                from chunksel.selectors.calibration import write_calibration

                write_calibration(self.calibrator_, staging)
            if provenance.get("corpora") and "corpus_stats" in selector_inputs(self):
                from chunksel.selectors.bm25_stats import bundle_corpus_stats

                provenance["corpus_stats"] = bundle_corpus_stats(provenance["corpora"], staging)
            checksums = state_checksums(staging)
            if "config.json" in checksums:
                raise RuntimeError(f"{type(self).__name__}._save_state must not write config.json")
            mode = _file_mode()
            for rel in checksums:
                (path / rel).parent.mkdir(parents=True, exist_ok=True)
                os.chmod(staging / rel, mode)  # some writers (safetensors) create 0600 files
                os.replace(staging / rel, path / rel)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        config["checksums"] = checksums
        config["provenance"] = provenance
        tmp = path / "config.json.tmp"
        tmp.write_text(json.dumps(config, indent=2, default=json_default))
        os.replace(tmp, path / "config.json")

    @classmethod
    def load(cls: type[S], path: str | Path) -> S:
        """Rebuild a saved selector (the class must match the saved ``name``).

        The state files' SHA-256 digests recorded at save time are checked first (saves
        without them load unchecked).
        """
        path = Path(path)
        config = read_config(path)
        if cls.name and config["name"] != cls.name:
            raise DataError(f"{path} holds a {config['name']!r} selector, not {cls.name!r}")
        verify_checksums(path, config.get("checksums"))
        cfg_path = path / "config.json"
        params = coerce_params(cls, config.get("params", {}), str(cfg_path), error=DataError)
        try:
            obj = cls(**params)
        except ConfigError as err:
            raise DataError(f"{cfg_path}: {err}") from None
        obj._load_state(path, config.get("state", {}))
        obj.fitted_ = True
        from chunksel.selectors.calibration import read_calibration

        obj.calibrator_ = read_calibration(path)
        prov = config.get("provenance")
        obj.provenance_ = dict(prov) if isinstance(prov, dict) else {}
        return obj

    def _state_config(self) -> dict[str, Any]:
        """Small JSON-ready learned state stored inside config.json (override)."""
        return {}

    def _save_state(self, path: Path) -> None:
        """Write large learned state (weights) beside config.json (override)."""

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        """Read what :meth:`_save_state` and :meth:`_state_config` wrote (override)."""


def _file_mode() -> int:
    """The mode a new file gets under this process's umask (0644 under the usual 022)."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def _range_checked_init(init: Any) -> Any:
    """Wrap a constructor so that its numeric settings are range-checked once it has
    stored them (:func:`chunksel.selectors.params.check_ranges`)."""

    @functools.wraps(init)
    def wrapped(self: Selector, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        if type(self).__init__ is wrapped:  # the outermost constructor: every setting is stored
            check_ranges(self.name or type(self).__name__,
                         {n: getattr(self, n, None) for n in self._param_names()})

    wrapped._checks_ranges = True  # type: ignore[attr-defined]
    return wrapped


def _recording_fit(fit):
    """``fit`` that records the selector's provenance once it returns."""

    @functools.wraps(fit)
    def wrapper(self, *args: Any, **kwargs: Any):
        refuse_reference_labels(args[0] if args else kwargs.get("train"),
                                args[2] if len(args) > 2 else kwargs.get("val"))
        token = _FIT_DEPTH.set(_FIT_DEPTH.get() + 1)
        try:
            out = fit(self, *args, **kwargs)
        finally:
            _FIT_DEPTH.reset(token)
        train = args[0] if args else kwargs.get("train")
        features = args[1] if len(args) > 1 else kwargs.get("features")
        record_provenance(self, train, features)
        if _FIT_DEPTH.get() == 0:
            from chunksel.selectors.calibration import calibrate_after_fit

            try:
                calibrate_after_fit(self, args[2] if len(args) > 2 else kwargs.get("val"), features)
            finally:
                end = getattr(self, "_end_fit", None)  # drop what only the fit and calibration read
                if callable(end):
                    end()
        return out

    wrapper._records_provenance = True
    return wrapper


def selection_from_scores(inst: Instance, row: np.ndarray, k: int) -> Selection:
    """Top-k real candidates of one score row; ties broken by retrieval rank (column)."""
    n = min(len(inst.candidates), row.shape[0])
    cols = np.arange(n)
    order = np.lexsort((cols, -row[:n]))  # primary: score desc; secondary: rank asc
    order = [int(i) for i in order[: min(k, n)]]
    return Selection(
        question_id=inst.id,
        indices=order,
        candidate_ids=[inst.candidates[i].id for i in order],
        scores=[float(row[i]) for i in order],
    )


def rank_order(scores: np.ndarray) -> np.ndarray:
    """(B, K) column order by score desc, ties by column index (retrieval rank)."""
    cols = np.broadcast_to(np.arange(scores.shape[1]), scores.shape)
    return np.lexsort((cols, -scores), axis=-1)


def _shipped_hint(path: Path) -> str:
    """For a bare name that is no folder: the shipped pretrained names (the closest first)."""
    import difflib

    from chunksel.pretrained import PRETRAINED

    if len(path.parts) != 1:
        return ""
    close = difflib.get_close_matches(path.name, list(PRETRAINED), n=1)
    return ((f"; did you mean the pretrained {close[0]!r}?" if close else "")
            + f" (shipped pretrained selectors: {', '.join(PRETRAINED)})")


def read_config(path: str | Path) -> dict[str, Any]:
    """Read and validate a saved selector's config.json."""
    path = Path(path)
    cfg_path = path / "config.json"
    if not path.exists():
        raise DataError(f"{path} is not a saved selector: the directory does not exist" + _shipped_hint(path))
    if not path.is_dir():
        raise DataError(f"{path} is not a saved selector: it is a file, not a directory")
    if not cfg_path.is_file():
        raise DataError(f"{path} is not a saved selector (no config.json)")
    try:
        config = json.loads(cfg_path.read_text())
    except json.JSONDecodeError as err:
        raise DataError(f"corrupt checkpoint {cfg_path}: {err.msg}") from None
    if not isinstance(config, dict) or "name" not in config:
        raise DataError(f"corrupt checkpoint {cfg_path}: no selector name")
    version = config.get("format_version")
    if version != FORMAT_VERSION:
        raise DataError(
            f"{cfg_path}: format version {version!r} is not supported (this chunksel reads {FORMAT_VERSION})"
        )
    return config


# ------------------------------------------------------------------- registry
#: name -> ("module:Class", extra that provides its dependencies); the order is the
#: benchmark's row order (``chunksel.study.profiles.default_selectors``)
REGISTRY: dict[str, tuple[str, str]] = {
    "retrieval": ("chunksel.selectors.simple:RetrievalSelector", ""),
    "random": ("chunksel.selectors.simple:RandomSelector", ""),
    "oracle": ("chunksel.selectors.simple:OracleSelector", ""),
    "bm25": ("chunksel.selectors.bm25:BM25Selector", "ltr"),
    "maxsim": ("chunksel.selectors.maxsim:MaxSimSelector", "retrieval"),
    "ranksvm": ("chunksel.selectors.ltr:RankSVMSelector", "ltr"),
    "lambdamart": ("chunksel.selectors.ltr:LambdaMARTSelector", "ltr"),
    "lambdamart-late": ("chunksel.selectors.ltr:LambdaMARTLateSelector", "ltr"),
    "knrm": ("chunksel.selectors.neural:KNRMSelector", "train"),
    "drmm": ("chunksel.selectors.neural:DRMMSelector", "train"),
    "duet": ("chunksel.selectors.neural:DuetSelector", "train"),
    "sras": ("chunksel.selectors.sras:SRASSelector", "sras"),
    "crossencoder": ("chunksel.selectors.crossencoder:CrossEncoderSelector", "crossencoder"),
    "prototype": ("chunksel.selectors.prototype:PrototypeSelector", "train"),
    "anchored": ("chunksel.selectors.anchored:AnchoredPrototypeSelector", "train"),
    "anchored-ce": ("chunksel.selectors.stacked:StackedSelector", "crossencoder"),
    "rankgpt": ("chunksel.selectors.llm_listwise:RankGPTSelector", "llm"),
    "utility": ("chunksel.selectors.llm_listwise:UtilitySelector", "llm"),
}


def available() -> list[str]:
    """Registered selector names whose module exists in this installation."""
    out = []
    for name, (target, _) in REGISTRY.items():
        mod = target.split(":")[0]
        if importlib.util.find_spec(mod) is not None:
            out.append(name)
    return out


def get_selector_class(name: str) -> type[Selector]:
    """The class registered as ``name``, imported on first use."""
    if name not in REGISTRY:
        raise ConfigError(f"unknown selector {name!r}; known: {', '.join(sorted(REGISTRY))}")
    target, extra = REGISTRY[name]
    module_name, cls_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        missing = getattr(err, "name", None) or str(err)
        if missing and missing.startswith("chunksel"):
            raise
        hint = f"pip install 'chunksel[{extra}]'" if extra else "reinstall chunksel"
        raise MissingExtraError(
            f"selector {name!r} needs {missing!r}, which is not installed: {hint}"
        ) from err
    return getattr(module, cls_name)


def describe(name: str) -> dict[str, str]:
    """``{"name", "display_name", "family", "role", "query_cost", "extra"}`` of a registered
    selector, read from its class (imported on first use)."""
    cls = get_selector_class(name)
    return {
        "name": name,
        "display_name": cls.display_name or name,
        "family": cls.family,
        "role": cls.role,
        "query_cost": cls.query_cost,
        "extra": REGISTRY[name][1],
    }


def make_selector(name: str, **params: Any) -> Selector:
    """Instantiate the selector registered as ``name`` with ``params``."""
    return get_selector_class(name)(**params)


def load_selector(path: str | Path) -> Selector:
    """Load any saved selector, dispatching on the name in its config.json; ``path`` may
    name a shipped pretrained selector (:mod:`chunksel.pretrained`)."""
    from chunksel.pretrained import resolve

    path = resolve(path)
    config = read_config(path)
    return get_selector_class(config["name"]).load(path)
