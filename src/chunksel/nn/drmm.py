"""DRMM: Deep Relevance Matching Model (Guo et al., CIKM 2016, "A Deep Relevance
Matching Model for Ad-hoc Retrieval").

For every query term ``q_i``:

- a **matching histogram** of the cosine similarities between ``q_i`` and all document
  terms, log-count based (LCH): ``log(1 + count)`` per bin. 30 bins: 29 equal bins over
  [-1, 1) plus one exact-match bin (the paper's ``[1, 1]`` bin; a pair counts as exact
  when the two word-piece ids are equal). The histogram is not differentiable, so it is
  computed without gradients, as in the paper;
- a **feed-forward matching network** ``z_i = tanh(W2 tanh(W1 h_i + b1) + b2)``
  (30 -> 5 -> 1, the paper's best setting);
- a **term gating network** ``g_i = softmax_i(w_g . x_i)`` over the query-term embeddings
  ``x_i`` (term-vector gating).

Score ``s(q, d) = sum_i g_i z_i``; padded query terms get no gate weight and padded
document terms no histogram count.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from chunksel.nn.table import WordTableRanker


class DRMM(WordTableRanker):
    """DRMM with LCH histograms, a 30-5-1 matching network and term-vector gating.

    Args:
        vocab_size: rows of the embedding table (row 0 = padding).
        dim: embedding width.
        weights: optional initial (vocab_size, dim) table (e.g. MiniLM's).
        train_embeddings: whether the table is learned (it receives gradients only
            through the gating network).
        n_bins: histogram bins, the last one for exact matches.
        hidden: width of the matching network's hidden layer.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        weights: torch.Tensor | None = None,
        train_embeddings: bool = True,
        n_bins: int = 30,
        hidden: int = 5,
    ) -> None:
        if n_bins < 2:
            raise ValueError("DRMM needs at least 2 histogram bins")
        super().__init__(vocab_size, dim, weights, train_embeddings)
        self.n_bins = n_bins
        self.matching = nn.Sequential(nn.Linear(n_bins, hidden), nn.Tanh(), nn.Linear(hidden, 1), nn.Tanh())
        self.gate = nn.Linear(dim, 1, bias=False)

    @torch.no_grad()
    def histograms(
        self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> torch.Tensor:
        """(N, Lq, n_bins) log-count histograms ``log(1 + count)``."""
        qe = F.normalize(self.embedding(q), dim=-1)
        de = F.normalize(self.embedding(d), dim=-1)
        sim = torch.bmm(qe, de.transpose(1, 2)).clamp(-1.0, 1.0)  # (N, Lq, Ld)
        n_soft = self.n_bins - 1
        idx = torch.floor((sim + 1.0) / 2.0 * n_soft).long().clamp(0, n_soft - 1)
        exact = q[:, :, None] == d[:, None, :]
        idx = torch.where(exact, torch.full_like(idx, n_soft), idx)
        weight = (d_mask[:, None, :] & q_mask[:, :, None]).to(qe.dtype).expand_as(sim)
        counts = torch.zeros(*sim.shape[:2], self.n_bins, dtype=qe.dtype, device=sim.device)
        counts.scatter_add_(2, idx, weight.contiguous())
        return torch.log1p(counts)

    # With a frozen table the histograms (never differentiated) are the fixed input; the
    # gate reads the query ids, so the table still learns through it when trainable.
    def cache_inputs(
        self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """Histograms (N, Lq, n_bins), the query ids and the query mask."""
        return self.histograms(q, q_mask, d, d_mask), q, q_mask

    def forward_cached(self, hist: torch.Tensor, q: torch.Tensor, q_mask: torch.Tensor) -> torch.Tensor:
        """(N,) scores from histograms (N, Lq, n_bins), query ids and the query mask."""
        z = self.matching(hist).squeeze(-1)  # (N, Lq)
        logits = self.gate(self.embedding(q)).squeeze(-1).masked_fill(~q_mask, float("-inf"))
        g = torch.softmax(logits, dim=1)
        g = torch.nan_to_num(g, nan=0.0)  # a query without any real term
        return (g * z).sum(dim=1)
