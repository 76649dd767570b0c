"""KV-cache reuse between the warm-up pass and generation (paper, Sec. 3).

The warm-up pass runs the question-only prompt once: it yields the selector's features
(``h``, ``r``) and a :class:`transformers.DynamicCache`. Once a chunk is selected, the
generation prompt puts the question first and the chunk after it in the same user turn
(:func:`chunksel.llm.prompts.generation_prompt_ids`), so both prompts share the template
header and the question tokens. The warm-up cache is cropped (``DynamicCache.crop``) to
the longest common token prefix and generation continues from there: only the chunk and
the closing template tokens are prefilled.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from chunksel.features.adapters import ExpertAdapter, make_adapter
from chunksel.features.extract import _pad_id, forward_with_features
from chunksel.llm.prompts import MAX_PROMPT_TOKENS, generation_prompt_ids, question_prompt


@dataclass
class WarmUp:
    """Result of the question-only warm-up pass.

    Attributes:
        ids: the warm-up prompt's token ids.
        cache: its KV cache (a ``DynamicCache``; cropped in place by generation).
        h: ``(d,)`` last-token final hidden state; r: ``(L*E,)`` routing features.
        next_logits: ``(V,)`` logits after the prompt.
    """

    ids: list[int]
    cache: Any
    h: np.ndarray
    r: np.ndarray
    next_logits: np.ndarray


@dataclass
class Generation:
    """Output of :func:`generate_with_reuse`.

    Attributes:
        text: the decoded answer; token_ids: its tokens.
        prompt_len: generation-prompt length; reused: tokens taken from the warm-up cache.
        first_logits: ``(V,)`` logits after the full generation prompt.
    """

    text: str
    token_ids: list[int]
    prompt_len: int
    reused: int
    first_logits: np.ndarray


def _cache_name() -> str:
    """``"cache"`` on transformers versions that renamed ``past_key_values``."""
    from transformers.modeling_outputs import CausalLMOutputWithPast

    return "cache" if "cache" in CausalLMOutputWithPast.__dataclass_fields__ else "past_key_values"


def _crop(cache: Any, keep: int) -> None:
    """Crop ``cache`` to its first ``keep`` tokens (negative-count API: 4.x and 5.x)."""
    drop = cache.get_seq_length() - keep
    if drop > 0:
        cache.crop(-drop)


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def warm_up(
    model: Any,
    tokenizer: Any,
    question: str,
    adapter: ExpertAdapter | None = None,
    max_tokens: int = MAX_PROMPT_TOKENS,
) -> WarmUp:
    """Run the question-only prompt once, keeping its KV cache and the features."""
    adapter = adapter or make_adapter(model)
    prompt = question_prompt(tokenizer, question, max_tokens)
    ids = prompt.ids
    with torch.inference_mode():  # r over the question's tokens, as the feature store has it
        h, r, out = forward_with_features(model, adapter, [ids], _pad_id(tokenizer),
                                          spans=[prompt.span], use_cache=True)
    return WarmUp(ids=ids, cache=getattr(out, _cache_name()), h=h[0].cpu().numpy(),
                  r=r[0].cpu().numpy(), next_logits=out.logits[0, -1].float().cpu().numpy())


def generate_with_reuse(
    model: Any,
    tokenizer: Any,
    question: str,
    chunk: str,
    warm_cache: Any,
    warm_ids: Sequence[int],
    max_new_tokens: int = 32,
) -> Generation:
    """Greedy generation for ``question`` + ``chunk``, continuing from the warm-up cache.

    The cache is cropped **in place** to the longest common prefix of ``warm_ids`` and
    the generation prompt (at most ``prompt_len - 1`` tokens, so at least one token is
    fed); pass ``copy.deepcopy(cache)`` to keep the original.

    Args:
        model, tokenizer: the generator.
        question: the question text; chunk: the selected chunk's text.
        warm_cache: the warm-up pass's ``DynamicCache``; warm_ids: its prompt ids.
        max_new_tokens: generation budget (stops early at the end-of-sequence token).
    """
    ids = generation_prompt_ids(tokenizer, question, chunk)
    keep = min(common_prefix(warm_ids, ids), len(ids) - 1)
    device = next(model.parameters()).device
    eos = getattr(tokenizer, "eos_token_id", None)
    _crop(warm_cache, keep)
    name = _cache_name()
    out_ids: list[int] = []
    with torch.inference_mode():
        step = torch.tensor([ids[keep:]], device=device)
        pos = keep
        first = None
        cache = warm_cache
        for _ in range(max(1, max_new_tokens)):
            n = step.shape[1]
            out = model(input_ids=step, use_cache=True, **{name: cache},
                        position_ids=torch.arange(pos, pos + n, device=device)[None])
            cache = getattr(out, name)
            logits = out.logits[0, -1]
            if first is None:
                first = logits.float().cpu().numpy()
            pos += n
            nxt = int(logits.argmax())
            if eos is not None and nxt == eos:
                break
            out_ids.append(nxt)
            if len(out_ids) >= max_new_tokens:
                break
            step = torch.tensor([[nxt]], device=device)
    text = tokenizer.decode(out_ids, skip_special_tokens=True)
    return Generation(text=text, token_ids=out_ids, prompt_len=len(ids), reused=keep,
                      first_logits=first)
