"""The shared part of the rankers that read a word-embedding table (K-NRM, DRMM).

:class:`WordTableRanker` owns the table (optionally initialised from given weights,
learned or frozen) and the cached-input contract of :mod:`chunksel.training.ranking`:
with a frozen table the model's matching inputs never change, so the training loop
computes them once with ``cache_inputs(q, q_mask, d, d_mask)`` and trains
``forward_cached(*cached)``; ``forward(q, q_mask, d, d_mask)`` must equal
``forward_cached(*cache_inputs(q, q_mask, d, d_mask))``.
"""

from __future__ import annotations

import torch
from torch import nn


class WordTableRanker(nn.Module):
    """Base module: an ``embedding`` table (row 0 = padding) and the caching contract.

    Args:
        vocab_size, dim: table size.
        weights: optional initial (vocab_size, dim) table (e.g. MiniLM's).
        train_embeddings: whether the table is learned.
    """

    def __init__(self, vocab_size: int, dim: int, weights: torch.Tensor | None, train_embeddings: bool) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab_size, dim, padding_idx=0)
        if weights is not None:
            with torch.no_grad():
                self.embedding.weight.copy_(weights)
        self.embedding.weight.requires_grad_(train_embeddings)

    @property
    def cacheable(self) -> bool:
        """True when the table is frozen: the matching inputs are then fixed."""
        return not self.embedding.weight.requires_grad

    def cache_inputs(
        self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        raise NotImplementedError

    def forward_cached(self, *cached: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def forward(self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor) -> torch.Tensor:
        """(N,) scores of query/document id pairs (N, Lq) / (N, Ld)."""
        return self.forward_cached(*self.cache_inputs(q, q_mask, d, d_mask))
