"""The SRAS scorer: additive (Bahdanau-style) attention between a question and each
candidate, over frozen sentence embeddings (SRAS paper, Sec. III-C, Eqs. 2-4).

For a question embedding ``q`` (d) and candidate embeddings ``d_1..d_n`` (d each)::

    h_q   = W_q q + b            (h)
    h_d_i = W_d d_i              (h)
    s_i   = w^T tanh(h_q + h_d_i)

with ``W_q, W_d`` (h x d) and ``w`` (h). One bias ``b`` is kept (on the question side; a
second one on the document side would be redundant, since both are added before the
``tanh``) and ``w`` has none (a constant shift of every ``s_i`` changes no softmax). At
``d = 384`` (MiniLM) and ``h = 256``:
``2 * 384 * 256 + 256 + 256 = 197,120`` parameters, 788,480 bytes in float32 (0.75 MiB),
the paper's "~197K parameters, ~0.76 MB".

The policy is the softmax over the real candidates: ``pi(i | q, D) = softmax_i(s_i)``
(padded slots get ``-inf``). :class:`ValueHead` is the PPO baseline ``V(q)``; it is used
during training only and is not part of the saved selector.

Reference: "SRAS: A Lightweight Reinforcement Learning-based Document Selector for
Edge-Native RAG Pipelines" (``../shared/papers/sras-rl-document-selector.txt``).
"""

from __future__ import annotations

import torch
from torch import nn


class SRASScorer(nn.Module):
    """``s_i = w^T tanh(W_q q + b + W_d d_i)`` for every candidate ``i``.

    Args:
        emb_dim: ``d``, the embedding dimension of questions and candidates (384).
        hidden: ``h``, the attention width (256 in the paper).
    """

    def __init__(self, emb_dim: int = 384, hidden: int = 256) -> None:
        super().__init__()
        if emb_dim < 1 or hidden < 1:
            raise ValueError(f"emb_dim and hidden must be >= 1, got {emb_dim}, {hidden}")
        self.emb_dim = emb_dim
        self.hidden = hidden
        self.w_q = nn.Linear(emb_dim, hidden, bias=True)
        self.w_d = nn.Linear(emb_dim, hidden, bias=False)
        self.w = nn.Linear(hidden, 1, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Xavier-uniform projections (tanh gain), zero bias."""
        gain = nn.init.calculate_gain("tanh")
        nn.init.xavier_uniform_(self.w_q.weight, gain=gain)
        nn.init.xavier_uniform_(self.w_d.weight, gain=gain)
        nn.init.zeros_(self.w_q.bias)
        nn.init.xavier_uniform_(self.w.weight)

    def forward(self, q: torch.Tensor, e: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Scores of every candidate.

        Args:
            q: (B, d) question embeddings.
            e: (B, K, d) candidate embeddings (anything at padded slots).
            mask: (B, K) bool, True at real candidates; padded slots get ``-inf``.

        Returns:
            (B, K) scores ``s``.
        """
        h = torch.tanh(self.w_q(q).unsqueeze(1) + self.w_d(e))
        s = self.w(h).squeeze(-1)
        if mask is not None:
            s = s.masked_fill(~mask.bool(), float("-inf"))
        return s

    def log_policy(self, q: torch.Tensor, e: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """(B, K) ``log softmax(s)`` over the real candidates (``-inf`` at padding)."""
        return torch.log_softmax(self.forward(q, e, mask), dim=-1)

    def n_parameters(self) -> int:
        """Trainable parameters (197,120 at d = 384, h = 256)."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


class ValueHead(nn.Module):
    """The PPO baseline ``V(q) = v^T tanh(W_v q + b_v) + c`` (training only).

    The state of the one-step episode is the question and its pool; the value depends on
    the question alone (the pool is a function of it), which keeps the baseline small.

    Args:
        emb_dim: ``d``.
        hidden: width of the value MLP (64 by default: 24,705 parameters at d = 384).
    """

    def __init__(self, emb_dim: int = 384, hidden: int = 64) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(emb_dim, hidden), nn.Tanh(), nn.Linear(hidden, 1))
        nn.init.zeros_(self.net[2].weight)
        nn.init.zeros_(self.net[2].bias)

    def forward(self, q: torch.Tensor) -> torch.Tensor:
        """(B,) values."""
        return self.net(q).squeeze(-1)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
