"""Multi-positive contrastive loss over an instance's own retrieved candidates (Eq. 8).

For instance ``i`` with unit prototype ``y~_i``, positives ``P_i`` and negatives ``N_i``
among its real (unpadded) candidates, and cosine scores ``s_c = y~_i^T e_c``:

    L = -(1/B) sum_i log( sum_{p in P_i} exp(s_p / tau) / sum_{c in P_i u N_i} exp(s_c / tau) )

i.e. ``log-sum-exp over all real candidates - log-sum-exp over the positives``. With one
positive it is the InfoNCE / softmax cross-entropy of sentence-transformers'
``MultipleNegativesRankingLoss`` (whose ``scale`` is ``1 / tau``), but negatives are the
instance's other retrieved chunks, not in-batch samples, and any positive counts.

Reference: Eq. 8 of "Lightweight chunk selection for mobile RAG"
(``papers/chunk-selection-mobile-rag.txt``, Sec. 3.3); multi-positive form as in
Khosla et al., "Supervised Contrastive Learning" (NeurIPS 2020), L_in variant.
"""

from __future__ import annotations

import torch
from torch import nn

from chunksel.nn.prototype import cosine_scores


def multi_positive_contrastive(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    tau: float = 0.1,
    reduction: str = "mean",
) -> torch.Tensor:
    """Eq. 8 on raw (B, K) similarity scores.

    Args:
        scores: (B, K) similarities ``s_c`` (cosines in the paper).
        labels: (B, K) 0/1 (or bool); positive where >= 1.
        mask: (B, K) bool, True at real candidates (default: all real). Padded slots
            are in neither the numerator nor the denominator.
        tau: temperature (> 0).
        reduction: "mean" over instances that have a real positive, "sum", or "none"
            (per-instance losses; 0 where an instance has no real positive).

    Returns:
        The loss (scalar) or the (B,) per-instance losses. An instance with no
        positive defines no target: it contributes 0 and is left out of the mean. An
        instance whose real candidates are all positive has loss 0.
    """
    if tau <= 0:
        raise ValueError(f"tau must be > 0, got {tau}")
    if mask is None:
        mask = torch.ones_like(scores, dtype=torch.bool)
    mask = mask.bool()
    pos = (labels >= 1) & mask
    logits = scores / tau
    neg_inf = torch.finfo(logits.dtype).min
    log_all = torch.logsumexp(logits.masked_fill(~mask, neg_inf), dim=-1)
    log_pos = torch.logsumexp(logits.masked_fill(~pos, neg_inf), dim=-1)
    has_pos = pos.any(dim=-1)
    per = torch.where(has_pos, log_all - log_pos, torch.zeros_like(log_all))
    if reduction == "none":
        return per
    if reduction == "sum":
        return per.sum()
    if reduction == "mean":
        return per.sum() / has_pos.sum().clamp(min=1)
    raise ValueError(f"unknown reduction {reduction!r}")


class MultiPositiveContrastiveLoss(nn.Module):
    """Eq. 8 as a module: prototypes and candidate embeddings in, loss out.

    Args:
        tau: the temperature; ``1 / tau`` multiplies the cosines before the softmax
            (sentence-transformers calls it ``scale``). The default 0.1 (the trainer's
            ``DEFAULT_TAU``) was chosen on held-out data (see
            :mod:`chunksel.training.trainer`).
        reduction: "mean" (default), "sum" or "none".
    """

    def __init__(self, tau: float = 0.1, reduction: str = "mean") -> None:
        super().__init__()
        self.tau = tau
        self.reduction = reduction

    def forward(
        self,
        prototypes: torch.Tensor,
        embeddings: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``prototypes`` (B, d) unit vectors, ``embeddings`` (B, K, d), labels/mask (B, K)."""
        scores = cosine_scores(prototypes, embeddings)
        return multi_positive_contrastive(scores, labels, mask, self.tau, self.reduction)

    def extra_repr(self) -> str:
        return f"tau={self.tau}, reduction={self.reduction!r}"
