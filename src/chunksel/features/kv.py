"""KV-cache reuse between the warm-up pass and generation (paper, Sec. 3): the one
generation path of the package.

The warm-up pass runs the question-only prompt once: it yields the selector's features
(``h``, ``r``) and a :class:`transformers.DynamicCache`. Once chunks are selected, the
generation prompt (:func:`answer_prompt_ids`, the one prompt builder) puts the question
first and the chunk(s) after it in the same user turn
(:func:`chunksel.llm.prompts.generation_prompt_ids`), so both prompts share the template
header and the question tokens. The warm-up cache is cropped (``DynamicCache.crop``) to
the longest common token prefix and generation continues from there
(:func:`greedy_decode`, the one decoding loop): only the chunk(s) and the closing
template tokens are prefilled. ``ChunkSelector.answer`` (and the server's ``/answer``)
call :func:`generate_with_reuse`; the study's answer table calls the same prompt builder
and loop through :class:`chunksel.features.generation.Generator`, which adds its measurements
and answer cache.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from chunksel.features.adapters import ExpertAdapter, make_adapter
from chunksel.features.extract import forward_with_features, tokenizer_pad_id
from chunksel.llm.prompts import (
    MAX_PROMPT_TOKENS,
    generation_prompt_ids,
    question_prompt,
    question_prompt_ids,
)

#: separator between several chosen chunks inside the generation prompt's chunk part
CHUNK_JOIN = "\n\n"


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
        text: the decoded answer (special tokens removed, stripped); token_ids: its tokens.
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
        h, r, out = forward_with_features(model, adapter, [ids], tokenizer_pad_id(tokenizer),
                                          spans=[prompt.span], use_cache=True)
    return WarmUp(ids=ids, cache=getattr(out, _cache_name()), h=h[0].cpu().numpy(),
                  r=r[0].cpu().numpy(), next_logits=out.logits[0, -1].float().cpu().numpy())


def answer_prompt_ids(tokenizer: Any, question: str, chunks: str | Sequence[str]) -> list[int]:
    """The generation prompt's ids (the one prompt builder): the question-only prompt when
    there is no chunk, else the question then the chunks, each stripped, joined by
    :data:`CHUNK_JOIN` (in the order given), one user turn."""
    chunks = [chunks] if isinstance(chunks, str) else list(chunks)
    if not chunks:
        return question_prompt_ids(tokenizer, question)
    return generation_prompt_ids(tokenizer, question, CHUNK_JOIN.join(c.strip() for c in chunks))


def greedy_decode(
    model: Any, tokenizer: Any, ids: Sequence[int], cache: Any, keep: int, max_new_tokens: int
) -> tuple[list[int], float, np.ndarray]:
    """Greedy decoding of ``ids[keep:]`` on ``cache`` (cropped **in place** to ``keep``
    tokens; ``None``: a fresh prefill of the whole prompt, ``keep`` 0), the one decoding
    loop: logits of the last position only, at most ``max_new_tokens`` (>= 1) new tokens,
    stopping at the end-of-sequence token.

    Returns:
        ``(new token ids without the end of sequence, time to first token in seconds
        (the prefill pass and the first argmax), the (V,) logits after the prompt)``.
    """
    name = _cache_name()
    device = next(model.parameters()).device
    eos = getattr(tokenizer, "eos_token_id", None)
    if cache is not None:
        _crop(cache, keep)
    out: list[int] = []
    ttft = 0.0
    first = None
    with torch.inference_mode():
        step = torch.tensor([list(ids[keep:])], device=device)
        pos = keep
        t0 = time.perf_counter()
        for i in range(max(1, max_new_tokens)):
            n = step.shape[1]
            kw = {name: cache} if cache is not None else {}
            res = model(input_ids=step, use_cache=True, logits_to_keep=1, **kw,
                        position_ids=torch.arange(pos, pos + n, device=device)[None])
            cache = getattr(res, name)
            nxt = int(res.logits[0, -1].argmax())
            if i == 0:
                ttft = time.perf_counter() - t0
                first = res.logits[0, -1].float().cpu().numpy()
            pos += n
            if eos is not None and nxt == eos:
                break
            out.append(nxt)
            step = torch.tensor([[nxt]], device=device)
    return out, ttft, first


def generate_with_reuse(
    model: Any,
    tokenizer: Any,
    question: str,
    chunks: str | Sequence[str],
    warm_cache: Any,
    warm_ids: Sequence[int],
    max_new_tokens: int = 32,
) -> Generation:
    """Greedy generation for ``question`` + ``chunks``, continuing from the warm-up cache.

    The cache is cropped **in place** to the longest common prefix of ``warm_ids`` and
    the generation prompt (at most ``prompt_len - 1`` tokens, so at least one token is
    fed); pass ``copy.deepcopy(cache)`` to keep the original.

    Args:
        model, tokenizer: the generator.
        question: the question text; chunks: the selected chunk's text, or several (in the
            prompt in the order given; none: the question alone).
        warm_cache: the warm-up pass's ``DynamicCache``; warm_ids: its prompt ids.
        max_new_tokens: generation budget (stops early at the end-of-sequence token).
    """
    ids = answer_prompt_ids(tokenizer, question, chunks)
    keep = min(common_prefix(warm_ids, ids), len(ids) - 1)
    out_ids, _, first = greedy_decode(model, tokenizer, ids, warm_cache, keep, max_new_tokens)
    text = tokenizer.decode(out_ids, skip_special_tokens=True).strip()
    return Generation(text=text, token_ids=out_ids, prompt_len=len(ids), reused=keep, first_logits=first)
