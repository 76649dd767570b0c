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

``hs``, ``rw``, ``q`` and ``chunk`` form ``x``, the prototype MLP's input (standard-scaled
on the training split); ``letor`` feeds the interaction MLP (standard-scaled over the
training candidates). Without any of the first four there is no prototype term; without
``letor`` no interaction term.

Defaults (g 2 x 64, u 2 x 64, dropout 0.3, tau 0.1, guarded loss-based selection) were
chosen by 3-fold cross-validation over the *training* splits of the full-profile
instances (``limit=3000``; the validation split selects epochs; test untouched), rank-1
on the held-out folds. LambdaMART on the same folds: TriviaQA 67.97, NQ 70.85, PopQA
89.31, MS MARCO 72.21 (retrieval order 59.86 / 68.87 / 79.08 / 73.65). Interaction term
alone (``letor``, u 2 x 64): 69.23 / 70.41 / 89.88 / 73.94. All blocks with g 2 x 64:
69.09 (TriviaQA), 90.55 (PopQA); ``q + letor`` with g 2 x 64: 66.85 / - / 89.88 / 73.65;
with a wider g (2 x 256, dropout 0.1) and u 1 x 32 every block combination fell 2-5
points below LambdaMART on TriviaQA (64.5-65.5).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chunksel.errors import ConfigError, DataError
from chunksel.nn.anchored import AnchoredScorer
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.embedding_arrays import embedding_arrays
from chunksel.training.anchored import AnchoredTrainConfig, train_anchored
from chunksel.training.trainer import StandardScaler
from chunksel.types import Instance

ANCHORED_BLOCKS = ("hs", "rw", "q", "chunk", "letor")
X_BLOCKS = ("hs", "rw", "q", "chunk")
WEIGHTS = "model.safetensors"
#: the interaction features built on top of the LETOR ones (see the module docstring)
PHI_EXTRA = ("q_cosine", "q_cosine_gap")


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


def _unit(v: np.ndarray) -> np.ndarray:
    n = np.linalg.norm(v, axis=-1, keepdims=True)
    return np.where(n > 0, v / np.maximum(n, 1e-12), 0.0).astype(np.float32)


class AnchoredPrototypeSelector(Selector):
    """Retrieval order plus learned prototype and interaction corrections.

    Args:
        k: candidates per instance (K); fewer are padded and masked, more are cut.
        blocks: inputs (subset of "hs", "rw", "q", "chunk", "letor").
        hidden, depth: the prototype MLP g (its last layer starts at zero).
        phi_hidden, phi_depth: the interaction MLP u (its last layer starts at zero).
        dropout: dropout after each hidden layer.
        tau: temperature of the prototype term.
        lr, weight_decay, batch_size, max_epochs, patience: the training recipe.
        select_on: model selection on validation, "accuracy" or "loss" (both never return
            a model below retrieval order on validation; see :mod:`chunksel.training.anchored`).
        corpus, k1, b: the BM25 / TF-IDF statistics of the LETOR features (as LambdaMART's).
        seed: seeds initialisation, shuffling and a carved validation split.
        label: label spec for training (default: each instance's own).
        device: torch device for training.
        progress: progress bars.
        generator_id, encoder_id: ids of the generator (h, r) and encoder (q, E) (recorded).
    """

    name = "anchored"
    display_name = "Anchored prototype"
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
        seed: int = 0,
        label: str | None = None,
        device: str = "cpu",
        progress: bool = True,
        generator_id: str = "",
        encoder_id: str = "",
    ) -> None:
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
        self.b = b
        self.seed = seed
        self.label = label
        self.device = device
        self.progress = progress
        self.generator_id = generator_id
        self.encoder_id = encoder_id

    # ------------------------------------------------------------------ arrays
    def _config(self) -> AnchoredTrainConfig:
        return AnchoredTrainConfig(
            hidden=self.hidden, depth=self.depth, phi_hidden=self.phi_hidden, phi_depth=self.phi_depth,
            dropout=self.dropout, tau=self.tau, lr=self.lr, weight_decay=self.weight_decay,
            batch_size=self.batch_size, max_epochs=self.max_epochs, patience=self.patience,
            select_on=self.select_on, seed=self.seed, device=self.device, progress=self.progress,
        )

    def _embeddings(self, batch: Sequence[Instance]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Unit ``q`` (B, d), unit ``e`` (B, K, d) (zeros at padding) and the (B, K) real mask."""
        q, e, m = embedding_arrays(batch, self.k, getattr(self, "emb_dim_", None), "the anchored selector")
        return _unit(q), _unit(e), m

    def _phi(self, batch: Sequence[Instance], q: np.ndarray, e: np.ndarray, m: np.ndarray) -> np.ndarray:
        """(B, K, F) interaction features (0 at padding)."""
        from chunksel.selectors.letor import letor_features

        lf, _ = letor_features(batch, self.corpus, self.k1, self.b)
        lf = lf[:, : self.k]
        raw = np.zeros((len(batch), self.k, lf.shape[2] + len(PHI_EXTRA)), dtype=np.float64)
        raw[:, : lf.shape[1], : lf.shape[2]] = lf
        cos = np.einsum("bd,bkd->bk", q, e)
        best = np.where(m, cos, -np.inf).max(axis=1, keepdims=True)
        raw[:, :, -2] = cos
        raw[:, :, -1] = np.where(m, cos - best, 0.0)
        n = np.maximum(m.sum(axis=1, keepdims=True), 1)[:, :, None]
        mean = (raw * m[:, :, None]).sum(axis=1, keepdims=True) / n
        centred = (raw - mean) * m[:, :, None]
        return (np.concatenate([raw, centred], axis=2) * m[:, :, None]).astype(np.float32)

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
        """The exported ONNX graph's inputs for ``batch`` (:mod:`chunksel.pipeline.onnx_anchored`):
        ``h``, ``r`` as the store gives them, unit ``q`` and ``e`` (zeros at padding) and the
        raw interaction features ``phi``; the graph scales them itself."""
        batch = list(batch)
        q, e, m = self._embeddings(batch)
        out: dict[str, np.ndarray] = {"q": q, "e": e}
        if "hs" in self.blocks or "rw" in self.blocks:
            if features is None:
                raise DataError("the anchored selector's graph needs generator features (h, r)")
            got = features.lookup([i.id for i in batch])
            if "hs" in self.blocks:
                out["h"] = np.asarray(got["h"], dtype=np.float32)
            if "rw" in self.blocks:
                out["r"] = np.asarray(got["r"], dtype=np.float32)
        if "letor" in self.blocks:
            out["phi"] = self._phi(batch, q, e, m)
        return out

    def _arrays(self, batch: Sequence[Instance], features: QuestionFeatures | None,
                labels: bool) -> dict[str, np.ndarray | None]:
        batch = list(batch)
        q, e, m = self._embeddings(batch)
        x = self._x(batch, features, q, e)
        phi = self._phi(batch, q, e, m) if "letor" in self.blocks else None
        out: dict[str, np.ndarray | None] = {"q": q, "e": e, "x": x, "phi": phi, "m": m}
        if labels:
            y = np.zeros((len(batch), self.k), dtype=np.int8)
            for i, inst in enumerate(batch):
                lab = inst.labels(self.label)[: self.k]
                y[i, : len(lab)] = lab
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
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.tau <= 0:
            raise ConfigError(f"tau must be > 0, got {self.tau}")
        for name in ("hidden", "depth", "phi_hidden", "phi_depth", "batch_size", "max_epochs"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")

    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ) -> AnchoredPrototypeSelector:
        """Scale the inputs on ``train``, train, and keep the best validation candidate."""
        self._validate()
        self.fitted_ = False
        tr = self._arrays(train, features, labels=True)
        va = self._arrays(val, features, labels=True) if val else None
        self.emb_dim_ = int(tr["e"].shape[2])
        self.h_dim_, self.r_dim_ = self._generator_dims(train[:1], features)
        self.x_scaler_ = StandardScaler().fit(tr["x"]) if tr["x"] is not None else None
        if tr["phi"] is not None:
            self.phi_scaler_ = StandardScaler().fit(tr["phi"][tr["m"]])
        else:
            self.phi_scaler_ = None
        model, summary = train_anchored(self._scale(tr), self._scale(va) if va else None, self._config())
        self.model_ = model
        self.summary_ = summary.to_dict()
        self.fitted_ = True
        return self

    def n_parameters(self) -> int:
        self._check_fitted()
        return self.model_.n_parameters()

    @torch.inference_mode()
    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        arr = self._scale(self._arrays(batch, features, labels=False))

        def t(a):
            return None if a is None else torch.from_numpy(np.ascontiguousarray(a))

        s = self.model_(t(arr["q"]), t(arr["e"]), t(arr["x"]), t(arr["phi"])).numpy()
        return s[:, : min(k, self.k)]

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
        }

    def _save_state(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.model_.state_dict().items()}, str(path / WEIGHTS))

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
        model = AnchoredScorer(x_dim, phi_dim, self.k, self.emb_dim_, self.hidden, self.depth,
                               self.phi_hidden, self.phi_depth, self.dropout, self.tau)
        try:
            model.load_state_dict(load_file(str(file)))
        except Exception as err:  # safetensors header errors, shape mismatches
            raise DataError(f"corrupt checkpoint {file}: {str(err).splitlines()[0][:300]}") from None
        self.model_ = model.eval()
        self.summary_ = dict(state.get("summary") or {})
