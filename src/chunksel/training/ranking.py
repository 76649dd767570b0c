"""The shared training loop of the neural interaction rankers (KNRM, DRMM, Local-DUET).

A ranker is a torch module ``model(q, q_mask, d, d_mask) -> (N,)`` scoring query /
document token-id pairs. Data come as padded numpy arrays (:class:`RankingData`), one row
per instance with its K candidates; the loop expands each query over its candidates.

Losses over an instance's real candidates (``s`` scores, ``P`` positives, ``N``
negatives):

- ``"softmax"``: listwise softmax cross-entropy with several positives,
  ``L = -log( sum_{p in P} exp(s_p) / sum_{j} exp(s_j) )`` (as in DUET's training on one
  clicked document among sampled negatives, Mitra et al. 2017);
- ``"hinge"``: pairwise hinge ``L = mean_{p in P, n in N} max(0, margin - s_p + s_n)``
  (the loss of K-NRM, Xiong et al. 2017, and DRMM, Guo et al. 2016).

Training uses AdamW, gradient-norm clipping, shuffled mini-batches from a seeded
generator, and early stopping on the validation loss with a patience (on the training
loss when no validation instance is contested); the best state is restored. Instances
without a positive or without a negative candidate are dropped from training and
validation. A model whose learned part only sees fixed inputs (``model.cacheable``: K-NRM
and DRMM with a frozen embedding table) has them computed once
(``model.cache_inputs``) and trains ``model.forward_cached`` on them: the same model
and the same updates, without recomputing the frozen part every epoch.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from chunksel.config import show_progress
from chunksel.training.early_stopping import EarlyStopping


@dataclass
class RankingData:
    """Padded token ids of N instances with K candidates.

    Attributes:
        q_ids, q_mask: (N, Lq) int64 ids / bool mask of the questions.
        d_ids, d_mask: (N, K, Ld) int64 ids / bool mask of the candidates.
        cand_mask: (N, K) bool, True at real candidates.
        labels: (N, K) 0/1 labels (zeros when unknown, e.g. at test time).
    """

    q_ids: np.ndarray
    q_mask: np.ndarray
    d_ids: np.ndarray
    d_mask: np.ndarray
    cand_mask: np.ndarray
    labels: np.ndarray

    def __len__(self) -> int:
        return int(self.q_ids.shape[0])

    def subset(self, rows: np.ndarray) -> RankingData:
        return RankingData(
            self.q_ids[rows], self.q_mask[rows], self.d_ids[rows], self.d_mask[rows],
            self.cand_mask[rows], self.labels[rows],
        )

    def contested(self) -> RankingData:
        """Only the instances with at least one positive and one negative candidate."""
        pos = ((self.labels > 0) & self.cand_mask).any(axis=1)
        neg = ((self.labels <= 0) & self.cand_mask).any(axis=1)
        return self.subset(np.flatnonzero(pos & neg))


@dataclass
class RankingTrainConfig:
    """Settings of :func:`train_ranker`.

    Attributes:
        loss: ``"softmax"`` or ``"hinge"`` (see the module docstring).
        margin: hinge margin.
        lr, weight_decay: AdamW settings.
        batch_size: instances per step (each brings its K candidates).
        max_epochs: epoch cap.
        patience: epochs without a validation-loss improvement before stopping.
        grad_clip: max gradient L2 norm (0 = off).
        seed: seeds torch and the batch shuffling.
        progress: show a tqdm bar over epochs.
        cache_inputs: compute a cacheable model's fixed inputs once (see the module
            docstring); False recomputes them every step (same result, slower).
    """

    loss: str = "softmax"
    margin: float = 1.0
    lr: float = 1e-3
    weight_decay: float = 1e-2
    batch_size: int = 32
    max_epochs: int = 30
    patience: int = 5
    grad_clip: float = 1.0
    seed: int = 0
    progress: bool = True
    cache_inputs: bool = True


@dataclass
class TrainHistory:
    """Per-epoch mean losses and the epoch whose weights were kept (0-based)."""

    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)
    best_epoch: int = -1


def softmax_ranking_loss(scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean over instances of ``-log(sum_pos exp(s) / sum_real exp(s))``.

    Args:
        scores: (B, K) float; labels: (B, K) 0/1; mask: (B, K) bool real candidates.
    """
    neg_inf = torch.finfo(scores.dtype).min
    s = scores.masked_fill(~mask, neg_inf)
    pos = s.masked_fill(~(labels.bool() & mask), neg_inf)
    return (torch.logsumexp(s, dim=1) - torch.logsumexp(pos, dim=1)).mean()


def pairwise_hinge_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, margin: float = 1.0
) -> torch.Tensor:
    """Mean over all (positive, negative) pairs of ``max(0, margin - s_pos + s_neg)``."""
    pos = labels.bool() & mask
    neg = ~labels.bool() & mask
    pairs = pos[:, :, None] & neg[:, None, :]  # (B, K, K) pos i, neg j
    diff = margin - scores[:, :, None] + scores[:, None, :]
    losses = torch.clamp(diff, min=0.0)[pairs]
    if losses.numel() == 0:
        return scores.sum() * 0.0
    return losses.mean()


def ranking_loss(
    name: str, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, margin: float = 1.0
) -> torch.Tensor:
    """Dispatch to :func:`softmax_ranking_loss` or :func:`pairwise_hinge_loss`."""
    if name == "softmax":
        return softmax_ranking_loss(scores, labels, mask)
    if name == "hinge":
        return pairwise_hinge_loss(scores, labels, mask, margin)
    raise ValueError(f"unknown ranking loss {name!r}; use 'softmax' or 'hinge'")


def _tensors(
    data: RankingData, rows: np.ndarray, device: torch.device, trim: bool = True, trim_query: bool = True
) -> tuple[torch.Tensor, ...]:
    """Torch tensors of ``rows``; with ``trim``, the query/document axes are cut to the
    longest real text of these rows (exact: padded positions are masked anyway);
    ``trim_query=False`` keeps the query axis whole."""
    q_mask, d_mask = data.q_mask[rows], data.d_mask[rows]
    lq = max(int(q_mask.sum(axis=1).max(initial=0)), 1) if trim and trim_query else q_mask.shape[1]
    ld = max(int(d_mask.sum(axis=2).max(initial=0)), 1) if trim else d_mask.shape[2]
    return (
        torch.from_numpy(np.ascontiguousarray(data.q_ids[rows][:, :lq])).to(device),
        torch.from_numpy(np.ascontiguousarray(q_mask[:, :lq])).to(device),
        torch.from_numpy(np.ascontiguousarray(data.d_ids[rows][:, :, :ld])).to(device),
        torch.from_numpy(np.ascontiguousarray(d_mask[:, :, :ld])).to(device),
        torch.from_numpy(data.cand_mask[rows]).to(device),
        torch.from_numpy(data.labels[rows].astype(np.int64)).to(device),
    )


def _trim(model: nn.Module) -> bool:
    # position-aware models (Local-DUET) need their fixed input lengths
    return not getattr(model, "fixed_lengths", False)


def flat_pairs(
    q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Each question (B, Lq) repeated for its K candidates (B, K, Ld): four (B*K, .) tensors."""
    b, k, ld = d.shape
    lq = q.shape[1]
    return (
        q[:, None, :].expand(b, k, lq).reshape(b * k, lq),
        q_mask[:, None, :].expand(b, k, lq).reshape(b * k, lq),
        d.reshape(b * k, ld),
        d_mask.reshape(b * k, ld),
    )


def score_pairs(
    model: nn.Module, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
) -> torch.Tensor:
    """(B, K) scores: each question (B, Lq) against its K candidates (B, K, Ld)."""
    return model(*flat_pairs(q, q_mask, d, d_mask)).reshape(d.shape[:2])


@torch.no_grad()
def score_ranking_data(model: nn.Module, data: RankingData, batch_size: int = 64) -> np.ndarray:
    """(N, K) float64 scores in eval mode; padded candidates get ``-inf``."""
    model.eval()
    device = next(model.parameters()).device
    out = np.full(data.cand_mask.shape, -np.inf)
    for start in range(0, len(data), batch_size):
        rows = np.arange(start, min(start + batch_size, len(data)))
        q, qm, d, dm, cm, _ = _tensors(data, rows, device, _trim(model))
        s = score_pairs(model, q, qm, d, dm).double().cpu().numpy()
        out[rows] = np.where(cm.cpu().numpy(), s, -np.inf)
    return out


@torch.no_grad()
def _mean_loss(model: nn.Module, data: RankingData, cfg: RankingTrainConfig, batch_loss, cache) -> float:
    model.eval()
    total, n = 0.0, 0
    for start in range(0, len(data), cfg.batch_size):
        rows = np.arange(start, min(start + cfg.batch_size, len(data)))
        loss = batch_loss(data, cache, rows)
        total += float(loss) * len(rows)
        n += len(rows)
    return total / max(n, 1)


def _cached(model: nn.Module) -> bool:
    return bool(getattr(model, "cacheable", False))


class _Cache:
    """A cacheable model's fixed inputs of every (instance, candidate) pair.

    Each tensor is (N, K, ...): computed once with :meth:`cache_inputs` (batched, query
    axis kept whole so the rows line up), then indexed by instance rows.
    """

    def __init__(self, model: nn.Module, data: RankingData, batch_size: int) -> None:
        device = next(model.parameters()).device
        parts: list[list[torch.Tensor]] = []
        for start in range(0, len(data), batch_size):
            rows = np.arange(start, min(start + batch_size, len(data)))
            q, qm, d, dm, _, _ = _tensors(data, rows, device, trim=True, trim_query=False)
            b, k = d.shape[:2]
            with torch.no_grad():
                out = model.cache_inputs(*flat_pairs(q, qm, d, dm))
            for i, t in enumerate(out):
                if len(parts) <= i:
                    parts.append([])
                parts[i].append(t.reshape(b, k, *t.shape[1:]))
        self.tensors = [torch.cat(p) for p in parts]
        self.cand_mask = torch.from_numpy(data.cand_mask).to(device)
        self.labels = torch.from_numpy(data.labels.astype(np.int64)).to(device)

    def scores(self, model: nn.Module, rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        idx = torch.from_numpy(np.asarray(rows))
        ts = [t[idx] for t in self.tensors]
        b, k = ts[0].shape[:2]
        s = model.forward_cached(*[t.reshape(b * k, *t.shape[2:]) for t in ts]).reshape(b, k)
        return s, self.cand_mask[idx], self.labels[idx]


def train_ranker(
    model: nn.Module,
    train: RankingData,
    val: RankingData | None,
    cfg: RankingTrainConfig,
) -> TrainHistory:
    """Train ``model`` in place; returns the loss history.

    Raises:
        ValueError: when no training instance has both a positive and a negative.
    """
    train = train.contested()
    if len(train) == 0:
        raise ValueError("no training instance has both a positive and a negative candidate")
    val = val.contested() if val is not None else None
    if val is not None and len(val) == 0:
        val = None
    torch.manual_seed(cfg.seed)
    gen = np.random.default_rng(cfg.seed)
    device = next(model.parameters()).device
    # a model whose learned part sees fixed inputs (frozen embeddings) computes them once
    cache = _Cache(model, train, cfg.batch_size) if cfg.cache_inputs and _cached(model) else None
    val_cache = _Cache(model, val, cfg.batch_size) if cache is not None and val is not None else None

    def batch_loss(data: RankingData, c: _Cache | None, rows: np.ndarray) -> torch.Tensor:
        if c is not None:
            s, cm, y = c.scores(model, rows)
        else:
            q, qm, d, dm, cm, y = _tensors(data, rows, device, _trim(model))
            s = score_pairs(model, q, qm, d, dm)
        return ranking_loss(cfg.loss, s, y, cm, cfg.margin)

    params = [p for p in model.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    hist = TrainHistory()
    stopper = EarlyStopping(model, cfg.patience, min_delta=1e-6, keep_initial=False)
    from tqdm.auto import tqdm

    bar = tqdm(range(cfg.max_epochs), desc=f"train {type(model).__name__}", disable=not show_progress(cfg.progress))
    for epoch in bar:
        model.train()
        order = gen.permutation(len(train))
        total = 0.0
        for start in range(0, len(order), cfg.batch_size):
            rows = order[start : start + cfg.batch_size]
            loss = batch_loss(train, cache, rows)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if cfg.grad_clip > 0:
                nn.utils.clip_grad_norm_(params, cfg.grad_clip)
            opt.step()
            total += float(loss.detach()) * len(rows)
        hist.train_loss.append(total / len(order))
        monitored = _mean_loss(model, val, cfg, batch_loss, val_cache) if val is not None else hist.train_loss[-1]
        if val is not None:
            hist.val_loss.append(monitored)
        bar.set_postfix(train=f"{hist.train_loss[-1]:.4f}", val=f"{monitored:.4f}" if val is not None else "-")
        if stopper.step(monitored, epoch):
            break
    if stopper.best_epoch is not None:
        hist.best_epoch = stopper.best_epoch
    stopper.restore()
    model.eval()
    return hist
