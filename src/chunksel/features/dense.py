"""A dense SwiGLU model viewed as a mixture of ``E`` experts per layer.

A SwiGLU MLP computes ``MLP(x) = W_down a`` with ``a = act(W_gate x) * (W_up x)`` of
width ``I`` (Llama, SmolLM2, Mistral, Qwen2/3). Its intermediate neurons are partitioned
into ``E`` (default 64) **contiguous** groups of ``G = I / E`` neurons: group ``j`` holds
neurons ``[j*G, (j+1)*G)`` (``I`` must be divisible by ``E``; SmolLM2: 1536 / 64 = 24).

- **Expert** ``j`` is the MLP restricted to group ``j``:
  ``g_j(x) = W_down[:, jG:(j+1)G] a[jG:(j+1)G]``, so ``sum_j g_j(x) == MLP(x)`` exactly
  (the down projection is linear and bias-free).
- **Router distribution** ``p[j, t]`` is group ``j``'s share of the token's activation
  mass, ``sum_{i in j} |a_i| / sum_i |a_i|`` (uniform ``1/E`` if ``a == 0``;
  then every ``g_j`` is 0 and so is the score).

``RS[l, j] = 1/T sum_t p[l, j, t] ||g_j(u[l, t])||_2`` as for real MoE models (paper,
Eq. 2), every layer contributes, ``r`` has ``L * E`` entries (SmolLM2: 30 * 64 = 1920).

The hook is a forward *pre*-hook on ``mlp.down_proj``, whose input is ``a`` itself, so
nothing of the MLP is recomputed. The group norms use a QR factorisation of each group's
down weights, ``W_j = Q_j R_j`` (``R_j`` is ``G x G``, cached once per layer):
``||g_j|| = ||R_j a_j||``, one batched matmul costing ``I * G`` per token instead of the
``I * d`` of materialising the ``(T, E, d)`` group outputs (:meth:`DenseAdapter.group_outputs`
does that with one einsum; tests check that both agree). Scores are computed for all
``B*S`` positions (no gather) and padded positions get weight 0 in the means.
"""

from __future__ import annotations

import torch
from torch import nn

from chunksel.errors import ConfigError
from chunksel.features.capture import Capture, ExpertAdapter, decoder_layers


class DenseAdapter(ExpertAdapter):
    """Dense SwiGLU MLPs as ``n_groups`` contiguous-neuron experts per layer."""

    layout = "dense"

    def __init__(self, model: nn.Module, n_groups: int = 64) -> None:
        if n_groups < 1:
            raise ConfigError(f"n_groups must be >= 1, got {n_groups}")
        self.mlps: list[nn.Module] = []
        for i, layer in enumerate(decoder_layers(model)):
            mlp = getattr(layer, "mlp", None)
            if mlp is None or not all(
                isinstance(getattr(mlp, n, None), nn.Linear)
                for n in ("gate_proj", "up_proj", "down_proj")
            ):
                raise ConfigError(
                    f"decoder layer {i} of {type(model).__name__} has no SwiGLU MLP "
                    "(mlp.gate_proj / up_proj / down_proj)"
                )
            if mlp.down_proj.bias is not None:
                raise ConfigError(f"layer {i}: down_proj has a bias; groups would not sum to the MLP")
            width = mlp.down_proj.in_features
            if width % n_groups:
                raise ConfigError(
                    f"layer {i}: intermediate size {width} is not divisible by {n_groups} groups"
                )
            self.mlps.append(mlp)
        self.layers = list(range(len(self.mlps)))
        self.n_experts = n_groups
        self._factor: dict[int, torch.Tensor] = {}

    def _hook_targets(self) -> list[tuple[nn.Module, str]]:
        return [(mlp.down_proj, "pre") for mlp in self.mlps]

    def _grouped_down(self, slot: int) -> torch.Tensor:
        """``W_down`` ``(d, I)`` as ``(E, G, d)``: group ``j`` = columns ``[jG, (j+1)G)``."""
        w = self.mlps[slot].down_proj.weight
        d, width = w.shape
        return w.T.reshape(self.n_experts, width // self.n_experts, d)

    def factor(self, slot: int) -> torch.Tensor:
        """``R_j^T`` ``(E, G, G)`` with ``W_j = Q_j R_j`` (QR, cached, float32), so that
        ``||g_j|| = ||W_j a_j|| = ||R_j a_j||`` (``Q_j`` has orthonormal columns)."""
        rt = self._factor.get(slot)
        w = self.mlps[slot].down_proj.weight
        if rt is None or rt.device != w.device:
            wj = self._grouped_down(slot).detach().float().transpose(1, 2)  # (E, d, G)
            rt = torch.linalg.qr(wj, mode="r").R.transpose(1, 2).contiguous()
            self._factor[slot] = rt
        return rt

    def activations(self, slot: int, x: torch.Tensor) -> torch.Tensor:
        """``a = act(W_gate x) * (W_up x)`` for tokens ``x`` ``(T, d)`` -> ``(T, I)``."""
        mlp = self.mlps[slot]
        return mlp.act_fn(mlp.gate_proj(x)) * mlp.up_proj(x)

    def group_outputs(self, slot: int, a: torch.Tensor) -> torch.Tensor:
        """Every group's output ``g_j`` from activations ``a`` ``(T, I)`` -> ``(T, E, d)``
        with one einsum; ``group_outputs(a).sum(1) == down_proj(a)``."""
        wg = self._grouped_down(slot)
        return torch.einsum("teg,egd->ted", a.reshape(a.shape[0], self.n_experts, -1), wg)

    def router_probs(self, a: torch.Tensor) -> torch.Tensor:
        """``p[t, j] = sum_{i in j}|a_ti| / sum_i |a_ti|`` ``(T, E)``."""
        mass = a.abs().reshape(a.shape[0], self.n_experts, -1).sum(-1).float()
        total = mass.sum(-1, keepdim=True)
        uniform = torch.full_like(mass, 1.0 / self.n_experts)
        return torch.where(total > 0, mass / total.clamp(min=torch.finfo(mass.dtype).tiny),
                           uniform)

    def group_norms(self, slot: int, a: torch.Tensor) -> torch.Tensor:
        """``||g_j(x)||_2`` ``(T, E)`` as ``||R_j a_j||`` (one bmm over groups)."""
        ag = a.float().reshape(a.shape[0], self.n_experts, -1).transpose(0, 1)  # (E, T, G)
        return torch.linalg.vector_norm(torch.bmm(ag, self.factor(slot)), dim=-1).T

    def _scores(self, slot: int, module: nn.Module, args: tuple, output: object,
                cap: Capture) -> None:
        # router_probs(a) * group_norms(slot, a) with few kernels, over all B*S positions
        # (padded ones get weight 0 in the means; cheaper than gathering the real rows)
        a = args[0]
        ag = a.reshape(-1, self.n_experts, a.shape[-1] // self.n_experts).float()  # (N, E, G)
        mass = ag.abs().sum(-1)  # (N, E)
        norms = torch.linalg.vector_norm(torch.bmm(ag.transpose(0, 1), self.factor(slot)), dim=-1)
        total = mass.sum(-1, keepdim=True).clamp_(min=torch.finfo(mass.dtype).tiny)
        cap.store_all_positions(slot, mass * norms.T / total)
        return None
