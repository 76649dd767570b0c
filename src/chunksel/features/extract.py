"""Question-side generator features from the warm-up pass: ``h`` and ``r``.

- ``h`` ``(N, d)``: the final-layer hidden state of each question's *last real prompt
  token*, taken from the base model's ``last_hidden_state`` -- i.e. after the final norm,
  the same tensor transformers returns as ``hidden_states[-1]`` (a forward hook on
  ``model.base_model``; ``output_hidden_states`` is never switched on).
- ``r`` ``(N, L*E)``: routing-weighted expert responses (paper, Eq. 2) from the
  architecture's :class:`~chunksel.features.adapters.ExpertAdapter`, averaged over the
  *question's* tokens (``T`` = the question's tokens, as Eq. 2 is written), not over the
  chat template's system prompt and headers around them.

Prompts are the question-only chat prompts of :func:`chunksel.llm.prompts.question_prompt`,
which also gives the question's token span.
Batches are padded (right by default, left supported) with explicit ``position_ids`` so a
question's features do not depend on its batch; padded positions never enter the means.
Questions are processed sorted by prompt length (less padding) and returned in input order.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from chunksel.config import show_progress
from chunksel.errors import ConfigError, DataError
from chunksel.features.adapters import ExpertAdapter, make_adapter
from chunksel.llm.prompts import MAX_PROMPT_TOKENS, question_prompt
from chunksel.types import Question


def pad_batch(
    ids: Sequence[Sequence[int]], pad_id: int, side: str = "right"
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(input_ids, attention_mask, position_ids)`` of a padded batch.

    Position ids count real tokens only (``cumsum(mask) - 1``), so left padding does not
    shift a sequence's positions.
    """
    if side not in ("right", "left"):
        raise ConfigError(f"padding side must be 'right' or 'left', got {side!r}")
    if not ids or any(len(x) == 0 for x in ids):
        raise DataError("cannot run the generator on an empty prompt")
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), int(pad_id), dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        row = torch.as_tensor(list(x), dtype=torch.long)
        sl = slice(0, len(x)) if side == "right" else slice(width - len(x), width)
        input_ids[i, sl] = row
        mask[i, sl] = 1
    position_ids = (mask.cumsum(1) - 1).clamp(min=0)
    return input_ids, mask, position_ids


def span_mask(
    lengths: Sequence[int], spans: Sequence[tuple[int, int]], width: int, side: str = "right"
) -> torch.Tensor:
    """(B, width) bool, True at each prompt's question tokens ``span`` (prompt positions),
    placed as :func:`pad_batch` places the prompts."""
    out = torch.zeros((len(lengths), width), dtype=torch.bool)
    for i, (n, (a, b)) in enumerate(zip(lengths, spans, strict=True)):
        if not 0 <= a < b <= n:
            raise DataError(f"question span {(a, b)} lies outside a prompt of {n} tokens")
        off = 0 if side == "right" else width - n
        out[i, off + a:off + b] = True
    return out


def tokenizer_pad_id(tokenizer: Any) -> int:
    """The id that pads a batch: the pad token, else end of sequence, else unknown, else 0."""
    for name in ("pad_token_id", "eos_token_id", "unk_token_id"):
        value = getattr(tokenizer, name, None)
        if value is not None:
            return int(value)
    return 0


def _supports(model: Any, arg: str) -> bool:
    try:
        return arg in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):  # pragma: no cover
        return False


def forward_with_features(
    model: Any,
    adapter: ExpertAdapter,
    ids: Sequence[Sequence[int]],
    pad_id: int = 0,
    padding_side: str = "right",
    spans: Sequence[tuple[int, int]] | None = None,
    **forward_kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor, Any]:
    """One forward pass over a batch of prompts with the feature hooks attached.

    Args:
        model: a causal LM in eval mode.
        adapter: the model's expert adapter (:func:`make_adapter`).
        ids: token ids of each prompt.
        pad_id: id used for padding (never attended to).
        padding_side: ``"right"`` or ``"left"``.
        spans: each prompt's question-token span ``(start, end)``; ``r`` averages over
            those positions (default: every real token of the prompt).
        **forward_kwargs: passed to ``model(...)`` (e.g. ``use_cache``, ``logits_to_keep``).

    Returns:
        ``(h (B, d), r (B, L*E), model outputs)`` as torch tensors (float32 for ``r``).
    """
    input_ids, mask, position_ids = pad_batch(ids, pad_id, padding_side)
    device = next(model.parameters()).device
    last = (mask * torch.arange(mask.shape[1])).argmax(1)
    grabbed: dict[str, torch.Tensor] = {}

    def grab_last_hidden(_mod, _args, output):
        hs = output[0] if isinstance(output, tuple) else output.last_hidden_state
        grabbed["h"] = hs[torch.arange(hs.shape[0], device=hs.device), last.to(hs.device)]

    positions = mask.bool() if spans is None else span_mask(
        [len(x) for x in ids], spans, mask.shape[1], padding_side
    )
    handle = model.base_model.register_forward_hook(grab_last_hidden)
    try:
        with adapter.capture(positions.to(device)) as cap:
            out = model(
                input_ids=input_ids.to(device),
                attention_mask=mask.to(device),
                position_ids=position_ids.to(device),
                **forward_kwargs,
            )
    finally:
        handle.remove()
    return grabbed["h"].float(), cap.r.reshape(cap.r.shape[0], -1), out


def extract_features(
    model: Any,
    tokenizer: Any,
    questions: Sequence[Question | str],
    batch_size: int = 32,
    progress: bool = True,
    adapter: ExpertAdapter | None = None,
    max_tokens: int = MAX_PROMPT_TOKENS,
    padding_side: str = "right",
) -> dict[str, np.ndarray]:
    """Warm-up features of ``questions``: ``{"h": (N, d), "r": (N, L*E)}`` float32.

    Args:
        model: a causal LM (eval mode; see :func:`chunksel.llm.models.load_generator`).
        tokenizer: its tokenizer, with a chat template.
        questions: :class:`~chunksel.types.Question` records (or plain texts).
        batch_size: prompts per forward pass.
        progress: show a tqdm bar.
        adapter: the expert adapter (default :func:`make_adapter(model)`).
        max_tokens: prompt length limit (questions are cut at their end beyond it).
        padding_side: ``"right"`` (default) or ``"left"``; features do not depend on it.

    Returns:
        ``{"h": (N, d), "r": (N, L*E)}`` numpy float32 arrays in the order of ``questions``.
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
    adapter = adapter or make_adapter(model)
    texts = [q.text if isinstance(q, Question) else str(q) for q in questions]
    built = [question_prompt(tokenizer, t, max_tokens) for t in texts]
    prompts = [p.ids for p in built]
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))
    d = int(model.config.hidden_size)
    h = np.zeros((len(prompts), d), dtype=np.float32)
    r = np.zeros((len(prompts), adapter.r_dim), dtype=np.float32)
    extra = {"use_cache": False}
    if _supports(model, "logits_to_keep"):
        extra["logits_to_keep"] = 1
    pad_id = tokenizer_pad_id(tokenizer)
    starts = range(0, len(order), batch_size)
    bar = tqdm(starts, desc="generator features", unit="batch", disable=not show_progress(progress))
    with torch.inference_mode():
        for start in bar:
            rows = order[start:start + batch_size]
            hb, rb, _ = forward_with_features(
                model, adapter, [prompts[i] for i in rows], pad_id, padding_side,
                spans=[built[i].span for i in rows], **extra,
            )
            h[rows] = hb.cpu().numpy()
            r[rows] = rb.cpu().numpy()
    return {"h": h, "r": r}
