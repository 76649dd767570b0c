"""What the expert adapters share: the per-pass capture state and the adapter base class.

:class:`ExpertAdapter` registers one hook per contributing layer for a forward pass and
fills the routing-weighted expert responses of Eq. 2 into a :class:`Capture`; the MoE
layouts (:mod:`.adapters`) and the dense-as-MoE view (:mod:`.dense`) implement it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from chunksel.errors import ConfigError


class Capture:
    """Per-pass state shared by the hooks: which tokens are real and where scores go."""

    def __init__(self, mask: torch.Tensor, n_layers: int, n_experts: int) -> None:
        self.b, self.s = mask.shape
        flat = mask.reshape(-1)
        self.all_real = bool(flat.all())
        self.index: torch.Tensor | None = None
        self.seg: torch.Tensor | None = None  # (B, T_real): segment means over real tokens
        self.seg_all: torch.Tensor | None = None  # (B, B*S): the same over all positions
        lengths = mask.sum(1).to(torch.float32).clamp(min=1.0)
        rows = torch.arange(self.b, device=mask.device).repeat_interleave(self.s)
        seg_all = torch.zeros(self.b, self.b * self.s, device=mask.device)
        seg_all[rows, torch.arange(self.b * self.s, device=mask.device)] = 1.0 / lengths[rows]
        self.seg_all = seg_all * flat.to(seg_all.dtype)
        self.pad = ~flat[:, None]  # (B*S, 1): padded positions
        if not self.all_real:
            self.index = flat.nonzero().squeeze(1)
            self.seg = self.seg_all.index_select(1, self.index)
        self.r = torch.zeros(self.b, n_layers, n_experts, device=mask.device)

    def real(self, x: torch.Tensor) -> torch.Tensor:
        """Rows of ``x`` (``(B*S, ...)``) at real (non-padded) tokens."""
        return x if self.all_real else x.index_select(0, self.index)

    def store(self, slot: int, scores: torch.Tensor) -> None:
        """Mean of ``scores`` ``(T_real, E)`` over each sequence's tokens into slot ``slot``."""
        scores = scores.to(torch.float32)
        if self.seg is None:
            self.r[:, slot] = scores.view(self.b, self.s, -1).mean(1)
        else:
            self.r[:, slot] = self.seg @ scores

    def store_all_positions(self, slot: int, scores: torch.Tensor) -> None:
        """Means of ``scores`` ``(B*S, E)`` over real tokens into slot ``slot`` (padded
        positions are zeroed first -- they may be non-finite -- and get weight 0)."""
        scores = scores.to(torch.float32)
        if self.all_real:
            self.r[:, slot] = scores.view(self.b, self.s, -1).mean(1)
            return
        self.r[:, slot] = self.seg_all @ scores.masked_fill(self.pad, 0.0)


class ExpertAdapter(ABC):
    """Routing-weighted expert responses of one model (see the module docstring).

    Attributes:
        layers: decoder-layer indices that contribute to ``r``, in order.
        n_experts: experts per layer ``E``.
        layout: a short name of the detected layout.
    """

    layers: list[int]
    n_experts: int
    layout: str

    @property
    def r_dim(self) -> int:
        """``len(layers) * n_experts``."""
        return len(self.layers) * self.n_experts

    @abstractmethod
    def _hook_targets(self) -> list[tuple[nn.Module, str]]:
        """``(module, "forward" | "pre")`` per contributing layer, in ``layers`` order."""

    @abstractmethod
    def _scores(self, slot: int, module: nn.Module, args: tuple, output: Any,
                cap: Capture) -> torch.Tensor | None:
        """``p * ||g_j(u)||`` of shape ``(T_real, E)`` for layer ``layers[slot]``, or
        ``None`` when the adapter has stored the layer's means itself."""

    @contextmanager
    def capture(self, mask: torch.Tensor) -> Iterator[Capture]:
        """Register the hooks for one forward pass; ``mask`` (B, S) marks the positions
        Eq. 2 averages over (the question's tokens; at most the attention mask's).

        Yields the capture whose ``r`` ``(B, L, E)`` is filled during the pass. The hooks
        never modify inputs or outputs and are always removed, also on exceptions.
        """
        cap = Capture(mask.to(torch.bool), len(self.layers), self.n_experts)
        handles = []
        try:
            for slot, (module, kind) in enumerate(self._hook_targets()):
                handles.append(self._register(module, kind, slot, cap))
            yield cap
        finally:
            for h in handles:
                h.remove()

    def _register(self, module: nn.Module, kind: str, slot: int, cap: Capture):
        if kind == "pre":
            def pre_hook(mod, args):
                scores = self._scores(slot, mod, args, None, cap)
                if scores is not None:
                    cap.store(slot, scores)

            return module.register_forward_pre_hook(pre_hook)

        def hook(mod, args, output):
            cap.store(slot, self._scores(slot, mod, args, output, cap))

        return module.register_forward_hook(hook)


def decoder_layers(model: nn.Module) -> nn.ModuleList:
    """The decoder layers of a causal LM (``model.model.layers``)."""
    base = getattr(model, "model", None) or getattr(model, "base_model", None)
    layers = getattr(base, "layers", None)
    if not isinstance(layers, nn.ModuleList):
        raise ConfigError(
            f"{type(model).__name__} has no decoder layers at model.model.layers"
        )
    return layers
