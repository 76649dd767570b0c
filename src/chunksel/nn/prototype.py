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


def int8_weight_only_available() -> bool:
    """Whether this torch has the CPU weight-only int8 matmul (``torch._weight_int8pack_mm``)."""
    return hasattr(torch, "_weight_int8pack_mm")


class InferenceMLP:
    """The folded MLP as plain tensors, for low per-call overhead at batch 1.

    Built from a :class:`PrototypeMLP` and the input scaler (``mean``, ``scale`` over
    the kept input dims). No module dispatch, no autograd: one ``addmm`` (or int8
    matmul) per layer, in-place ReLU, then L2 normalisation.

    Modes:
        ``"fp32"``: BatchNorm *and* the scaler folded into the Linear layers
            (``W1' = W1 diag(1/scale)``, ``b1' = b1 - W1' mean``).
        ``"int8w"``: weight-only int8 (symmetric, one scale per output row) with bfloat16
            activations (``torch._weight_int8pack_mm``); the scaler stays in front so the
            first layer's columns keep comparable ranges. Layer widths are zero-padded to
            multiples of 32 (the kernel mis-reads other inner sizes), and the kernel is
            checked against the dequantised weights once when the model is built.
    """

    def __init__(self, mlp: PrototypeMLP, mean: torch.Tensor, scale: torch.Tensor, mode: str = "fp32") -> None:
        if mode not in ("fp32", "int8w"):
            raise ValueError(f"InferenceMLP mode must be 'fp32' or 'int8w', got {mode!r}")
        if mode == "int8w" and not int8_weight_only_available():
            raise RuntimeError("this torch build has no torch._weight_int8pack_mm (weight-only int8)")
        self.mode = mode
        folded = mlp.fold_batchnorm().net
        linears = [m for m in folded if isinstance(m, nn.Linear)]
        mean = torch.as_tensor(mean, dtype=torch.float32)
        inv_scale = 1.0 / torch.as_tensor(scale, dtype=torch.float32)
        with torch.no_grad():
            layers = [(lin.weight.detach().clone(), lin.bias.detach().clone()) for lin in linears]
            if mode == "fp32":
                w1, b1 = layers[0]
                w1 = w1 * inv_scale[None, :]
                layers[0] = (w1.contiguous(), b1 - w1 @ mean)
                self.mean = self.inv_scale = None
                self.layers = layers
            else:
                # the kernel reads the inner dimension in blocks: widths are zero-padded to
                # multiples of 32 (padded outputs stay 0 through ReLU and meet zero columns)
                self.in_dim, self.out_dim = layers[0][0].shape[1], layers[-1][0].shape[0]
                self.pad_in = _round_up(self.in_dim) - self.in_dim
                self.mean = F.pad(mean, (0, self.pad_in))
                self.inv_scale = F.pad(inv_scale, (0, self.pad_in))
                self.shift = -self.mean * self.inv_scale
                self.layers = []
                for w, b in layers:
                    n, k = w.shape
                    w = F.pad(w, (0, _round_up(k) - k, 0, _round_up(n) - n))
                    b = F.pad(b, (0, _round_up(n) - n))
                    s = w.abs().amax(dim=1).clamp(min=1e-12) / 127.0
                    q = torch.round(w / s[:, None]).clamp(-127, 127).to(torch.int8).contiguous()
                    self.layers.append((q, s.to(torch.bfloat16), b.to(torch.bfloat16)))
                self._self_check()

    def n_bytes(self) -> int:
        """Bytes held by the weights, scales and biases."""
        return sum(t.numel() * t.element_size() for layer in self.layers for t in layer)

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        """(B, D) unscaled kept inputs -> (B, out_dim) unit prototypes (float32)."""
        last = len(self.layers) - 1
        if self.mode == "fp32":
            h = x
            for i, (w, b) in enumerate(self.layers):
                h = torch.addmm(b, h, w.t())
                if i < last:
                    h.relu_()
        else:
            if self.pad_in:
                x = F.pad(x, (0, self.pad_in))
            h = torch.addcmul(self.shift, x, self.inv_scale).to(torch.bfloat16)  # (x - mean) / scale
            for i, (q, s, b) in enumerate(self.layers):
                h = torch._weight_int8pack_mm(h, q, s).add_(b)
                if i < last:
                    h.relu_()
            h = h[:, : self.out_dim].float()
        # F.normalize without its Python-level overhead (this runs once per query)
        return h.div_(torch.linalg.vector_norm(h, dim=-1, keepdim=True).clamp_min_(1e-12))

    def _self_check(self) -> None:
        """Compare the int8 kernel with the dequantised weights on a random input once:
        a kernel that mis-reads a layout fails loudly here instead of scoring wrongly."""
        g = torch.Generator().manual_seed(0)
        h = torch.randn(2, self.layers[0][0].shape[1], generator=g).to(torch.bfloat16)
        for q, s, _ in self.layers:
            got = torch._weight_int8pack_mm(h, q, s).float()
            ref = h.float() @ (q.float() * s.float()[:, None]).t()
            if (got - ref).abs().max() > 0.02 * ref.abs().max() + 1e-3:
                raise RuntimeError(f"weight-only int8 matmul disagrees with its reference at shape {tuple(q.shape)}")
            h = torch.relu(ref).to(torch.bfloat16)


def _round_up(n: int, multiple: int = 32) -> int:
    return -(-n // multiple) * multiple


def cosine_scores(prototypes: torch.Tensor, embeddings: torch.Tensor) -> torch.Tensor:
    """Eq. 7: ``s[b, k] = y~_b^T e_{b,k}`` for unit ``y~`` and (B, K, d) candidate embeddings.

    Embeddings are re-normalised (zero rows stay zero) so slightly off-norm stored
    vectors (8-bit decoded) still give cosines.
    """
    emb = F.normalize(embeddings, dim=-1)
    return torch.einsum("bd,bkd->bk", prototypes, emb)
