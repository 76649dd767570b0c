"""Prompts for the generator: the question-only warm-up prompt, the generation prompt
(question first, then the selected chunk, in the same user turn) and a template hash.

The warm-up prompt is the model's chat template with the question as the user turn and
the generation prompt added, no chunks (paper, Sec. 4: "official instruction template
truncated to 512 tokens, strictly excluding retrieved chunks"). A prompt over
``max_tokens`` has its *question text* cut at its end; the template's closing tokens
(end of turn, assistant header) stay. Because the generation prompt starts with the same
tokens as the warm-up prompt up to the end of the question, the warm-up KV cache can be
reused (see :mod:`chunksel.features.kv`).
"""

from __future__ import annotations

import hashlib
import warnings
from dataclasses import dataclass
from typing import Any

from chunksel.errors import ConfigError, DataError

MAX_PROMPT_TOKENS = 512
#: version of the warm-up features' definition, part of :func:`template_hash` (2: Eq. 2's
#: mean runs over the question's own tokens, not the whole chat prompt)
FEATURE_VERSION = 2
#: separator between the question and the selected chunk in the generation prompt
CHUNK_SEPARATOR = "\n\nContext:\n"
#: fixed probe question whose rendered prompt keys the feature store
PROBE_QUESTION = "Which river flows through the city of Paris?"

_warned = {"truncation": False}


def reset_truncation_warning() -> None:
    """Let the next truncation warn again (the warning is issued once per process)."""
    _warned["truncation"] = False


def _render(tokenizer: Any, content: str) -> str:
    if not getattr(tokenizer, "chat_template", None):
        raise ConfigError("the generator's tokenizer has no chat template")
    return tokenizer.apply_chat_template(
        [{"role": "user", "content": content}], tokenize=False, add_generation_prompt=True
    )


def _encode(tokenizer: Any, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def render_ids(tokenizer: Any, content: str) -> list[int]:
    """Token ids of the chat template with ``content`` as the user turn."""
    return _encode(tokenizer, _render(tokenizer, content))


@dataclass(frozen=True)
class QuestionPrompt:
    """The warm-up prompt of one question.

    Attributes:
        ids: token ids of the whole chat prompt (template + question + generation prompt).
        span: ``(start, end)``: the positions in ``ids`` of the question's own tokens
            (those whose characters overlap the question text), the ``T`` tokens that
            Eq. 2's mean runs over.
    """

    ids: list[int]
    span: tuple[int, int]


def _question_span(tokenizer: Any, text: str, content: str, n_ids: int) -> tuple[int, int]:
    """Token positions of ``content`` (the user turn) inside the rendered prompt ``text``."""
    c0 = text.rfind(content)
    if c0 < 0:
        raise DataError("the chat template changed the question text: cannot locate its tokens")
    c1 = c0 + len(content)
    try:
        enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        offsets = enc["offset_mapping"]
    except (NotImplementedError, TypeError, ValueError, KeyError):
        offsets = None
    if offsets is not None and len(offsets) == n_ids:
        inside = [i for i, (a, b) in enumerate(offsets) if b > a and a < c1 and b > c0]
        if inside:
            return inside[0], inside[-1] + 1
    # slow tokenizers: the prefix up to the question and up to its end, encoded alone
    start = len(_encode(tokenizer, text[:c0]))
    end = len(_encode(tokenizer, text[:c1]))
    if not 0 <= start < end <= n_ids:
        raise DataError("cannot locate the question's tokens in the warm-up prompt")
    return start, end


def question_prompt(
    tokenizer: Any, question: str, max_tokens: int = MAX_PROMPT_TOKENS
) -> QuestionPrompt:
    """The question-only warm-up prompt, at most ``max_tokens`` long, with the question's span.

    Args:
        tokenizer: a Hugging Face tokenizer with a chat template.
        question: the question text (the user turn).
        max_tokens: prompt length limit; a longer prompt has its question cut at its end
            (a warning says so, once per process).

    Raises:
        DataError: empty question, or the template alone exceeds ``max_tokens``.
    """
    if not question or not question.strip():
        raise DataError("empty question text: the generator prompt needs a question")
    content = question
    ids = render_ids(tokenizer, question)
    if len(ids) > max_tokens:
        q_ids = _encode(tokenizer, question)
        keep = len(q_ids) - (len(ids) - max_tokens)
        while True:
            if keep <= 0:
                raise DataError(
                    f"the chat template alone is longer than {max_tokens} tokens; raise max_tokens"
                )
            content = tokenizer.decode(q_ids[:keep], skip_special_tokens=True)
            ids = render_ids(tokenizer, content) if content.strip() else []
            if ids and len(ids) <= max_tokens:
                break
            keep -= max(1, len(ids) - max_tokens) if ids else 1
        if not _warned["truncation"]:
            _warned["truncation"] = True
            warnings.warn(
                f"question prompts over {max_tokens} tokens are cut at the end of the question "
                f"(first: {question[:40]!r}...)",
                stacklevel=2,
            )
    span = _question_span(tokenizer, _render(tokenizer, content), content, len(ids))
    return QuestionPrompt(ids=ids, span=span)


def question_prompt_ids(
    tokenizer: Any, question: str, max_tokens: int = MAX_PROMPT_TOKENS
) -> list[int]:
    """Token ids of the question-only warm-up prompt (see :func:`question_prompt`)."""
    return question_prompt(tokenizer, question, max_tokens).ids


def prompt_hash(ids: list[int], length: int = 16) -> str:
    """Short sha256 of a prompt's token ids (keys a stored feature row to its exact prompt)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:length]


def generation_prompt_ids(
    tokenizer: Any, question: str, chunk: str, max_tokens: int | None = None
) -> list[int]:
    """Token ids of the generation prompt: question first, then the chunk, one user turn.

    The user content is ``question + CHUNK_SEPARATOR + chunk``; with ``max_tokens`` set,
    the chunk (never the question) is cut at its end to fit.
    """
    if not question or not question.strip():
        raise DataError("empty question text: the generator prompt needs a question")
    content = question + CHUNK_SEPARATOR + chunk
    ids = render_ids(tokenizer, content)
    if max_tokens is None or len(ids) <= max_tokens:
        return ids
    c_ids = _encode(tokenizer, chunk)
    keep = len(c_ids) - (len(ids) - max_tokens)
    while keep > 0:
        ids = render_ids(
            tokenizer,
            question + CHUNK_SEPARATOR + tokenizer.decode(c_ids[:keep], skip_special_tokens=True),
        )
        if len(ids) <= max_tokens:
            return ids
        keep -= max(1, len(ids) - max_tokens)
    return render_ids(tokenizer, question + CHUNK_SEPARATOR)


def template_hash(tokenizer: Any, max_tokens: int = MAX_PROMPT_TOKENS, length: int = 12) -> str:
    """Short sha256 of the warm-up prompt rendered for :data:`PROBE_QUESTION`.

    Two tokenizers (or template versions) that render and tokenise the probe identically
    share feature-store entries; ``max_tokens`` is part of the key.
    """
    text = _render(tokenizer, PROBE_QUESTION)
    ids = _encode(tokenizer, text)
    blob = f"{text}\n{ids}\n{max_tokens}\nfeatures-v{FEATURE_VERSION}".encode()
    return hashlib.sha256(blob).hexdigest()[:length]
