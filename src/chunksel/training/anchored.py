"""Training of the retrieval-anchored scorer (:mod:`chunksel.nn.anchored`) on numpy arrays.

Inputs: question embeddings ``q`` (N, d), candidate embeddings ``e`` (N, K, d), the
scaled question-side input ``x`` (N, D) or None, the scaled interaction features ``phi``
(N, K, F) or None, 0/1 ``labels`` (N, K) and the real-candidate ``mask`` (N, K).

- Loss: the multi-positive contrastive loss (Eq. 8 of the paper, ``tau = 1`` on the
  scorer's logits) over training instances with at least one positive and one negative.
- AdamW, cosine learning-rate decay over ``max_epochs``, gradient clipping at 1.0.
- **Model selection on validation** (``select_on``): ``"accuracy"`` keeps the epoch with
  the best rank-1 accuracy over answerable validation instances (ties by retrieval rank,
  as the benchmark measures; the validation loss breaks ties); ``"loss"`` keeps the
  epoch with the lowest validation loss *among those whose validation rank-1 is not
  below the untrained scorer's*. Either way the untrained scorer (epoch 0) is a
  candidate: it ranks exactly as retrieval order, so the returned model is never worse
  than retrieval order on validation. Training stops after ``patience`` epochs without
  a better candidate.
- Without a validation split, ``val_fraction`` of the training instances is carved out.
- **Ensembles** (:func:`train_anchored_ensemble`): ``members`` scorers trained from seeds
  ``seed * members + j`` on the same split, their logits averaged
  (:class:`~chunksel.nn.anchored.AnchoredEnsemble`). Each member is selected as above;
  the ensemble is then checked on the same validation instances and replaced by the
  untrained scorer if it ranks below retrieval order there, so the guarantee holds for
  the ensemble too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from chunksel.config import show_progress
from chunksel.errors import DataError
from chunksel.nn.anchored import AnchoredEnsemble, AnchoredScorer
from chunksel.training.early_stopping import EarlyStopping
from chunksel.training.losses import multi_positive_contrastive
from chunksel.training.trainer import seed_everything, usable


@dataclass
class AnchoredTrainConfig:
    """Settings of :func:`train_anchored`."""

    hidden: int = 64  #: width of the prototype MLP g
    depth: int = 2  #: hidden layers of g
    phi_hidden: int = 64  #: width of the interaction MLP u
    phi_depth: int = 2  #: hidden layers of u
    dropout: float = 0.3  #: dropout after each hidden layer
    tau: float = 0.1  #: temperature of the prototype term
    lr: float = 1e-3  #: AdamW peak learning rate
    weight_decay: float = 1e-2  #: AdamW weight decay
    batch_size: int = 128  #: instances per step
    max_epochs: int = 60  #: epoch limit
    patience: int = 12  #: epochs without a better validation candidate before stopping
    select_on: str = "loss"  #: model selection: "loss" (guarded, see above) or "accuracy"
    grad_clip: float = 1.0  #: max gradient norm
    val_fraction: float = 0.1  #: carved from train when no validation split is given
    seed: int = 0  #: seeds init, shuffling and carving
    device: str = "cpu"  #: torch device
    progress: bool = True  #: tqdm bar over epochs


@dataclass
class AnchoredSummary:
    """What happened during training."""

    n_train: int = 0  #: usable (contested) training instances
    n_val: int = 0  #: answerable validation instances
    val_carved: bool = False
    epochs_run: int = 0
    best_epoch: int = 0  #: 0 = the untrained scorer (retrieval order) was kept
    val_acc_retrieval: float = 0.0  #: validation rank-1 of retrieval order (epoch 0)
    best_val_acc: float = 0.0
    train_loss: list[float] = field(default_factory=list)
    val_acc: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class AnchoredArrays:
    """The arrays of a set of instances, as torch tensors (``x`` / ``phi`` may be None)."""

    def __init__(self, q, e, x, phi, y, m, device: str = "cpu") -> None:
        def t(a, dtype=torch.float32):
            return None if a is None else torch.as_tensor(np.ascontiguousarray(a), dtype=dtype, device=device)

        self.q, self.e, self.x, self.phi = t(q), t(e), t(x), t(phi)
        self.y = t(np.asarray(y) >= 1, torch.bool)
        self.m = t(np.asarray(m, dtype=bool), torch.bool)

    def __len__(self) -> int:
        return int(self.q.shape[0])

    def take(self, idx: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        return tuple(None if a is None else a[idx] for a in (self.q, self.e, self.x, self.phi, self.y, self.m))


def _logits(model: AnchoredScorer, q, e, x, phi, m) -> torch.Tensor:
    s = model(q, e, x, phi)
    return s.masked_fill(~m, float("-inf"))


@torch.no_grad()
def rank1_hits(model: AnchoredScorer, data: AnchoredArrays, batch_size: int = 4096) -> np.ndarray:
    """Per-instance rank-1 hit (top score positive; ties to the better retrieval rank)."""
    model.eval()
    out = []
    for start in range(0, len(data), batch_size):
        idx = torch.arange(start, min(start + batch_size, len(data)))
        q, e, x, phi, y, m = data.take(idx)
        s = _logits(model, q, e, x, phi, m)
        top = torch.argmax(s, dim=1)  # argmax returns the first maximum: the better rank
        out.append(y[torch.arange(len(idx)), top].cpu().numpy())
    return np.concatenate(out) if out else np.zeros(0, dtype=bool)


@torch.no_grad()
def mean_loss(model: AnchoredScorer, data: AnchoredArrays, batch_size: int = 4096) -> float:
    model.eval()
    total, count = 0.0, 0
    for start in range(0, len(data), batch_size):
        idx = torch.arange(start, min(start + batch_size, len(data)))
        q, e, x, phi, y, m = data.take(idx)
        per = multi_positive_contrastive(_logits(model, q, e, x, phi, m).nan_to_num(neginf=-1e9), y, m, 1.0, "none")
        total += float(per.sum())
        count += len(idx)
    return total / max(count, 1)


def _answerable(val: dict[str, np.ndarray | None] | None) -> np.ndarray:
    """Rows of ``val`` with a positive among their real candidates (none without ``val``)."""
    if val is None or not len(val["y"]):
        return np.zeros(0, dtype=np.int64)
    vy = (np.asarray(val["y"]) >= 1) & np.asarray(val["m"], dtype=bool)
    return np.flatnonzero(vy.any(axis=1))


def _carve(rows: np.ndarray, cfg: AnchoredTrainConfig) -> tuple[np.ndarray, np.ndarray]:
    """``(val_rows, train_rows)``: ``cfg.val_fraction`` of ``rows`` (seeded) carved out."""
    perm = np.random.default_rng(cfg.seed).permutation(rows)
    n_val = max(1, int(round(cfg.val_fraction * len(perm)))) if len(perm) >= 4 else 0
    return np.sort(perm[:n_val]), np.sort(perm[n_val:])


def _rows(src: dict[str, np.ndarray | None], rows: np.ndarray) -> dict[str, np.ndarray | None]:
    return {k: None if v is None else v[rows] for k, v in src.items()}


def _subset(src: dict[str, np.ndarray | None], rows: np.ndarray, device: str = "cpu") -> AnchoredArrays:
    part = _rows(src, rows)
    return AnchoredArrays(*(part[k] for k in ("q", "e", "x", "phi", "y", "m")), device=device)


def train_anchored(
    train: dict[str, np.ndarray | None],
    val: dict[str, np.ndarray | None] | None,
    config: AnchoredTrainConfig | None = None,
) -> tuple[AnchoredScorer, AnchoredSummary]:
    """Train an :class:`AnchoredScorer`; see the module docstring.

    Args:
        train, val: dicts with ``q``, ``e``, ``x`` (or None), ``phi`` (or None), ``y``, ``m``
            (already scaled). ``val`` may be None (then it is carved from ``train``).
        config: the recipe.

    Returns:
        ``(model, summary)``: the selected model in eval mode on CPU, and the summary.
    """
    cfg = config or AnchoredTrainConfig()
    if cfg.select_on not in ("accuracy", "loss"):
        raise ValueError(f"select_on must be 'accuracy' or 'loss', got {cfg.select_on!r}")
    seed_everything(cfg.seed)
    summary = AnchoredSummary()
    keep, _, _ = usable(train["y"], train["m"])
    tr = np.flatnonzero(keep)
    vi, vsrc = _answerable(val), val
    if len(vi) == 0:
        vi, tr = _carve(tr, cfg)
        vsrc = train
        summary.val_carved = True
    if len(tr) < 2:
        raise DataError(
            f"only {len(tr)} training instance(s) have both a positive and a negative candidate; "
            "the anchored selector needs at least 2"
        )
    tdata, vdata = _subset(train, tr, cfg.device), _subset(vsrc, vi, cfg.device)
    summary.n_train, summary.n_val = len(tdata), len(vdata)
    x_dim = 0 if tdata.x is None else int(tdata.x.shape[1])
    phi_dim = 0 if tdata.phi is None else int(tdata.phi.shape[2])
    model = AnchoredScorer(
        x_dim, phi_dim, int(tdata.e.shape[2]), cfg.hidden, cfg.depth,
        cfg.phi_hidden, cfg.phi_depth, cfg.dropout, cfg.tau,
    ).to(cfg.device)

    def criterion() -> tuple[float, float]:
        acc = float(rank1_hits(model, vdata).mean()) if len(vdata) else 0.0
        return acc, mean_loss(model, vdata) if len(vdata) else 0.0

    best_acc, best_loss = criterion()
    summary.val_acc_retrieval = best_acc
    summary.val_acc.append(best_acc)
    stopper = EarlyStopping(model, cfg.patience)  # the untrained scorer (retrieval order) counts
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    steps_per_epoch = math.ceil(len(tdata) / cfg.batch_size)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max(1, steps_per_epoch * cfg.max_epochs))
    gen = torch.Generator().manual_seed(cfg.seed)
    bar = tqdm(range(cfg.max_epochs), desc="anchored", unit="epoch", disable=not show_progress(cfg.progress),
               leave=False)
    for epoch in bar:
        model.train()
        tot = 0.0
        for idx in torch.randperm(len(tdata), generator=gen).split(cfg.batch_size):
            q, e, x, phi, y, m = tdata.take(idx)
            loss = multi_positive_contrastive(model(q, e, x, phi), y, m, 1.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            opt.step()
            sched.step()
            tot += float(loss.detach()) * len(idx)
        summary.train_loss.append(tot / len(tdata))
        acc, vloss = criterion()
        summary.val_acc.append(acc)
        summary.epochs_run = epoch + 1
        if cfg.select_on == "loss":
            better = acc >= summary.val_acc_retrieval - 1e-12 and vloss < best_loss - 1e-7
        else:
            better = acc > best_acc + 1e-12 or (abs(acc - best_acc) <= 1e-12 and vloss < best_loss - 1e-7)
        if better:
            best_acc, best_loss = acc, vloss
        stop = stopper.update(better, epoch + 1)
        bar.set_postfix(loss=f"{summary.train_loss[-1]:.4f}", val_acc=f"{acc:.3f}")
        if stop:
            break
    bar.close()
    summary.best_val_acc, summary.best_epoch = best_acc, stopper.best_epoch or 0
    stopper.restore()
    return model.cpu().eval(), summary


def train_anchored_ensemble(
    train: dict[str, np.ndarray | None],
    val: dict[str, np.ndarray | None] | None,
    config: AnchoredTrainConfig | None = None,
    members: int = 1,
) -> tuple[AnchoredScorer | AnchoredEnsemble, dict[str, Any]]:
    """Train ``members`` scorers (seeds ``seed * members + j``) and average them; see the
    module docstring. One member is exactly :func:`train_anchored`.

    Returns:
        ``(model, summary)``: the scorer (one member) or the :class:`AnchoredEnsemble`, and
        a summary dict: the first member's, plus ``members``, ``member_best_epoch`` and
        ``member_val_acc``; ``best_val_acc`` is the ensemble's and ``best_epoch`` the
        largest member's (0 when every member, or the guard, kept retrieval order).
    """
    cfg = config or AnchoredTrainConfig()
    if int(members) < 1:
        raise ValueError(f"members must be >= 1, got {members}")
    if members == 1:
        model, summary = train_anchored(train, val, cfg)
        out = summary.to_dict()
        out.update(members=1, member_best_epoch=[summary.best_epoch], member_val_acc=[summary.best_val_acc])
        return model, out
    carved = False
    if not len(_answerable(val)):  # carve once, so every member (and the guard) sees the same rows
        keep, _, _ = usable(train["y"], train["m"])
        vrows, _ = _carve(np.flatnonzero(keep), cfg)
        if len(vrows):
            rest = np.setdiff1d(np.arange(len(train["y"])), vrows)
            val, train, carved = _rows(train, vrows), _rows(train, rest), True
    models, sums = [], []
    for j in range(members):
        model, summary = train_anchored(train, val, replace(cfg, seed=cfg.seed * members + j))
        models.append(model)
        sums.append(summary)
    ens = AnchoredEnsemble(models).eval()
    out = sums[0].to_dict()
    out.update(members=members, val_carved=sums[0].val_carved or carved,
               member_best_epoch=[s.best_epoch for s in sums], member_val_acc=[s.best_val_acc for s in sums],
               best_epoch=max(s.best_epoch for s in sums))
    if val is not None:
        vdata = _subset(val, _answerable(val))
        acc = float(rank1_hits(ens, vdata).mean()) if len(vdata) else 0.0
        out["best_val_acc"] = acc
        if acc < sums[0].val_acc_retrieval - 1e-12:  # the guard: never below retrieval order
            seed_everything(cfg.seed)
            first = models[0]
            ens = AnchoredEnsemble([AnchoredScorer(
                first.x_dim, first.phi_dim, first.emb_dim, cfg.hidden, cfg.depth,
                cfg.phi_hidden, cfg.phi_depth, cfg.dropout, cfg.tau)]).eval()
            out.update(best_epoch=0, best_val_acc=sums[0].val_acc_retrieval, guard_fallback=True)
    return ens, out
