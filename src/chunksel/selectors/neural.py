"""Neural interaction baselines: K-NRM, DRMM and Local-DUET as selectors.

Text is read as all-MiniLM-L6-v2 WordPiece tokens (:mod:`chunksel.nn.vocab`): the
question cut to ``max_query_len`` = 20 word pieces, each candidate's
``title + " " + text`` cut to ``max_doc_len`` = 200. K-NRM and DRMM read their word
embeddings from MiniLM's input token-embedding table (30522 x 384). By default the table
is **frozen** (``train_embeddings=False``): with a few hundred to a few thousand
training questions per dataset, learning the 11.7M-parameter table overfitted and cost
far more time (``docs/decisions/frozen-word-embeddings.md``). Frozen, the matching inputs (kernel features,
histograms) are fixed and are computed once per fit (:mod:`chunksel.training.ranking`);
K-NRM then learns 12 parameters and DRMM 545. ``train_embeddings=True`` learns the
table as in the K-NRM paper (11,720,460 and 11,720,993 trainable parameters; the
paper's ~48M counts suggest a bigger word vocabulary). Training settings left as None
follow the regime: ``lr`` 1e-2, ``max_epochs`` 200, ``patience`` 20 with a frozen table
(a tiny head); 1e-3, 20 and 3 when the table is learned. ``embedding_init="random"`` (with
``embedding_dim``) gives a small random table instead (tests). Local-DUET uses exact
word-piece matches only, has no embeddings, and learns 1,951,201 parameters at its
defaults (20 x 200 matrix, 300 filters, 300 hidden).

Training (:mod:`chunksel.training.ranking`): the model's ranking loss over each
instance's K candidates (K-NRM and DRMM: pairwise hinge, as in their papers; DUET:
softmax cross-entropy with several positives), AdamW, early stopping on the validation
loss, seeded. Saved as ``config.json`` + ``model.safetensors`` (all weights, embedding
table included).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError, DataError, require
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.checkpoint import check_safetensors_header, load_state_dict_checked
from chunksel.types import Instance

_WEIGHTS = "model.safetensors"


class _NeuralSelector(Selector):
    """Shared tokenisation, training, scoring and save/load of the torch rankers."""

    requires_fit = True
    default_loss = "softmax"

    # ------------------------------------------------------------ subclasses
    def _build(self, init_weights: bool) -> Any:  # -> torch.nn.Module
        raise NotImplementedError

    # ------------------------------------------------------------- settings
    def _common(
        self, max_query_len: int, max_doc_len: int, loss: str | None, lr: float, weight_decay: float,
        batch_size: int, max_epochs: int, patience: int, seed: int, label: str | None, progress: bool,
    ) -> None:
        self.max_query_len = max_query_len
        self.max_doc_len = max_doc_len
        self.loss = loss
        self.lr = lr
        self.weight_decay = weight_decay
        self.batch_size = batch_size
        self.max_epochs = max_epochs
        self.patience = patience
        self.seed = seed
        self.label = label
        self.progress = progress

    def _data(self, batch: Sequence[Instance], with_labels: bool):
        from chunksel.nn.vocab import encode
        from chunksel.selectors.bm25_stats import passage_text
        from chunksel.training.ranking import RankingData

        k = max(len(i.candidates) for i in batch)
        q_ids, q_mask = encode([i.question.text for i in batch], self.max_query_len)
        texts, slots = [], []
        for b, inst in enumerate(batch):
            for j, c in enumerate(inst.candidates):
                texts.append(passage_text(c.title, c.text))
                slots.append((b, j))
        flat_ids, flat_mask = encode(texts, self.max_doc_len)
        d_ids = np.zeros((len(batch), k, self.max_doc_len), dtype=np.int64)
        d_mask = np.zeros((len(batch), k, self.max_doc_len), dtype=bool)
        cand = np.zeros((len(batch), k), dtype=bool)
        for row, (b, j) in enumerate(slots):
            d_ids[b, j] = flat_ids[row]
            d_mask[b, j] = flat_mask[row]
            cand[b, j] = True
        labels = np.zeros((len(batch), k), dtype=np.int8)
        if with_labels:
            for b, inst in enumerate(batch):
                lab = inst.labels(self.label)
                labels[b, : len(lab)] = lab
        return RankingData(q_ids, q_mask, d_ids, d_mask, cand, labels)

    # --------------------------------------------------------------- fitting
    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
    ):
        """Train on the contested ``train`` instances, early-stopping on ``val``'s loss."""
        require("torch", "train")
        import torch

        from chunksel.training.ranking import RankingTrainConfig, train_ranker

        loss = self.loss or self.default_loss
        if loss not in ("softmax", "hinge"):
            raise ConfigError(f"{self.name}: unknown loss {loss!r}; use 'softmax' or 'hinge'")
        train = [i for i in train if i.candidates]
        if not any(i.contested(self.label) for i in train):
            raise DataError(f"{self.name}: no training instance has both a positive and a negative candidate")
        torch.manual_seed(self.seed)
        self.model_ = self._build(init_weights=True)
        val_data = self._data(list(val), True) if val else None
        lr, max_epochs, patience = self._schedule()
        cfg = RankingTrainConfig(
            loss=loss, lr=lr, weight_decay=self.weight_decay, batch_size=self.batch_size,
            max_epochs=max_epochs, patience=patience, seed=self.seed, progress=self.progress,
        )
        self.history_ = train_ranker(self.model_, self._data(train, True), val_data, cfg)
        self.fitted_ = True
        return self

    def _schedule(self) -> tuple[float, int, int]:
        """(lr, max_epochs, patience), None settings filled by the regime's defaults."""
        return self.lr, self.max_epochs, self.patience

    def n_parameters(self) -> int:
        """Trainable parameters of the torch module (frozen embeddings excluded)."""
        self._check_fitted()
        return int(sum(p.numel() for p in self.model_.parameters() if p.requires_grad))

    # --------------------------------------------------------------- scoring
    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        from chunksel.training.ranking import score_ranking_data

        scores = score_ranking_data(self.model_, self._data(batch, False), self.batch_size)
        return np.where(np.isinf(scores), 0.0, scores)  # NaN stays: Selector.score refuses it

    # -------------------------------------------------------------- save/load
    def _state_config(self) -> dict[str, Any]:
        h = getattr(self, "history_", None)
        return {
            "weights": _WEIGHTS,
            "n_parameters": self.n_parameters(),
            "train_loss": list(h.train_loss) if h else [],
            "val_loss": list(h.val_loss) if h else [],
            "best_epoch": h.best_epoch if h else -1,
        }

    def _save_state(self, path: Path) -> None:
        from safetensors.torch import save_file

        state = {k: v.detach().contiguous().cpu() for k, v in self.model_.state_dict().items()}
        save_file(state, str(path / _WEIGHTS))

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        from safetensors.torch import load_file

        file = path / _WEIGHTS
        if not file.is_file():
            raise DataError(f"{path}: missing {_WEIGHTS}")
        check_safetensors_header(file)
        self.model_ = self._build(init_weights=False)
        try:
            tensors = load_file(str(file))
        except Exception as err:  # safetensors raises its own error types
            raise DataError(f"corrupt checkpoint {file}: {str(err).splitlines()[0] if str(err) else type(err).__name__}") from None
        load_state_dict_checked(self.model_, tensors, file)
        self.model_.eval()


class _EmbeddingSelector(_NeuralSelector):
    """A ranker over a word-embedding table (MiniLM-initialised or random)."""

    #: (lr, max_epochs, patience) with a frozen / a learned table
    FROZEN_SCHEDULE = (1e-2, 200, 20)
    LEARNED_SCHEDULE = (1e-3, 20, 3)

    def _schedule(self) -> tuple[float, int, int]:
        lr, epochs, patience = self.LEARNED_SCHEDULE if self.train_embeddings else self.FROZEN_SCHEDULE
        return (
            lr if self.lr is None else self.lr,
            epochs if self.max_epochs is None else self.max_epochs,
            patience if self.patience is None else self.patience,
        )

    def _table(self, init_weights: bool):
        import torch

        from chunksel.nn.vocab import load_word_embeddings, vocab_size

        if self.embedding_init == "minilm":
            dim = 384
            weights = torch.from_numpy(load_word_embeddings()) if init_weights else None
        elif self.embedding_init == "random":
            dim = self.embedding_dim
            weights = None  # nn.Embedding's N(0, 1) init, seeded in fit()
        else:
            raise ConfigError(f"{self.name}: embedding_init must be 'minilm' or 'random', got {self.embedding_init!r}")
        return vocab_size(), dim, weights


class KNRMSelector(_EmbeddingSelector):
    """K-NRM (Xiong et al. 2017) over MiniLM word-piece embeddings.

    Args:
        max_query_len, max_doc_len: word pieces kept per question / candidate (20 / 200).
        embedding_init: ``"minilm"`` (MiniLM's input token embeddings, dim 384) or
            ``"random"`` (``embedding_dim``-wide N(0, 1) table).
        embedding_dim: width of a random table.
        train_embeddings: learn the embedding table (True) or freeze it (default).
        n_kernels: RBF kernels (11).
        loss: ``"hinge"`` (default, pairwise, margin 1) or ``"softmax"``.
        lr, weight_decay, batch_size, max_epochs, patience, seed: training settings
            (None: the regime's default, see the module docstring).
        label: label spec for training (None = each instance's default).
        progress: show a progress bar while training.
    """

    name = "knrm"
    display_name = "KNRM"
    family = "neural ranking"
    role = "baseline"
    default_loss = "hinge"

    def __init__(
        self,
        max_query_len: int = 20,
        max_doc_len: int = 200,
        embedding_init: str = "minilm",
        embedding_dim: int = 384,
        train_embeddings: bool = False,
        n_kernels: int = 11,
        loss: str | None = None,
        lr: float | None = None,
        weight_decay: float = 0.0,
        batch_size: int = 32,
        max_epochs: int | None = None,
        patience: int | None = None,
        seed: int = 0,
        label: str | None = None,
        progress: bool = True,
    ) -> None:
        self._common(max_query_len, max_doc_len, loss, lr, weight_decay, batch_size, max_epochs, patience,
                     seed, label, progress)
        self.embedding_init = embedding_init
        self.embedding_dim = embedding_dim
        self.train_embeddings = train_embeddings
        self.n_kernels = n_kernels

    def _build(self, init_weights: bool):
        from chunksel.nn.knrm import KNRM

        v, dim, weights = self._table(init_weights)
        return KNRM(v, dim, weights, self.train_embeddings, self.n_kernels)


class DRMMSelector(_EmbeddingSelector):
    """DRMM (Guo et al. 2016) over MiniLM word-piece embeddings.

    Args:
        max_query_len, max_doc_len: word pieces kept per question / candidate (20 / 200).
        embedding_init, embedding_dim, train_embeddings: as for :class:`KNRMSelector`.
        n_bins: LCH histogram bins (30; the last for exact matches).
        hidden: matching-network hidden width (5).
        loss: ``"hinge"`` (default) or ``"softmax"``.
        lr, weight_decay, batch_size, max_epochs, patience, seed, label, progress: as for
            :class:`KNRMSelector`.
    """

    name = "drmm"
    display_name = "DRMM"
    family = "neural ranking"
    role = "baseline"
    default_loss = "hinge"

    def __init__(
        self,
        max_query_len: int = 20,
        max_doc_len: int = 200,
        embedding_init: str = "minilm",
        embedding_dim: int = 384,
        train_embeddings: bool = False,
        n_bins: int = 30,
        hidden: int = 5,
        loss: str | None = None,
        lr: float | None = None,
        weight_decay: float = 0.0,
        batch_size: int = 32,
        max_epochs: int | None = None,
        patience: int | None = None,
        seed: int = 0,
        label: str | None = None,
        progress: bool = True,
    ) -> None:
        self._common(max_query_len, max_doc_len, loss, lr, weight_decay, batch_size, max_epochs, patience,
                     seed, label, progress)
        self.embedding_init = embedding_init
        self.embedding_dim = embedding_dim
        self.train_embeddings = train_embeddings
        self.n_bins = n_bins
        self.hidden = hidden

    def _build(self, init_weights: bool):
        from chunksel.nn.drmm import DRMM

        v, dim, weights = self._table(init_weights)
        return DRMM(v, dim, weights, self.train_embeddings, self.n_bins, self.hidden)


class DuetSelector(_NeuralSelector):
    """Local-DUET (Mitra et al. 2017) over exact word-piece matches.

    Args:
        max_query_len, max_doc_len: the fixed interaction-matrix size (20 x 200).
        n_filters, hidden, dropout: the local model's sizes (300, 300, 0.2).
        loss: ``"softmax"`` (default) or ``"hinge"``.
        lr, weight_decay, batch_size, max_epochs, patience, seed, label, progress: as for
            :class:`KNRMSelector`.
    """

    name = "duet"
    display_name = "Local-DUET"
    family = "neural ranking"
    role = "baseline"
    default_loss = "softmax"

    def __init__(
        self,
        max_query_len: int = 20,
        max_doc_len: int = 200,
        n_filters: int = 300,
        hidden: int = 300,
        dropout: float = 0.2,
        loss: str | None = None,
        lr: float = 1e-3,
        weight_decay: float = 1e-2,
        batch_size: int = 32,
        max_epochs: int = 20,
        patience: int = 3,
        seed: int = 0,
        label: str | None = None,
        progress: bool = True,
    ) -> None:
        self._common(max_query_len, max_doc_len, loss, lr, weight_decay, batch_size, max_epochs, patience,
                     seed, label, progress)
        self.n_filters = n_filters
        self.hidden = hidden
        self.dropout = dropout

    def _build(self, init_weights: bool):
        from chunksel.nn.duet import LocalDuet

        return LocalDuet(self.max_query_len, self.max_doc_len, self.n_filters, self.hidden, self.dropout)
