"""The retrieval-anchored prototype selector (the flagship).

It starts from the retriever's own ranking and learns corrections
(:class:`~chunksel.nn.anchored.AnchoredScorer`): an evidence prototype
``normalize(q + g(x))`` around the question's retriever embedding ``q``, and a
per-candidate term over interaction features. Untrained it ranks exactly as retrieval
order; model selection on validation rank-1 keeps the untrained scorer unless training
beats it (:mod:`chunksel.training.anchored`).

Inputs (``blocks``, any non-empty subset of :data:`ANCHORED_BLOCKS`):

- ``hs``, ``rw``: the generator's warm-up features ``h`` and ``r`` (as in the paper);
- ``q``: the question's retriever embedding (computed for retrieval anyway);
- ``chunk``: the K candidates' embeddings, flattened in retrieval order;
- ``letor``: per-candidate interaction features: the twelve LETOR features of
  :mod:`.letor` (retrieval score, gap and reciprocal rank; BM25 and its gap; TF-IDF
  cosine; query, idf, bigram and title coverage; lengths), the cosine of ``q`` and each
  candidate and its gap to the best, and each of these minus its mean over the
  instance's candidates (a listwise view). Query cost: the same features as LambdaMART's.
- ``lambdamart``: a LambdaMART ranker's score of each candidate over those twelve LETOR
  features, and its deviation from the instance's mean (stacking). The selector trains
  this LambdaMART itself (LightGBM, the settings of
  :class:`~chunksel.selectors.ltr.LambdaMARTSelector`, early-stopped on validation) on
  the training split. The training instances' own scores are *cross-fitted*: the split
  is cut into ``ltr_folds`` folds and each fold is scored by a ranker trained on the
  others, so the interaction MLP learns how far to trust the ranker's score on instances
  that ranker has not seen, as it will be at query time. Query cost: the LETOR features
  plus one pass of the trees (at most a few hundred, 15 leaves each).

``hs``, ``rw``, ``q`` and ``chunk`` form ``x``, the prototype MLP's input (standard-scaled
on the training split); ``letor`` and ``lambdamart`` feed the interaction MLP
(standard-scaled over the training candidates). Without any of the first four there is
no prototype term; without ``letor`` and ``lambdamart`` no interaction term.

Defaults (g and u 2 x 64, dropout 0.3, tau 0.1, guarded ``"loss"`` selection, the stacked
``lambdamart`` block, ``members=3``) and the variants tried and not adopted are recorded,
with their figures, in ``docs/decisions/``: ``anchored-selector.md``,
``anchored-defaults.md``, ``anchored-stacked-lambdamart.md``, ``anchored-members.md``,
``generator-features-ablation.md``, ``pooled-vs-per-dataset.md``,
``letor-extra-features.md`` and ``answer-type-features.md``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chunksel.errors import ConfigError, DataError
from chunksel.nn.anchored import AnchoredEnsemble, AnchoredScorer
from chunksel.nn.inputs import StandardScaler
from chunksel.selectors.anchored_ltr import interaction_features, letor_block, ltr_scores
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.embedding_arrays import embedding_arrays, unit_rows
from chunksel.selectors.late_features import late_cost
from chunksel.training.anchored import AnchoredTrainConfig, train_anchored_ensemble
from chunksel.types import Instance

ANCHORED_BLOCKS = ("hs", "rw", "q", "chunk", "letor", "lambdamart")
#: the orders the scorer may be anchored on (``anchor``)
ANCHORS = ("auto", "retrieval", "lambdamart")
X_BLOCKS = ("hs", "rw", "q", "chunk")
WEIGHTS = "model.safetensors"
#: the internal LambdaMART's trees (block ``lambdamart``), LightGBM's text format
LTR_FILE = "lambdamart.txt"


def parse_anchored_blocks(blocks: str | Sequence[str]) -> tuple[str, ...]:
    """``"hs+rw+q+letor"`` or a sequence -> the blocks in :data:`ANCHORED_BLOCKS` order."""
    if isinstance(blocks, str):
        blocks = blocks.replace("+", ",").split(",")
    names = [b.strip().lower() for b in blocks if b.strip()]
    bad = sorted(set(names) - set(ANCHORED_BLOCKS))
    if bad or not names:
        raise ConfigError(
            f"blocks must be a non-empty subset of {', '.join(ANCHORED_BLOCKS)}; got {list(blocks)}"
        )
    return tuple(b for b in ANCHORED_BLOCKS if b in names)


class AnchoredPrototypeSelector(Selector):
    """An anchor order (the stacked LambdaMART's by default, or retrieval's) plus learned
    prototype and interaction corrections.

    Args:
        k: the ``chunk`` block's K (fewer padded, more cut); without that block every
            candidate is scored, any K (:attr:`fixed_k` None).
        blocks: inputs (subset of "hs", "rw", "q", "chunk", "letor", "lambdamart").
        hidden, depth: the prototype MLP g (its last layer starts at zero).
        phi_hidden, phi_depth: the interaction MLP u (its last layer starts at zero).
        dropout: dropout after each hidden layer.
        tau: temperature of the prototype term.
        lr, weight_decay, batch_size, max_epochs, patience: the training recipe.
        select_on: model selection on validation, "accuracy" or "loss" (both never return
            a model below retrieval order on validation; see :mod:`chunksel.training.anchored`).
        corpus, k1, b: the BM25 / TF-IDF statistics of the LETOR features (as LambdaMART's).
        late, tokens: MaxSim's columns (:mod:`.late_features`) join the LETOR features of
            ``letor`` and the internal LambdaMART (query cost ``+tokens``); ``tokens`` as
            the ``maxsim`` selector's.
        ltr_folds: folds of the cross-fitted LambdaMART scores of the training instances
            (block ``lambdamart``).
        members: scorers trained from seeds ``seed * members + j`` and averaged (one
            internal LambdaMART and one set of inputs for all of them).
        anchor: the order the untrained scorer reproduces and the guard keeps it at or
            above on validation: ``"auto"`` (the default: ``"lambdamart"`` with the
            ``lambdamart`` block, else ``"retrieval"``; chosen on validation,
            ``docs/decisions/anchored-lambdamart-anchor.md``), ``"retrieval"`` (the
            retriever's order) or ``"lambdamart"`` (the internal LambdaMART's, block
            ``lambdamart``: candidates go to the scorer sorted by its score - cross-fitted
            on the training split - and scores map back to the input order; the ONNX graph
            takes them in that order, :meth:`graph_inputs` gives ``order``).
        seed: seeds initialisation, shuffling and a carved validation split.
        label: label spec for training (default: each instance's own).
        device: torch device for training.
        progress: progress bars.
        generator_id, encoder_id: ids of the generator (h, r) and encoder (q, E) (recorded).
        engine: query-time scoring by the ``"torch"`` scorer or its exported fp32 graph in
            ``"onnxruntime"`` (the same scores to float rounding, about 1 ms less at batch 1
            with three members: ``benchmarks/anchored_latency.py``); training is torch.
    """

    name = "anchored"
    display_name = "Anchored prototype"
    #: exportable as this ONNX graph (:mod:`chunksel.export`)
    onnx_graph = "anchored"
    family = "prototype"
    role = "flagship"
    requires_fit = True
    query_cost = "warmup+bm25"

    def __init__(
        self,
        k: int = 5,
        blocks: str | Sequence[str] = ANCHORED_BLOCKS,
        hidden: int = 64,
        depth: int = 2,
        phi_hidden: int = 64,
        phi_depth: int = 2,
        dropout: float = 0.3,
        tau: float = 0.1,
        lr: float = 1e-3,
        weight_decay: float = 1e-2,
        batch_size: int = 128,
        max_epochs: int = 60,
        patience: int = 12,
        select_on: str = "loss",
        corpus: str | None = None,
        k1: float = 1.5,
        b: float = 0.75,
        late: bool = False,
        tokens: str | None = None,
        ltr_folds: int = 5,
        members: int = 3,
        anchor: str = "auto",
        seed: int = 0,
        label: str | None = None,
        device: str = "cpu",
        progress: bool = True,
        generator_id: str = "",
        encoder_id: str = "",
        engine: str = "torch",
    ) -> None:
        if engine not in ("torch", "onnxruntime"):
            raise ConfigError(f"anchored engine must be torch or onnxruntime, got {engine!r}")
        self.engine = engine
        self.k = k
        self.blocks = parse_anchored_blocks(blocks)
        self.hidden = hidden
        self.depth = depth
        self.phi_hidden = phi_hidden
        self.phi_depth = phi_depth
        self.dropout = dropout
        self.tau = tau
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.select_on = select_on
        self.corpus = corpus
        self.k1 = k1
        self.b, self.late, self.tokens = b, late, tokens
        self.query_cost = late_cost(type(self).query_cost, late)
        self.ltr_folds = ltr_folds
        self.members = members
        self.anchor, self.seed, self.label, self.device = anchor, seed, label, device
        self.progress, self.generator_id, self.encoder_id = progress, generator_id, encoder_id

    # ------------------------------------------------------------------ arrays
    def _config(self) -> AnchoredTrainConfig:
        return AnchoredTrainConfig(
            hidden=self.hidden, depth=self.depth, phi_hidden=self.phi_hidden, phi_depth=self.phi_depth,
            dropout=self.dropout, tau=self.tau, lr=self.lr, weight_decay=self.weight_decay,
            batch_size=self.batch_size, max_epochs=self.max_epochs, patience=self.patience,
            select_on=self.select_on, seed=self.seed, device=self.device, progress=self.progress,
        )

    @property
    def fixed_k(self) -> int | None:
        """``k`` with the ``chunk`` block (K embeddings flattened), else None: any K."""
        return int(self.k) if "chunk" in self.blocks else None

    def _k_of(self, batch: Sequence[Instance]) -> int:  # the fixed K, else the longest list
        return self.fixed_k or max((len(i.candidates) for i in batch), default=1) or 1

    def _embeddings(self, batch: Sequence[Instance]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit ``q`` (B, d), unit ``e`` (B, K, d) (zeros at padding) and the (B, K) real mask."""
        q, e, m = embedding_arrays(batch, self._k_of(batch), getattr(self, "emb_dim_", None),
                                   "the anchored selector")
        return unit_rows(q), unit_rows(e), m

    def _anchor(self) -> str:  # the fitted (or loaded) anchor, else the setting resolved
        return getattr(self, "anchor_", None) or self._resolved_anchor()

    def _resolved_anchor(self) -> str:  # ``anchor`` with "auto" resolved against the blocks
        if self.anchor == "auto":
            return "lambdamart" if "lambdamart" in self.blocks else "retrieval"
        return self.anchor

    @property
    def _has_phi(self) -> bool:
        return "letor" in self.blocks or "lambdamart" in self.blocks

    def required_inputs(self) -> frozenset[str]:
        """Beyond the texts: embeddings, the warm-up pass for ``hs`` / ``rw``, corpus
        statistics, retrieval scores (and token vectors, ``late``) for ``letor`` / ``lambdamart``."""
        out = {"chunk_embedding", "question_embedding"}
        if "hs" in self.blocks or "rw" in self.blocks:
            out.add("warmup")
        if self._has_phi:
            out |= {"corpus_stats", "retrieval_score"}
            if self.late:
                out.add("token_vectors")
        return frozenset(out)

    def _letor(self, batch: Sequence[Instance]) -> np.ndarray:
        """(B, K, 12) LETOR features, 15 with ``late`` (0 at padding)."""
        return letor_block(batch, self.corpus, self.k1, self.b, self._k_of(batch), self.late, self.tokens)

    def _fit_ltr(self, train: Sequence[Instance], val: Sequence[Instance] | None) -> np.ndarray:
        """Train the internal LambdaMART into ``self.ltr_``; the training split's cross-fitted
        scores (:func:`~chunksel.selectors.anchored_ltr.fit_internal_lambdamart`)."""
        from chunksel.selectors.anchored_ltr import fit_internal_lambdamart

        self.ltr_, scores = fit_internal_lambdamart(
            train, val, lambda batch: (self._letor(batch), self._embeddings(batch)[2]),
            label=self.label, k=self._k_of(train), seed=self.seed, folds=self.ltr_folds)
        return scores

    def _x(self, batch: Sequence[Instance], features: QuestionFeatures | None, q: np.ndarray,
           e: np.ndarray) -> np.ndarray | None:
        parts = []
        if "hs" in self.blocks or "rw" in self.blocks:
            if features is None:
                raise DataError(
                    f"the anchored selector with blocks {'+'.join(self.blocks)} needs generator features "
                    "(h, r): pass a feature store"
                )
            got = features.lookup([inst.id for inst in batch])
            for blk, key in (("hs", "h"), ("rw", "r")):
                if blk in self.blocks:
                    arr = got.get(key)
                    if arr is None:
                        raise DataError(f"the feature store has no {key!r} array (needed by the {blk!r} block)")
                    parts.append(np.asarray(arr, dtype=np.float32))
        if "q" in self.blocks:
            parts.append(q)
        if "chunk" in self.blocks:
            parts.append(e.reshape(len(batch), -1))
        return np.concatenate(parts, axis=1) if parts else None

    def _generator_dims(self, batch: Sequence[Instance], features: QuestionFeatures | None) -> tuple[int, int]:
        if not ("hs" in self.blocks or "rw" in self.blocks) or features is None:
            return 0, 0
        got = features.lookup([i.id for i in batch])
        return (int(got["h"].shape[1]) if "hs" in self.blocks else 0,
                int(got["r"].shape[1]) if "rw" in self.blocks else 0)

    def graph_inputs(self, batch: Sequence[Instance], features: QuestionFeatures | None = None) -> dict[str, np.ndarray]:
        """The exported ONNX graph's inputs for ``batch`` (:mod:`chunksel.export.anchored`):
        ``h``, ``r`` as the store gives them, unit ``q`` and ``e`` (zeros at padding) and the
        raw interaction features ``phi``; the graph scales them itself. With
        ``anchor="lambdamart"`` the candidates come in the internal LambdaMART's order and
        ``order`` (each position's input index) maps the graph's scores back."""
        batch = list(batch)
        warm = "hs" in self.blocks or "rw" in self.blocks
        if warm and features is None:
            raise DataError("the anchored selector's graph needs generator features (h, r)")
        arr = self._arrays(batch, features, labels=False)
        out: dict[str, np.ndarray] = {"q": arr["q"], "e": arr["e"]}
        if warm:
            got = features.lookup([i.id for i in batch])
            out.update({key: np.asarray(got[key], dtype=np.float32)
                        for blk, key in (("hs", "h"), ("rw", "r")) if blk in self.blocks})
        if self._has_phi:
            out["phi"] = arr["phi"]
        if arr["order"] is not None:
            out["order"] = arr["order"]
        return out

    def export_state(self):
        """The public state an exporter reads (:class:`chunksel.export.anchored.AnchoredState`)."""
        from chunksel.export.anchored import AnchoredState

        self._check_fitted()
        xs, ps = self.x_scaler_, self.phi_scaler_
        return AnchoredState(
            model=self.model_, blocks=tuple(self.blocks), k=self.fixed_k, emb_dim=self.emb_dim_, h_dim=self.h_dim_,
            r_dim=self.r_dim_, x_mean=None if xs is None else xs.mean_, x_scale=None if xs is None else xs.scale_,
            phi_mean=None if ps is None else ps.mean_, phi_scale=None if ps is None else ps.scale_,
            anchor=self._anchor(), generator_id=self.generator_id, encoder_id=self.encoder_id,
        )

    def _arrays(self, batch: Sequence[Instance], features: QuestionFeatures | None,
                labels: bool, ltr: np.ndarray | None = None) -> dict[str, np.ndarray | None]:
        """The scorer's inputs; with ``anchor="lambdamart"`` each instance's candidates in
        the internal LambdaMART's order (``"order"``: input index of each position)."""
        batch = list(batch)
        q, e, m = self._embeddings(batch)
        phi, order = None, None
        if self._has_phi:
            lf = self._letor(batch)
            if "lambdamart" in self.blocks and ltr is None:
                ltr = ltr_scores(self.ltr_, lf, m)
            phi = interaction_features(self.blocks, q, e, m, lf, ltr)
        y = None
        if labels:
            y = np.zeros((len(batch), self._k_of(batch)), dtype=np.int8)
            for i, inst in enumerate(batch):
                lab = inst.labels(self.label)[: y.shape[1]]
                y[i, : len(lab)] = lab
        if self._anchor() == "lambdamart":
            # real candidates first, by score; ties keep the retrieval order
            order = np.argsort(-np.where(m, ltr, -np.inf), axis=1, kind="stable")
            rows = np.arange(len(batch))[:, None]
            e, m, phi = e[rows, order], m[rows, order], phi[rows, order]
            y = None if y is None else y[rows, order]
        x = self._x(batch, features, q, e)
        out: dict[str, np.ndarray | None] = {"q": q, "e": e, "x": x, "phi": phi, "m": m, "order": order}
        if labels:
            out["y"] = y
        return out

    def _scale(self, arrays: dict[str, np.ndarray | None]) -> dict[str, np.ndarray | None]:
        out = dict(arrays)
        if arrays["x"] is not None:
            if arrays["x"].shape[1] != self.x_scaler_.mean_.shape[0]:
                raise DataError(
                    f"question-side input has dimension {arrays['x'].shape[1]}, but the selector was "
                    f"trained on {self.x_scaler_.mean_.shape[0]} (another generator or encoder?"
                    f"{' trained with ' + self.generator_id if self.generator_id else ''})"
                )
            out["x"] = self.x_scaler_.transform(arrays["x"])
        if arrays["phi"] is not None:
            phi = self.phi_scaler_.transform(arrays["phi"].reshape(-1, arrays["phi"].shape[2]))
            out["phi"] = (phi.reshape(arrays["phi"].shape) * arrays["m"][:, :, None]).astype(np.float32)
        return out

    # ----------------------------------------------------------------- fitting
    def _validate(self) -> None:
        if not isinstance(self.k, int) or isinstance(self.k, bool) or self.k < 1:
            raise ConfigError(f"k must be an integer >= 1, got {self.k!r}")
        if self.tau <= 0:
            raise ConfigError(f"tau must be > 0, got {self.tau}")
        for name in ("hidden", "depth", "phi_hidden", "phi_depth", "batch_size", "max_epochs", "members"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if "lambdamart" in self.blocks and int(self.ltr_folds) < 2:
            raise ConfigError(f"ltr_folds must be >= 2, got {self.ltr_folds}")
        if self.anchor not in ANCHORS:
            raise ConfigError(f"anchor must be one of {', '.join(ANCHORS)}, got {self.anchor!r}")
        if self.anchor == "lambdamart" and "lambdamart" not in self.blocks:
            raise ConfigError("anchor='lambdamart' needs the lambdamart block")

    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ) -> AnchoredPrototypeSelector:
        """Scale the inputs on ``train``, train, and keep the best validation candidate."""
        self._validate()
        self.fitted_ = False
        self.anchor_ = self._resolved_anchor()
        train = list(train)
        self.ltr_ = None
        ltr_train = self._fit_ltr(train, val) if "lambdamart" in self.blocks else None
        tr = self._arrays(train, features, labels=True, ltr=ltr_train)
        va = self._arrays(val, features, labels=True) if val else None
        self.emb_dim_ = int(tr["e"].shape[2])
        self.h_dim_, self.r_dim_ = self._generator_dims(train[:1], features)
        self.x_scaler_ = StandardScaler().fit(tr["x"]) if tr["x"] is not None else None
        if tr["phi"] is not None:
            self.phi_scaler_ = StandardScaler().fit(tr["phi"][tr["m"]])
        else:
            self.phi_scaler_ = None
        model, summary = train_anchored_ensemble(self._scale(tr), self._scale(va) if va else None,
                                                 self._config(), int(self.members))
        self.model_ = model
        self.summary_ = summary
        self.fitted_ = True
        return self

    def n_parameters(self) -> int:
        """The scorer's weights, plus the internal LambdaMART's tree nodes (block ``lambdamart``)."""
        from chunksel.selectors.ltr import tree_nodes

        self._check_fitted()
        return self.model_.n_parameters() + (tree_nodes(self.ltr_) if getattr(self, "ltr_", None) else 0)

    @torch.inference_mode()
    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        if self.engine == "onnxruntime":
            from chunksel.export.anchored import onnx_scores

            return onnx_scores(self, self.graph_inputs(batch, features))[:, :k]
        arr = self._scale(self._arrays(batch, features, labels=False))

        def t(a):
            return None if a is None else torch.from_numpy(np.ascontiguousarray(a))

        s = self.model_(t(arr["q"]), t(arr["e"]), t(arr["x"]), t(arr["phi"])).numpy()
        if arr.get("order") is not None:  # back to the input order
            back = np.empty_like(s)
            np.put_along_axis(back, arr["order"], s, axis=1)
            s = back
        return s[:, :k]

    # --------------------------------------------------------------- save/load
    def _state_config(self) -> dict[str, Any]:
        def sc(s):
            return None if s is None else {"mean": s.mean_.tolist(), "scale": s.scale_.tolist()}

        return {
            "emb_dim": self.emb_dim_,
            "h_dim": self.h_dim_,
            "r_dim": self.r_dim_,
            "x_dim": 0 if self.x_scaler_ is None else int(self.x_scaler_.mean_.shape[0]),
            "phi_dim": 0 if self.phi_scaler_ is None else int(self.phi_scaler_.mean_.shape[0]),
            "x_scaler": sc(self.x_scaler_),
            "phi_scaler": sc(self.phi_scaler_),
            "summary": {k: v for k, v in self.summary_.items() if k not in ("train_loss", "val_acc")},
            "anchor": self._anchor(),
        }

    def _save_state(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.model_.state_dict().items()}, str(path / WEIGHTS))
        if getattr(self, "ltr_", None) is not None:
            self.ltr_.save_model(str(path / LTR_FILE))

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        from safetensors.torch import load_file

        def sc(d):
            return None if d is None else StandardScaler(np.asarray(d["mean"]), np.asarray(d["scale"]))

        try:
            self.emb_dim_ = int(state["emb_dim"])
            self.h_dim_, self.r_dim_ = int(state.get("h_dim", 0)), int(state.get("r_dim", 0))
            self.x_scaler_ = sc(state.get("x_scaler"))
            self.phi_scaler_ = sc(state.get("phi_scaler"))
            x_dim, phi_dim = int(state["x_dim"]), int(state["phi_dim"])
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"corrupt checkpoint {path / 'config.json'}: bad anchored state ({err})") from None
        file = path / WEIGHTS
        if not file.is_file():
            raise DataError(f"corrupt checkpoint {path}: {WEIGHTS} is missing")
        try:
            weights = load_file(str(file))
            # an ensemble's weights are ``members.<j>.*``; checkpoints from before the linear
            # interaction path have no ``w.*`` weights
            n = len({k.split(".")[1] for k in weights if k.startswith("members.")})

            def scorer(prefix: str) -> AnchoredScorer:
                return AnchoredScorer(x_dim, phi_dim, self.emb_dim_, self.hidden, self.depth,
                                      self.phi_hidden, self.phi_depth, self.dropout, self.tau,
                                      phi_linear=any(k.startswith(prefix + "w.") for k in weights))

            model = AnchoredEnsemble([scorer(f"members.{j}.") for j in range(n)]) if n else scorer("")
            model.load_state_dict(weights)
        except Exception as err:  # safetensors header errors, shape mismatches
            raise DataError(f"corrupt checkpoint {file}: {str(err).splitlines()[0][:300]}") from None
        self.model_ = model.eval()
        self.summary_ = dict(state.get("summary") or {})
        # checkpoints from before the anchor setting were anchored on retrieval order
        self.anchor_ = str(state.get("anchor") or "retrieval")
        if self.anchor_ not in ANCHORS[1:]:
            raise DataError(f"corrupt checkpoint {path / 'config.json'}: unknown anchor {self.anchor_!r}")
        self.ltr_ = None
        if "lambdamart" in self.blocks:
            from chunksel.selectors.ltr import load_booster

            self.ltr_ = load_booster(path / LTR_FILE)
