"""The retrieval-anchored prototype scorer: the retriever's ranking plus learned corrections.

For an instance with question embedding ``q`` (unit, the retriever's), candidates
``e_1..e_K`` (unit, retrieval order), question features ``x`` (any of the generator's
``h`` and ``r``, ``q`` itself and the flattened ``E``, standard-scaled) and per-candidate
interaction features ``phi_k`` (retrieval score and rank, the LETOR lexical features;
standard-scaled)::

    p     = normalize(q + g(x))                              evidence prototype
    s_k   = -beta * rank_k                                   anchor: retrieval order
          + (cos(p, e_k) - cos(q, e_k)) / tau                prototype correction
          + u(phi_k) + w . phi_k                             interaction correction

``g`` is an MLP whose last layer starts at zero, ``u`` a small per-candidate MLP whose
last layer starts at zero, ``w`` a linear path beside it (no dropout, so a strong single
feature such as a stacked ranker's score passes undamped; zero at initialisation), and
``beta > 0`` a learned scale. At initialisation ``p = q`` exactly and ``u = w = 0``, so
the scores are ``-beta * rank``: the untrained scorer ranks
exactly as retrieval order, and training moves away from it only where the multi-positive
contrastive loss (Eq. 8 on the logits ``s``) says so. With ``tau`` = 0.1 the prototype
term moves a score by up to ``2 / tau`` = 20 logits, the anchor by ``beta`` per rank.

:class:`AnchoredEnsemble` averages the logits of several scorers trained from different
seeds on the same inputs (the selector's ``members``); untrained, it too ranks exactly
as retrieval order.

"Retrieval order" here is the order the candidates are handed over in: the anchored
selector may hand them in its stacked LambdaMART's order instead (its ``anchor`` setting),
and then the untrained scorer ranks as that LambdaMART.

The design answers two weaknesses of the paper's MLP (``nn/prototype.py``) on small
training sets: it must relearn "the top chunk is usually right" from the chunk
embeddings alone, and it never sees the question embedding or any lexical
question-chunk interaction.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def _mlp(in_dim: int, hidden: int, depth: int, out_dim: int, dropout: float) -> nn.Sequential:
    """``depth`` blocks ``Linear -> ReLU -> Dropout``, then a zero-initialised ``Linear``."""
    layers: list[nn.Module] = []
    prev = in_dim
    for _ in range(depth):
        lin = nn.Linear(prev, hidden)
        nn.init.kaiming_normal_(lin.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(lin.bias)
        layers += [lin, nn.ReLU(), nn.Dropout(dropout)]
        prev = hidden
    head = nn.Linear(prev, out_dim)
    nn.init.zeros_(head.weight)
    nn.init.zeros_(head.bias)
    layers.append(head)
    return nn.Sequential(*layers)


class AnchoredScorer(nn.Module):
    """Scores ``(B, K)`` logits from question features, embeddings and interaction features,
    for any number of candidates K (no weight depends on K).

    Args:
        x_dim: dimension of the (scaled) question-side input ``x`` (0: no prototype term).
        phi_dim: per-candidate interaction features (0: no interaction term).
        emb_dim: the retriever's embedding dimension (384 for MiniLM).
        hidden, depth: the prototype MLP ``g``.
        phi_hidden, phi_depth: the interaction MLP ``u``.
        dropout: dropout after each hidden layer.
        tau: temperature of the prototype term.
        beta: the anchor's initial scale (logits per rank).
        phi_linear: add the linear interaction path ``w``.
    """

    def __init__(
        self,
        x_dim: int,
        phi_dim: int,
        emb_dim: int = 384,
        hidden: int = 64,
        depth: int = 2,
        phi_hidden: int = 64,
        phi_depth: int = 2,
        dropout: float = 0.3,
        tau: float = 0.1,
        beta: float = 1.0,
        phi_linear: bool = True,
    ) -> None:
        super().__init__()
        if emb_dim < 1 or x_dim < 0 or phi_dim < 0:
            raise ValueError(f"AnchoredScorer needs emb_dim >= 1 and x_dim, phi_dim >= 0; got "
                             f"emb_dim={emb_dim} x_dim={x_dim} phi_dim={phi_dim}")
        if tau <= 0 or beta <= 0:
            raise ValueError(f"tau and beta must be > 0, got tau={tau} beta={beta}")
        self.x_dim, self.phi_dim, self.emb_dim, self.tau = x_dim, phi_dim, emb_dim, tau
        self.g = _mlp(x_dim, hidden, depth, emb_dim, dropout) if x_dim else None
        self.u = _mlp(phi_dim, phi_hidden, phi_depth, 1, dropout) if phi_dim else None
        # a linear path beside u (no dropout): w . phi_k, zero at initialisation
        self.w = _mlp(phi_dim, 0, 0, 1, 0.0) if phi_dim and phi_linear else None
        # beta = softplus(log_beta) stays positive
        self.log_beta = nn.Parameter(torch.tensor(float(beta)).expm1().log())

    @property
    def beta(self) -> torch.Tensor:
        return F.softplus(self.log_beta)

    def prototype(self, q: torch.Tensor, x: torch.Tensor | None) -> torch.Tensor:
        """``normalize(q + g(x))`` (B, d); ``q`` itself without a prototype term."""
        if self.g is None or x is None:
            return q
        return F.normalize(q + self.g(x), dim=-1)

    def forward(
        self,
        q: torch.Tensor,
        e: torch.Tensor,
        x: torch.Tensor | None = None,
        phi: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """``q`` (B, d) unit, ``e`` (B, K, d) (zeros at padding), ``x`` (B, x_dim),
        ``phi`` (B, K, phi_dim) -> (B, K) logits (padding is left to the caller's mask).
        Any K: the anchor's ranks are the positions ``0..K-1`` of this call."""
        rank = -torch.arange(e.shape[1], dtype=e.dtype, device=e.device)
        s = self.beta * rank.unsqueeze(0).expand(e.shape[0], -1)
        if self.g is not None:
            p = self.prototype(q, x)
            en = F.normalize(e, dim=-1)
            s = s + torch.einsum("bd,bkd->bk", p - q, en) / self.tau
        if self.u is not None and phi is not None:
            s = s + self.u(phi).squeeze(-1)
        if self.w is not None and phi is not None:
            s = s + self.w(phi).squeeze(-1)
        return s

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)


class AnchoredEnsemble(nn.Module):
    """The mean of several :class:`AnchoredScorer` members' logits (same inputs, same
    signature as one scorer). Members trained from different seeds disagree where the
    small training sets leave the scorer uncertain; their average is steadier than any
    one of them, at one scorer's cost per member."""

    def __init__(self, members: list[AnchoredScorer]) -> None:
        super().__init__()
        if not members:
            raise ValueError("AnchoredEnsemble needs at least one member")
        self.members = nn.ModuleList(members)

    def forward(
        self,
        q: torch.Tensor,
        e: torch.Tensor,
        x: torch.Tensor | None = None,
        phi: torch.Tensor | None = None,
    ) -> torch.Tensor:
        return torch.stack([m(q, e, x, phi) for m in self.members], dim=0).mean(dim=0)

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters() if p.requires_grad)
