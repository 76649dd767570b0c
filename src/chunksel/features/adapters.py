"""Routing-weighted expert-response features of MoE generators, read with forward hooks.

For every MoE layer ``l`` and expert ``j`` (paper, Sec. 3.1, Eq. 2)::

    RS[l, j] = 1/T * sum_t  p[l, j, t] * || g_j(u[l, t]) ||_2

with ``T`` the question's own tokens (the positions the capture mask marks: the
question inside the chat prompt, never padding, template or headers), ``p`` the softmax over *all* experts' router
logits (not only the top-k), ``u`` the MoE block input and ``g_j`` expert ``j``'s output
before the routing-weight scaling. ``r`` is ``RS`` flattened layer-major, shape
``(L * E,)`` over the layers listed in :attr:`ExpertAdapter.layers`.

Supported layouts, detected from the modules:

- **fused** (transformers 5.x): ``mlp.gate`` is a ``*TopKRouter`` returning
  ``(router_logits, top_k_weights, top_k_index)`` and ``mlp.experts`` holds stacked
  ``gate_up_proj`` ``(E, 2I, d)`` and ``down_proj`` ``(E, d, I)`` parameters (the
  ``is_transposed`` / interleaved variants of ``transformers.integrations.moe`` are
  handled too);
- **modulelist** (transformers 4.x): ``mlp.gate`` is an ``nn.Linear`` giving the router
  logits and ``mlp.experts`` an ``nn.ModuleList`` of SwiGLU MLPs with
  ``gate_proj``/``up_proj``/``down_proj`` (OLMoE, Qwen2/3-MoE) or ``w1``/``w3``/``w2``
  (Mixtral).

One forward hook per MoE layer sits on the router ``mlp.gate``: its input is the block
input ``u`` flattened to ``(B*S, d)`` and its output the router logits, so ``p`` is read,
not recomputed. All experts are then applied to all real tokens in one batched
computation per layer (one GEMM against the stacked gate/up weights, one batched matmul
against the stacked down weights; tokens are processed in slices to bound memory), which
costs ``E / top_k`` times the block's own expert compute.

Qwen2-MoE's **shared expert** is excluded from ``r``: it runs on every token with a
scalar sigmoid gate and has no probability in the router's distribution over the
experts, so Eq. 2 does not define a score for it. Dense MLP layers of hybrid models
(Qwen-MoE ``mlp_only_layers`` / ``decoder_sparse_step``) are skipped; ``layers`` lists the
decoder layers that contribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from chunksel.errors import ConfigError
from chunksel.features.capture import ExpertAdapter, decoder_layers

MOE_TYPES = ("olmoe", "qwen2_moe", "qwen3_moe", "mixtral")
DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
#: bound on the (tokens x experts x width) intermediate of the all-experts pass
_SLICE_ELEMS = 1 << 24


# ---------------------------------------------------------------------------- MoE layouts
def moe_block(layer: nn.Module) -> nn.Module | None:
    """A decoder layer's MLP / MoE block (``mlp``; Mixtral 4.x: ``block_sparse_moe``)."""
    for name in ("mlp", "block_sparse_moe"):
        block = getattr(layer, name, None)
        if block is not None:
            return block
    return None


class MoEAdapter(ExpertAdapter):
    """Eq. 2 for OLMoE, Qwen2-MoE, Qwen3-MoE and Mixtral (fused or ModuleList experts)."""

    def __init__(self, model: nn.Module) -> None:
        self.model_type = getattr(model.config, "model_type", "")
        self.blocks: list[nn.Module] = []
        self.layers = []
        layouts = set()
        for i, layer in enumerate(decoder_layers(model)):
            mlp = moe_block(layer)
            if mlp is None:
                raise ConfigError(f"decoder layer {i} of {type(model).__name__} has no MLP module")
            experts, gate = getattr(mlp, "experts", None), getattr(mlp, "gate", None)
            if not _is_moe_layer(model.config, i):
                continue  # a dense layer of a hybrid model
            if experts is None or gate is None:
                raise ConfigError(
                    f"MoE layer {i} of {type(model).__name__} lacks its router ('gate') or "
                    f"'experts' (found {type(mlp).__name__})"
                )
            layouts.add(_layout_of(experts, i))
            self.blocks.append(mlp)
            self.layers.append(i)
        if not self.blocks:
            raise ConfigError(f"{type(model).__name__} has no MoE layers (mlp.gate + mlp.experts)")
        if len(layouts) != 1:
            raise ConfigError(f"mixed expert layouts across layers: {sorted(layouts)}")
        self.layout = layouts.pop()
        self.n_experts = _n_experts(self.blocks[0].experts)

    def _hook_targets(self) -> list[tuple[nn.Module, str]]:
        return [(blk.gate, "forward") for blk in self.blocks]

    def expert_weights(self, slot: int) -> tuple[torch.Tensor, torch.Tensor, Callable, bool]:
        """``(W_gate_up (E, 2I, d), W_down (E, d, I), act, interleaved)`` of a layer."""
        experts = self.blocks[slot].experts
        if self.layout == "fused":
            gu, down = experts.gate_up_proj, experts.down_proj
            if getattr(experts, "is_transposed", False):
                gu, down = gu.transpose(1, 2), down.transpose(1, 2)
            interleaved = not getattr(experts, "is_concatenated", True)
            return gu, down, experts.act_fn, interleaved
        names = ("w1", "w3", "w2") if hasattr(experts[0], "w1") else (
            "gate_proj", "up_proj", "down_proj")
        gu = torch.stack([
            torch.cat([getattr(e, names[0]).weight, getattr(e, names[1]).weight], 0)
            for e in experts
        ])
        down = torch.stack([getattr(e, names[2]).weight for e in experts])
        return gu, down, experts[0].act_fn, False

    def expert_outputs(self, slot: int, u: torch.Tensor) -> torch.Tensor:
        """Every expert's output ``g_j(u)`` for tokens ``u`` ``(T, d)`` -> ``(T, E, d)``.

        Batched over experts: ``a = act(u W_gate^T) * (u W_up^T)`` for all experts with one
        GEMM, then one batched matmul with the stacked down weights.
        """
        gu_w, down_w, act, interleaved = self.expert_weights(slot)
        e, two_i, d = gu_w.shape
        gu = (u @ gu_w.reshape(e * two_i, d).T).view(-1, e, two_i)
        bias = getattr(self.blocks[slot].experts, "gate_up_proj_bias", None)
        if bias is not None:
            gu = gu + bias
        gate, up = (gu[..., 0::2], gu[..., 1::2]) if interleaved else gu.chunk(2, dim=-1)
        a = act(gate) * up  # (T, E, I)
        out = torch.bmm(a.transpose(0, 1), down_w.transpose(1, 2)).transpose(0, 1)
        bias = getattr(self.blocks[slot].experts, "down_proj_bias", None)
        return out + bias if bias is not None else out

    def _scores(self, slot, module, args, output, cap):
        u = args[0]
        u = cap.real(u.reshape(-1, u.shape[-1]))
        logits = output[0] if isinstance(output, tuple) else output
        logits = cap.real(logits.reshape(-1, logits.shape[-1]))
        p = torch.softmax(logits.float(), dim=-1)
        e = self.n_experts
        width = max(_intermediate(self.blocks[slot].experts, self.layout) * 2, u.shape[-1])
        step = max(1, _SLICE_ELEMS // (e * width))
        norms = torch.cat([
            torch.linalg.vector_norm(self.expert_outputs(slot, u[i:i + step]), dim=-1)
            for i in range(0, u.shape[0], step)
        ]) if u.shape[0] else u.new_zeros(0, e)
        return p * norms.float()


def _is_moe_layer(config: Any, i: int) -> bool:
    """Whether decoder layer ``i`` is sparse by the config (Qwen-MoE hybrids skip some)."""
    if getattr(config, "model_type", "") in ("qwen2_moe", "qwen3_moe"):
        n = getattr(config, "num_experts", 0) or 0
        step = getattr(config, "decoder_sparse_step", 1) or 1
        return i not in (getattr(config, "mlp_only_layers", None) or []) and n > 0 and (
            (i + 1) % step == 0
        )
    return True


def _layout_of(experts: nn.Module, i: int) -> str:
    if isinstance(experts, nn.ModuleList):
        first = experts[0]
        if all(hasattr(first, n) for n in ("gate_proj", "up_proj", "down_proj")) or all(
            hasattr(first, n) for n in ("w1", "w2", "w3")
        ):
            return "modulelist"
        raise ConfigError(f"layer {i}: experts lack gate_proj/up_proj/down_proj (or w1/w2/w3)")
    if isinstance(getattr(experts, "gate_up_proj", None), torch.Tensor) and isinstance(
        getattr(experts, "down_proj", None), torch.Tensor
    ):
        if getattr(experts, "has_gate", True) is False:
            raise ConfigError(f"layer {i}: experts without a gate projection are not supported")
        return "fused"
    raise ConfigError(
        f"layer {i}: unknown experts module {type(experts).__name__} (expected fused "
        "gate_up_proj/down_proj parameters or a ModuleList of SwiGLU MLPs)"
    )


def _n_experts(experts: nn.Module) -> int:
    if isinstance(experts, nn.ModuleList):
        return len(experts)
    return int(experts.gate_up_proj.shape[0])


def _intermediate(experts: nn.Module, layout: str) -> int:
    if layout == "modulelist":
        first = experts[0]
        lin = first.w1 if hasattr(first, "w1") else first.gate_proj
        return int(lin.weight.shape[0])
    gu = experts.gate_up_proj
    two_i = gu.shape[2] if getattr(experts, "is_transposed", False) else gu.shape[1]
    return int(two_i) // 2


# ---------------------------------------------------------------------------- detection
def make_adapter(model: nn.Module, n_groups: int = 64) -> ExpertAdapter:
    """The adapter for ``model``: :class:`MoEAdapter` for OLMoE / Qwen2-MoE / Qwen3-MoE /
    Mixtral, :class:`~chunksel.features.dense.DenseAdapter` (``n_groups`` experts per
    layer) for dense SwiGLU models (Llama, SmolLM2, Mistral, Qwen2, Qwen3).

    Raises:
        ConfigError: an unsupported architecture, or one without the expected modules.
    """
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type in MOE_TYPES:
        return MoEAdapter(model)
    if model_type in DENSE_TYPES:
        from chunksel.features.dense import DenseAdapter

        return DenseAdapter(model, n_groups=n_groups)
    raise ConfigError(
        f"unsupported generator architecture {model_type!r}: supported MoE "
        f"{', '.join(MOE_TYPES)}; dense {', '.join(DENSE_TYPES)}"
    )
