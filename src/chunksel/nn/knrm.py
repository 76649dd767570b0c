"""K-NRM: kernel-based neural ranking (Xiong et al., SIGIR 2017, "End-to-End Neural
Ad-hoc Ranking with Kernel Pooling").

For query word embeddings ``q_i`` and document word embeddings ``d_j``:

- translation matrix ``M_ij = cos(q_i, d_j)``;
- kernel pooling, K = 11 RBF kernels
  ``K_k(M_i) = sum_j exp(-(M_ij - mu_k)^2 / (2 sigma_k^2))`` with ``mu = 1.0`` (exact
  match, ``sigma = 1e-3``) and ``mu = 0.9, 0.7, ..., -0.9`` (``sigma = 0.1``);
- log-sum soft-TF features ``phi_k = sum_i log K_k(M_i)`` (soft-TF clamped at 1e-10 and
  scaled by 0.01, as in the authors' code, so the initial scores are not saturated);
- score ``f(q, d) = tanh(w . phi + b)``.

Padded query terms are left out of the sum over ``i``, padded document terms out of
the sum over ``j``.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from chunksel.nn.table import WordTableRanker


def kernel_mus(n_kernels: int = 11) -> list[float]:
    """Kernel centres: 1.0 (exact match), then evenly from 0.9 down to -0.9."""
    if n_kernels < 2:
        raise ValueError("K-NRM needs at least 2 kernels")
    step = 2.0 / (n_kernels - 1)
    return [1.0] + [1.0 - step / 2 - i * step for i in range(n_kernels - 1)]


class KNRM(WordTableRanker):
    """K-NRM over a (trainable or frozen) word-embedding table.

    Args:
        vocab_size: rows of the embedding table (row 0 = padding).
        dim: embedding width.
        weights: optional initial (vocab_size, dim) table (e.g. MiniLM's).
        train_embeddings: whether the table is learned.
        n_kernels: number of RBF kernels (11 in the paper).
        sigma: width of the soft-match kernels; exact_sigma of the exact-match kernel.
    """

    def __init__(
        self,
        vocab_size: int,
        dim: int,
        weights: torch.Tensor | None = None,
        train_embeddings: bool = True,
        n_kernels: int = 11,
        sigma: float = 0.1,
        exact_sigma: float = 1e-3,
    ) -> None:
        super().__init__(vocab_size, dim, weights, train_embeddings)
        mus = kernel_mus(n_kernels)
        self.register_buffer("mu", torch.tensor(mus))
        self.register_buffer("sigma", torch.tensor([exact_sigma] + [sigma] * (n_kernels - 1)))
        self.dense = nn.Linear(n_kernels, 1)

    def kernel_features(
        self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> torch.Tensor:
        """(N, n_kernels) log soft-TF features of query/document id pairs (N, Lq) / (N, Ld)."""
        qe = F.normalize(self.embedding(q), dim=-1)
        de = F.normalize(self.embedding(d), dim=-1)
        m = torch.bmm(qe, de.transpose(1, 2)).unsqueeze(-1)  # (N, Lq, Ld, 1)
        k = torch.exp(-((m - self.mu) ** 2) / (2 * self.sigma**2))
        k = k * d_mask[:, None, :, None].to(k.dtype)
        soft_tf = k.sum(dim=2)  # (N, Lq, n_kernels)
        log_tf = torch.log(soft_tf.clamp(min=1e-10)) * 0.01
        return (log_tf * q_mask[..., None].to(k.dtype)).sum(dim=1)

    # With a frozen table the kernel features do not change during training: the
    # training loop computes them once (``cache_inputs``) and trains ``forward_cached``.
    def cache_inputs(
        self, q: torch.Tensor, q_mask: torch.Tensor, d: torch.Tensor, d_mask: torch.Tensor
    ) -> tuple[torch.Tensor, ...]:
        """The (N, n_kernels) kernel features, the fixed input of :meth:`forward_cached`."""
        return (self.kernel_features(q, q_mask, d, d_mask),)

    def forward_cached(self, phi: torch.Tensor) -> torch.Tensor:
        """(N,) scores from kernel features (N, n_kernels)."""
        return torch.tanh(self.dense(phi)).squeeze(-1)
