"""The evidence-prototype MLP of the paper (Sec. 3.3, Eqs. 6-7; Sec. 5.2).

``PrototypeMLP`` maps the (scaled, optionally masked) selector input
``x' = [h ; r ; E]`` to a unit vector ``y~ = f(x') / ||f(x')||_2`` in the retriever's
embedding space; candidate ``k`` is scored by the cosine ``s_k = y~^T e_k`` (Eq. 7) and
the selected chunk is ``argmax_k s_k`` (Eq. 9).

Architecture (paper, Sec. 5.2): ``depth`` hidden blocks ``Linear -> BatchNorm1d -> ReLU
-> Dropout`` of width ``hidden`` (default 3 x 1024, dropout 0.05), a final ``Linear`` to
``out_dim`` (384, MiniLM's dimension) and L2 normalisation; Kaiming-normal weights.
At ``in_dim`` 4992 (the paper's OLMoE layout) it has 7,611,776 trainable parameters; at
4416 (SmolLM2-135M: 576 + 1920 + 5 x 384) 7,021,952.

Source: "Lightweight chunk selection for mobile RAG" (``papers/chunk-selection-mobile-rag.txt``).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


class PrototypeMLP(nn.Module):
    """MLP ``x -> y~`` (unit-norm evidence prototype).

    Args:
        in_dim: input dimension D (after the optional feature mask).
        out_dim: prototype dimension (the chunk-embedding dimension, 384).
        hidden: width of each hidden layer.
        depth: number of hidden ``Linear -> BatchNorm1d -> ReLU -> Dropout`` blocks.
        dropout: dropout rate after each hidden block.
    """

    def __init__(
        self,
        in_dim: int,
        out_dim: int = 384,
        hidden: int = 1024,
        depth: int = 3,
        dropout: float = 0.05,
    ) -> None:
        super().__init__()
        if in_dim < 1 or out_dim < 1 or hidden < 1 or depth < 1:
            raise ValueError(
                f"PrototypeMLP needs positive sizes, got in_dim={in_dim} out_dim={out_dim} "
                f"hidden={hidden} depth={depth}"
            )
        self.in_dim, self.out_dim, self.hidden, self.depth = in_dim, out_dim, hidden, depth
        layers: list[nn.Module] = []
        prev = in_dim
        for _ in range(depth):
            layers += [nn.Linear(prev, hidden), nn.BatchNorm1d(hidden), nn.ReLU(), nn.Dropout(dropout)]
            prev = hidden
        self.body = nn.Sequential(*layers)
        self.head = nn.Linear(prev, out_dim)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        """Kaiming-normal (fan-in, ReLU gain) weights, zero biases; BN starts as identity."""
        if isinstance(module, nn.Linear):
            nn.init.kaiming_normal_(module.weight, mode="fan_in", nonlinearity="relu")
            nn.init.zeros_(module.bias)
        elif isinstance(module, nn.BatchNorm1d):
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, in_dim) -> (B, out_dim), each row L2-normalised."""
        return F.normalize(self.head(self.body(x)), dim=-1)

    def n_parameters(self) -> int:
        """Number of trainable parameters."""
        return sum(p.numel() for p in self.parameters() if p.requires_grad)

    def fold_batchnorm(self) -> nn.Module:
        """An inference-only copy with every BatchNorm folded into the Linear before it.

        With BN in eval mode, ``BN(Wx + b) = g * (Wx + b - mu) / sqrt(var + eps) + beta``,
        so ``W' = diag(s) W`` and ``b' = s (b - mu) + beta`` with ``s = g / sqrt(var + eps)``.
        Dropout is dropped (identity at inference). The result gives the same outputs
        as ``self.eval()`` up to float rounding.
        """
        mods = list(self.body)
        out: list[nn.Module] = []
        i = 0
        with torch.no_grad():
            while i < len(mods):
                lin, bn = mods[i], mods[i + 1]
                assert isinstance(lin, nn.Linear) and isinstance(bn, nn.BatchNorm1d)
                scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
                fused = nn.Linear(lin.in_features, lin.out_features)
                fused.weight.copy_(lin.weight * scale[:, None])
                fused.bias.copy_((lin.bias - bn.running_mean) * scale + bn.bias)
                out += [fused, nn.ReLU()]
                i += 4
            head = nn.Linear(self.head.in_features, self.head.out_features)
            head.weight.copy_(self.head.weight)
            head.bias.copy_(self.head.bias)
        return _Folded(nn.Sequential(*out, head)).eval()


class _Folded(nn.Module):
    """Linear/ReLU stack followed by L2 normalisation (the folded inference model)."""

    def __init__(self, net: nn.Sequential) -> None:
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.normalize(self.net(x), dim=-1)


def cosine_scores(prototypes: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """Eq. 7: ``s[b, k] = y~_b^T e_{b,k}`` for unit ``y~`` and (B, K, d) candidate embeddings.

    Embeddings are re-normalised (zero rows stay zero) so slightly off-norm stored
    vectors (8-bit decoded) still give cosines.
    """
    emb = F.normalize(embeddings, dim=-1)
    return torch.einsum("bd,bkd->bk", prototypes, emb)
