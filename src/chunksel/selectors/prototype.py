"""The evidence-prototype selector (the paper's method; Secs. 3.1-3.3, 5.2).

Input ``x = [h ; r ; E]``: ``h`` and ``r`` from the generator's question-only warm-up
pass (``features.lookup(ids)``), ``E`` the top-K candidates' L2-normalised retriever
embeddings flattened in retrieval order (zeros at padded slots). ``x`` is standard-scaled
(scaler fitted on the training split), optionally masked to a feature budget
(:mod:`chunksel.training.budgets`), and an MLP predicts a unit prototype ``y~``;
candidate k scores ``cos(y~, e_k)`` (Eq. 7), the selection is the argmax (Eq. 9).

Ablations: ``blocks`` names the feature blocks in ``x`` (any non-empty subset of "hs",
"rw", "chunk"). Without "chunk" the MLP sees no candidate embedding, but the scores are
still cosines between its prototype and the candidates' embeddings.

The module holds the selector (settings, fitting, scoring, persistence); the input
arrays and their checks are in :mod:`chunksel.selectors.prototype_arrays`, the inference
engines (torch fp32 / int8 / int8w, ONNX Runtime fp32 / int8) in
:mod:`chunksel.selectors.prototype_engines`, the studies (budget curve, tau sweep) in
:mod:`chunksel.study.budgets`. The training defaults are :class:`TrainConfig`'s (one
place).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chunksel.errors import ConfigError, DataError
from chunksel.nn.inputs import BLOCKS, FeatureLayout, StandardScaler
from chunksel.nn.prototype import PrototypeMLP
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.checkpoint import check_safetensors_header, load_state_dict_checked
from chunksel.selectors.prototype_arrays import (
    all_true,
    block_input,
    candidate_embeddings,
    check_layout,
    parse_blocks,
    question_features,
    split_input,
)
from chunksel.selectors.prototype_engines import build_engine, check_engine
from chunksel.training.budgets import budget_mask, gradient_importance
from chunksel.training.trainer import TrainConfig, train_prototype, usable
from chunksel.types import Instance, Selection

_DEFAULTS = TrainConfig()

#: version of the prototype selector's own state (layout, tensors) inside a save
PROTOTYPE_FORMAT = 1
WEIGHTS = "model.safetensors"


class PrototypeSelector(Selector):
    """MLP evidence prototype + cosine scoring, trained with the multi-positive loss (Eq. 8).

    Args:
        k: candidates used per instance (K); fewer are padded and masked, more are cut.
        blocks: feature blocks of ``x`` ("hs", "rw", "chunk"; any non-empty subset).
        budget: feature budget in percent (10 keeps floor(D/10) units) or None for all.
        tau: temperature of Eq. 8.
        lr, weight_decay, batch_size, max_epochs, patience: the training recipe.
        hidden, depth, dropout: the MLP (3 x 1024, dropout 0.05 in the paper).
        seed: seeds initialisation, shuffling and the carved validation split.
        label: label spec for training (default: each instance's ``label_source``).
        device: torch device for training.
        progress: tqdm bars while training.
        quantize: inference numerics: None (fp32), "int8" (dynamic int8) or "int8w"
            (weight-only int8, torch engine only).
        engine: "torch" (default) or "onnxruntime" (the exported ONNX graph).
        generator_id: id of the generator whose warm-up gave h and r (recorded).
        encoder_id: id of the retriever encoder that gave E (recorded).
    """

    name = "prototype"
    display_name = "Prototype (paper)"
    #: exportable as this ONNX graph (:mod:`chunksel.export`)
    onnx_graph = "prototype"
    family = "prototype"
    role = "reproduction"
    requires_fit = True
    query_cost = "warmup"

    def __init__(
        self,
        k: int = 5,
        blocks: str | Sequence[str] = BLOCKS,
        budget: float | None = None,
        tau: float = _DEFAULTS.tau,
        lr: float = _DEFAULTS.lr,
        weight_decay: float = _DEFAULTS.weight_decay,
        batch_size: int = _DEFAULTS.batch_size,
        max_epochs: int = _DEFAULTS.max_epochs,
        patience: int = _DEFAULTS.patience,
        hidden: int = _DEFAULTS.hidden,
        depth: int = _DEFAULTS.depth,
        dropout: float = _DEFAULTS.dropout,
        seed: int = 0,
        label: str | None = None,
        device: str = "cpu",
        progress: bool = True,
        quantize: str | None = None,
        engine: str = "torch",
        generator_id: str = "",
        encoder_id: str = "",
    ) -> None:
        self.k = k
        self.blocks = parse_blocks(blocks)
        self.budget = budget
        self.tau = tau
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.hidden = hidden
        self.depth = depth
        self.dropout = dropout
        self.seed = seed
        self.label = label
        self.device = device
        self.progress = progress
        self.quantize = quantize
        self.engine = engine
        self.generator_id = generator_id
        self.encoder_id = encoder_id

    # ------------------------------------------------------------------ arrays
    def _train_config(self) -> TrainConfig:
        return TrainConfig(
            tau=self.tau, lr=self.lr, weight_decay=self.weight_decay, batch_size=self.batch_size,
            max_epochs=self.max_epochs, patience=self.patience, hidden=self.hidden, depth=self.depth,
            dropout=self.dropout, seed=self.seed, device=self.device, progress=self.progress,
        )

    def _needs_features(self) -> bool:
        return "hs" in self.blocks or "rw" in self.blocks

    def _question_features(
        self, batch: Sequence[Instance], features: QuestionFeatures | None
    ) -> tuple[np.ndarray | None, np.ndarray | None]:
        return question_features(batch, features, self.blocks)

    def _embeddings(self, batch: Sequence[Instance], d_e: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(B, K, d) candidate embeddings (zeros at padding) and the (B, K) real mask."""
        return candidate_embeddings(batch, self.k, d_e)

    def _prepare(
        self, instances: Sequence[Instance], features: QuestionFeatures | None
    ) -> dict[str, np.ndarray]:
        """Full-layout ``x`` (N, D), ``e``, ``y`` and ``m`` of labelled instances."""
        instances = list(instances)
        layout = getattr(self, "layout_", None)
        e, m = self._embeddings(instances, layout.d_e if layout is not None else None)
        h, r = self._question_features(instances, features)
        if layout is None:
            layout = FeatureLayout(
                d_h=0 if h is None else int(h.shape[1]),
                d_r=0 if r is None else int(r.shape[1]),
                k=self.k,
                d_e=int(e.shape[2]),
                blocks=self.blocks,
            )
            self.layout_ = layout
        self._check_layout(h, r, e)
        y = np.zeros((len(instances), self.k), dtype=np.int8)
        for b, inst in enumerate(instances):
            lab = inst.labels(self.label)[: self.k]
            y[b, : len(lab)] = lab
        return {"x": layout.assemble(h, r, e), "e": e, "y": y, "m": m}

    def _check_layout(self, h: np.ndarray | None, r: np.ndarray | None, e: np.ndarray) -> None:
        check_layout(self.layout_, h, r, e, self.generator_id, self.encoder_id)

    # ----------------------------------------------------------------- fitting
    def _validate(self) -> None:
        if self.k < 1:
            raise ConfigError(f"k must be >= 1, got {self.k}")
        if self.budget is not None and not 0 < float(self.budget) <= 100:
            raise ConfigError(f"budget must be a percent in (0, 100] or None, got {self.budget}")
        if self.tau <= 0:
            raise ConfigError(f"tau must be > 0, got {self.tau}")
        check_engine(self.engine, self.quantize)

    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ) -> PrototypeSelector:
        """Train the full model; with a budget < 100%, rank dims by Eq. 4 and retrain masked."""
        self._validate()
        self._reset()
        data = self._prepare(train, features)
        vdata = self._prepare(val, features) if val else None
        self._fit_full(data, vdata)
        if self.budget is not None and float(self.budget) < 100:
            self._fit_masked(data, vdata, self._importance(data))
        self.fitted_ = True
        return self

    def _reset(self) -> None:
        for attr in ("layout_", "scaler_", "model_", "feature_mask_", "importance_", "summary_", "_infer"):
            self.__dict__.pop(attr, None)
        self.fitted_ = False

    def _fit_full(self, data: dict[str, np.ndarray], vdata: dict[str, np.ndarray] | None) -> None:
        v = (vdata["x"], vdata["e"], vdata["y"], vdata["m"]) if vdata else (None,) * 4
        model, scaler, summary = train_prototype(data["x"], data["e"], data["y"], data["m"], *v, self._train_config())
        self.model_, self.scaler_, self.summary_ = model, scaler, summary.to_dict()
        self.feature_mask_ = np.ones(self.layout_.dim, dtype=bool)
        self.importance_ = None
        self._infer = None

    def _importance(self, data: dict[str, np.ndarray]) -> np.ndarray:
        """Eq. 4 over the usable training instances with the current (full) model."""
        if getattr(self, "importance_", None) is None:
            if not self.feature_mask_.all():
                raise RuntimeError("gradient importance needs the full-input model")
            keep, _, _ = usable(data["y"], data["m"])
            self.importance_ = gradient_importance(
                self.model_, self.scaler_.transform(data["x"][keep]), data["e"][keep],
                data["y"][keep], data["m"][keep], self.tau,
            )
        return self.importance_

    def _fit_masked(
        self, data: dict[str, np.ndarray], vdata: dict[str, np.ndarray] | None, importance: np.ndarray
    ) -> None:
        mask = budget_mask(importance, self.layout_, float(self.budget))
        v = (vdata["x"][:, mask], vdata["e"], vdata["y"], vdata["m"]) if vdata else (None,) * 4
        full_scaler = self.scaler_
        model, _, summary = train_prototype(
            data["x"][:, mask], data["e"], data["y"], data["m"], *v, self._train_config(),
            scaler=full_scaler.subset(mask),
        )
        self.model_, self.summary_, self.feature_mask_ = model, summary.to_dict(), mask
        self.importance_ = importance
        self._infer = None

    def export_state(self):
        """The public state an exporter reads (:class:`chunksel.export.prototype.PrototypeState`)."""
        from chunksel.export.prototype import PrototypeState

        self._check_fitted()
        keep = np.asarray(self.feature_mask_, dtype=bool)
        return PrototypeState(
            layout=self.layout_, feature_mask=keep, mean=self.scaler_.mean_[keep], scale=self.scaler_.scale_[keep],
            model=self.model_, tau=self.tau, generator_id=self.generator_id, encoder_id=self.encoder_id,
        )

    def adopt(self, full: PrototypeSelector) -> None:
        """Take over a fitted full model's learned state (the 100% budget point)."""
        for attr in ("layout_", "scaler_", "model_", "feature_mask_", "importance_", "summary_"):
            setattr(self, attr, getattr(full, attr))
        self._infer = None
        self.fitted_ = True

    def fit_from_full(
        self,
        full: PrototypeSelector,
        train: Sequence[Instance],
        features: QuestionFeatures | None,
        val: Sequence[Instance] | None,
    ) -> None:
        """Budget retrain from a fitted full selector (shares its importance and scaler)."""
        self._validate()
        self._reset()
        self.layout_, self.scaler_, self.model_ = full.layout_, full.scaler_, full.model_
        self.feature_mask_, self.importance_ = full.feature_mask_, getattr(full, "importance_", None)
        data = self._prepare(train, features)
        vdata = self._prepare(val, features) if val else None
        importance = full._importance(data)
        self._fit_masked(data, vdata, importance)
        self.fitted_ = True

    # ----------------------------------------------------------------- scoring
    def n_parameters(self) -> int:
        """Trainable parameters of the fitted MLP (smaller under a feature budget)."""
        self._check_fitted()
        return self.model_.n_parameters()

    @property
    def kept_dims(self) -> int:
        """Input dims kept by the feature mask (D at 100%)."""
        self._check_fitted()
        return int(self.feature_mask_.sum())

    def _inference_model(self):
        """The inference callable, built once per (engine, mode)
        (:func:`~chunksel.selectors.prototype_engines.build_engine`)."""
        key = (self.engine, self.quantize)
        cached = getattr(self, "_infer", None)
        if cached is not None and cached[0] == key:
            return cached[1]
        model = build_engine(self, self.engine, self.quantize)
        self._infer = (key, model)
        return model

    def _split(self, x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
        """Full-layout ``x`` (B, D) -> (h, r, E) as the ONNX graph takes them."""
        return split_input(self.layout_, x)

    def prototypes(self, x: np.ndarray) -> np.ndarray:
        """(B, d_e) unit prototypes for full-layout unscaled inputs ``x`` (B, D)."""
        self._check_fitted()
        x = np.asarray(x, dtype=np.float32)
        if x.ndim == 1:
            x = x[None]
        if x.shape[1] != self.layout_.dim:
            raise DataError(f"input has {x.shape[1]} dims, the selector's layout has {self.layout_.dim}")
        model = self._inference_model()
        if self.engine == "onnxruntime":
            return model(*self._split(x))[1]
        if not self.feature_mask_.all():
            x = x[:, self.feature_mask_]
        with torch.inference_mode():
            return model(torch.from_numpy(np.ascontiguousarray(x))).numpy()

    def score_arrays(
        self,
        h: np.ndarray | None,
        r: np.ndarray | None,
        e: np.ndarray,
        mask: np.ndarray | None = None,
    ) -> np.ndarray:
        """Scores from raw arrays (the real-world path): no instances, no feature store.

        Args:
            h: (B, d_h) or (d_h,) hidden states (ignored/None without the "hs" block).
            r: (B, d_r) or (d_r,) routing scores (ignored/None without the "rw" block).
            e: (B, K', d) or (K', d) L2-normalised candidate embeddings in retrieval order;
                K' < K is padded, K' > K cut to the top K.
            mask: (B, K') bool, True at real candidates (default: all real).

        Returns:
            (B, min(K', K)) float32 cosine scores, ``-inf`` where ``mask`` is False.
        """
        self._check_fitted()
        lay: FeatureLayout = self.layout_
        # few numpy calls on this path: at batch 1 each costs microseconds against a 0.5 ms model
        e = np.ascontiguousarray(e, dtype=np.float32)
        if e.ndim == 2:
            e = e[None]
        elif e.ndim != 3:
            raise DataError(f"candidate embeddings must be (B, K, d) or (K, d), got shape {e.shape}")
        b, kk = e.shape[0], min(e.shape[1], lay.k)
        h = self._block_input(h, "hs", b)
        r = self._block_input(r, "rw", b)
        self._check_layout(h, r, e)
        m = None if mask is None else np.asarray(mask, dtype=bool)
        if m is not None:
            m = None if all_true(m) else m.reshape(b, -1)[:, :kk]  # None: every candidate is real
        if e.shape[1] == lay.k and m is None:
            full_e = e
        else:
            full_e = np.zeros((b, lay.k, lay.d_e), dtype=np.float32)
            full_e[:, :kk] = e[:, :kk] if m is None else e[:, :kk] * m[..., None]
        if self.engine == "onnxruntime":
            # the graph scores -inf at the all-zero (padded or masked) rows itself
            cos = self._inference_model().scores(h, r, full_e)
            return cos if kk == lay.k else cos[:, :kk]
        y = self.prototypes(lay.assemble(h, r, full_e))
        cand = full_e[:, :kk]
        norms = np.sqrt(np.einsum("bkd,bkd->bk", cand, cand))
        cos = np.einsum("bd,bkd->bk", y, cand) / np.where(norms > 0, norms, 1.0)
        if m is not None:
            cos[~m] = -np.inf
        return cos

    def _block_input(self, arr: np.ndarray | None, block: str, b: int) -> np.ndarray | None:
        """``h`` or ``r`` as (B, d) float32 when the selector uses ``block``, else None."""
        return block_input(self.layout_, arr, block, b)

    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        e, m = self._embeddings(batch, self.layout_.d_e)
        h, r = self._question_features(batch, features)
        kk = min(k, self.k)
        return self.score_arrays(h, r, e, m)[:, :kk]

    def select(
        self, batch: Sequence[Instance], features: QuestionFeatures | None = None, k: int = 1
    ) -> list[Selection]:
        """Top ``k`` among each instance's first K candidates (those past K are never chosen)."""
        out = super().select(batch, features, k)
        for sel in out:
            keep = [i for i, s in enumerate(sel.scores) if s != -math.inf]
            if len(keep) < len(sel.scores):
                sel.indices = [sel.indices[i] for i in keep]
                sel.candidate_ids = [sel.candidate_ids[i] for i in keep]
                sel.scores = [sel.scores[i] for i in keep]
        return out

    # --------------------------------------------------------------- save/load
    def _state_config(self) -> dict[str, Any]:
        return {
            "prototype_format": PROTOTYPE_FORMAT,
            "layout": self.layout_.to_dict(),
            "in_dim": int(self.feature_mask_.sum()),
            "out_dim": int(self.layout_.d_e),
            "generator_id": self.generator_id,
            "encoder_id": self.encoder_id,
            "n_parameters": self.model_.n_parameters(),
            "summary": getattr(self, "summary_", None),
        }

    def _save_state(self, path: Path) -> None:
        from safetensors.torch import save_file

        tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in self.model_.state_dict().items()}
        tensors["scaler.mean"] = torch.as_tensor(self.scaler_.mean_)
        tensors["scaler.scale"] = torch.as_tensor(self.scaler_.scale_)
        tensors["feature_mask"] = torch.as_tensor(self.feature_mask_.astype(np.uint8))
        if getattr(self, "importance_", None) is not None:
            tensors["importance"] = torch.as_tensor(self.importance_)
        tmp = path / (WEIGHTS + ".tmp")
        save_file(tensors, str(tmp), metadata={"format": "chunksel-prototype", "version": str(PROTOTYPE_FORMAT)})
        tmp.replace(path / WEIGHTS)

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        from safetensors.torch import load_file

        file = path / WEIGHTS
        if not file.is_file():
            raise DataError(f"corrupt checkpoint {path}: no {WEIGHTS}")
        if state.get("prototype_format") != PROTOTYPE_FORMAT:
            raise DataError(
                f"{path}: prototype format {state.get('prototype_format')!r} is not supported "
                f"(this chunksel reads {PROTOTYPE_FORMAT})"
            )
        check_safetensors_header(file)
        try:
            tensors = load_file(str(file))
        except Exception as err:  # safetensors raises its own error types
            msg = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise DataError(f"corrupt checkpoint {file}: {msg}") from None
        try:
            self.layout_ = FeatureLayout.from_dict(state["layout"])
            self.feature_mask_ = tensors["feature_mask"].numpy().astype(bool)
            self.scaler_ = StandardScaler(tensors["scaler.mean"].numpy(), tensors["scaler.scale"].numpy())
            self.importance_ = tensors["importance"].double().numpy() if "importance" in tensors else None
            model = PrototypeMLP(int(self.feature_mask_.sum()), self.layout_.d_e, self.hidden, self.depth, self.dropout)
            load_state_dict_checked(model, {k[6:]: v for k, v in tensors.items() if k.startswith("model.")}, file)
        except DataError:
            raise
        except (KeyError, RuntimeError, ValueError) as err:
            msg = str(err).splitlines()[0]
            raise DataError(f"corrupt checkpoint {file}: {msg}") from None
        if self.feature_mask_.shape != (self.layout_.dim,):
            raise DataError(
                f"corrupt checkpoint {file}: feature mask of {self.feature_mask_.shape[0]} dims "
                f"for a layout of {self.layout_.dim}"
            )
        self.model_ = model.eval()
        self.summary_ = state.get("summary")
        self._infer = None

    @classmethod
    def load(cls, path: str | Path, quantize: str | None = None, engine: str | None = None) -> PrototypeSelector:
        """Load a saved selector; ``quantize`` / ``engine`` override the saved inference settings."""
        obj = super().load(path)
        if quantize is not None:
            obj.quantize = quantize
        if engine is not None:
            obj.engine = engine
        check_engine(obj.engine, obj.quantize)
        return obj


__all__ = ["PROTOTYPE_FORMAT", "PrototypeSelector", "parse_blocks"]
