"""Training recipe of the prototype selector (paper Sec. 5.2) on plain numpy arrays.

Inputs are the selector input ``X`` (N, D) (already masked to the kept feature
blocks / budget dims), the candidates' embeddings ``E`` (N, K, d), 0/1 ``labels``
(N, K) and the real-candidate ``mask`` (N, K). The recipe:

- standard scaling of ``X`` fitted on the training split (:class:`~chunksel.nn.inputs.StandardScaler`,
  saved with the model);
- instances with no positive or no negative among their real candidates are left out
  of training and validation (Sec. 3.3), and counted in the :class:`TrainSummary`;
- AdamW (lr 8e-4, weight decay 3e-5), batch 256, OneCycleLR (cosine annealing) over
  ``max_epochs`` (150), gradient clipping at norm 1.0, Kaiming-normal init;
- early stopping on the validation loss (Eq. 8) with patience 20, restoring the best
  weights. Without a validation split, 10% of the usable training instances are carved
  out deterministically (seeded permutation).

Temperature: ``tau`` is a setting; its default :data:`DEFAULT_TAU` = 0.1 is provisional,
chosen by a small cross-validated sweep (:func:`chunksel.study.budgets.sweep_tau`) whose
differences were within noise: ``docs/decisions/prototype-tau.md``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from chunksel.config import show_progress
from chunksel.errors import DataError
from chunksel.nn.inputs import StandardScaler
from chunksel.nn.prototype import PrototypeMLP, cosine_scores
from chunksel.training.early_stopping import EarlyStopping
from chunksel.training.losses import multi_positive_contrastive

DEFAULT_TAU = 0.1


@dataclass
class TrainConfig:
    """Settings of :func:`train_prototype` (defaults = the paper's recipe)."""

    tau: float = DEFAULT_TAU  #: temperature of Eq. 8
    lr: float = 8e-4  #: AdamW peak learning rate (OneCycleLR max_lr)
    weight_decay: float = 3e-5  #: AdamW weight decay
    batch_size: int = 256  #: instances per step
    max_epochs: int = 150  #: epoch limit
    patience: int = 20  #: epochs without a better validation loss before stopping
    hidden: int = 1024  #: hidden width of the MLP
    depth: int = 3  #: hidden layers of the MLP
    dropout: float = 0.05  #: dropout after each hidden layer
    grad_clip: float = 1.0  #: max gradient norm
    val_fraction: float = 0.1  #: carved from train when no validation split is given
    seed: int = 0  #: seeds torch and numpy (init, shuffling, carving)
    device: str = "cpu"  #: torch device
    progress: bool = True  #: tqdm bar over epochs


@dataclass
class TrainSummary:
    """What happened during training (returned with the model)."""

    n_train: int = 0  #: usable training instances
    n_val: int = 0  #: usable validation instances
    dropped_no_positive: int = 0  #: train+val instances left out: no positive candidate
    dropped_no_negative: int = 0  #: train+val instances left out: no negative candidate
    val_carved: bool = False  #: validation carved from train
    epochs_run: int = 0
    best_epoch: int = 0
    best_val_loss: float = math.inf
    train_loss: list[float] = field(default_factory=list)
    val_loss: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def usable(labels: np.ndarray, mask: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(keep, no_positive, no_negative) boolean (N,) arrays over real candidates."""
    lab = (np.asarray(labels) >= 1) & mask
    has_pos = lab.any(axis=1)
    has_neg = (~lab & mask).any(axis=1)
    return has_pos & has_neg, ~has_pos, has_pos & ~has_neg


def seed_everything(seed: int) -> None:
    """Seed torch and numpy's legacy global generator."""
    torch.manual_seed(seed)
    np.random.seed(seed % (2**32))


def _tensors(x, e, y, m, device) -> tuple[torch.Tensor, ...]:
    return (
        torch.as_tensor(np.ascontiguousarray(x), dtype=torch.float32, device=device),
        torch.as_tensor(np.ascontiguousarray(e), dtype=torch.float32, device=device),
        torch.as_tensor(np.asarray(y) >= 1, device=device),
        torch.as_tensor(np.asarray(m, dtype=bool), device=device),
    )


def _batches(n: int, batch_size: int, gen: torch.Generator | None) -> list[torch.Tensor]:
    """Index batches; a trailing batch of one (BatchNorm cannot train on it) joins the previous."""
    order = torch.randperm(n, generator=gen) if gen is not None else torch.arange(n)
    out = list(order.split(batch_size))
    if len(out) > 1 and len(out[-1]) == 1:
        last = out.pop()
        out[-1] = torch.cat([out[-1], last])
    return out


@torch.no_grad()
def evaluate_loss(
    model: torch.nn.Module, tensors: tuple[torch.Tensor, ...], tau: float, batch_size: int = 4096
) -> float:
    """Mean Eq. 8 loss of ``model`` (eval mode) over scaled tensors (x, e, labels, mask)."""
    model.eval()
    x, e, y, m = tensors
    total, count = 0.0, 0
    for idx in _batches(x.shape[0], batch_size, None):
        per = multi_positive_contrastive(cosine_scores(model(x[idx]), e[idx]), y[idx], m[idx], tau, "none")
        total += float(per.sum())
        count += len(idx)
    return total / max(count, 1)


def train_prototype(
    x_train: np.ndarray,
    e_train: np.ndarray,
    y_train: np.ndarray,
    m_train: np.ndarray,
    x_val: np.ndarray | None = None,
    e_val: np.ndarray | None = None,
    y_val: np.ndarray | None = None,
    m_val: np.ndarray | None = None,
    config: TrainConfig | None = None,
    scaler: StandardScaler | None = None,
) -> tuple[PrototypeMLP, StandardScaler, TrainSummary]:
    """Train a :class:`PrototypeMLP` with Eq. 8 by the paper's recipe.

    Args:
        x_train: (N, D) selector input (unscaled).
        e_train: (N, K, d) candidate embeddings (zeros at padded slots).
        y_train: (N, K) 0/1 labels.
        m_train: (N, K) bool, True at real candidates.
        x_val, e_val, y_val, m_val: the validation split (all or none); if absent or
            without a usable instance, ``config.val_fraction`` of train is carved out.
        config: the recipe (:class:`TrainConfig`).
        scaler: a fitted scaler to reuse (e.g. the full model's for a budget retrain);
            default: fit one on the usable training rows.

    Returns:
        ``(model, scaler, summary)``: the best-validation-loss model in eval mode, on
        CPU; the scaler; the :class:`TrainSummary`.
    """
    cfg = config or TrainConfig()
    seed_everything(cfg.seed)
    summary = TrainSummary()
    keep, no_pos, no_neg = usable(y_train, m_train)
    summary.dropped_no_positive += int(no_pos.sum())
    summary.dropped_no_negative += int(no_neg.sum())
    tr = np.flatnonzero(keep)
    va_arrays = None
    if x_val is not None and len(x_val):
        vkeep, vno_pos, vno_neg = usable(y_val, m_val)
        summary.dropped_no_positive += int(vno_pos.sum())
        summary.dropped_no_negative += int(vno_neg.sum())
        if vkeep.any():
            vi = np.flatnonzero(vkeep)
            va_arrays = (x_val[vi], e_val[vi], y_val[vi], m_val[vi])
    if va_arrays is None:
        rng = np.random.default_rng(cfg.seed)
        perm = rng.permutation(tr)
        n_val = max(1, int(round(cfg.val_fraction * len(perm)))) if len(perm) >= 4 else 0
        vi, tr = np.sort(perm[:n_val]), np.sort(perm[n_val:])
        va_arrays = (x_train[vi], e_train[vi], y_train[vi], m_train[vi])
        summary.val_carved = True
    if len(tr) < 2:
        raise DataError(
            f"only {len(tr)} training instance(s) have both a positive and a negative candidate; "
            "the prototype selector needs at least 2"
        )
    if scaler is None:
        scaler = StandardScaler().fit(x_train[tr])
    summary.n_train, summary.n_val = len(tr), len(va_arrays[0])

    device = torch.device(cfg.device)
    train_t = _tensors(scaler.transform(x_train[tr]), e_train[tr], y_train[tr], m_train[tr], device)
    val_t = _tensors(scaler.transform(va_arrays[0]), *va_arrays[1:], device) if summary.n_val else None

    model = PrototypeMLP(train_t[0].shape[1], train_t[1].shape[2], cfg.hidden, cfg.depth, cfg.dropout).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed)
    steps = len(_batches(summary.n_train, cfg.batch_size, None))
    sched = torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=cfg.lr, total_steps=steps * cfg.max_epochs, anneal_strategy="cos"
    )
    stopper = EarlyStopping(model, cfg.patience, min_delta=1e-7)
    bar = tqdm(range(cfg.max_epochs), desc="prototype", unit="epoch", disable=not show_progress(cfg.progress), leave=False)
    for epoch in bar:
        model.train()
        tot, cnt = 0.0, 0
        for idx in _batches(summary.n_train, cfg.batch_size, gen):
            x, e, y, m = (t[idx.to(device)] for t in train_t)
            loss = multi_positive_contrastive(cosine_scores(model(x), e), y, m, cfg.tau)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            tot += loss.item() * len(idx)
            cnt += len(idx)
        summary.train_loss.append(tot / cnt)
        vloss = evaluate_loss(model, val_t, cfg.tau) if val_t is not None else summary.train_loss[-1]
        summary.val_loss.append(vloss)
        summary.epochs_run = epoch + 1
        stop = stopper.step(vloss, epoch + 1)
        bar.set_postfix(train=f"{summary.train_loss[-1]:.4f}", val=f"{vloss:.4f}")
        if stop:
            break
    bar.close()
    summary.best_val_loss, summary.best_epoch = stopper.best, stopper.best_epoch or 0
    stopper.restore()
    return model.cpu().eval(), scaler, summary
