"""One interface for every LLM backend: free-text generation and fixed-option choices.

A backend answers two kinds of request:

- :meth:`LLMBackend.generate`: a batch of prompts (a string, taken as the user turn, or a
  list of chat messages) to :class:`Generation` results (text, tokens in/out, seconds).
- :meth:`LLMBackend.choose`: one prompt and a short list of fixed options (``Yes``/``No``,
  passage numbers) to a :class:`Choice`: the option with the highest log-probability as
  the answer's continuation, with every option's log-probability. Backends that cannot
  score options (an HTTP server without ``logprobs``) parse the generated text instead,
  with :func:`parse_choice`; an output that names no option gets the explicit default and
  is *recorded* (``Choice.parsed`` is false, ``Choice.reason`` says why, and the backend
  keeps a :class:`ParseFailure` in ``parse_failures``), never dropped silently.

Implementations: :class:`chunksel.llm.local.LocalBackend` (a transformers causal LM,
SmolLM2 by default) and :class:`chunksel.llm.openai_http.OpenAIBackend` (any
OpenAI-compatible ``/v1/chat/completions`` server). :func:`get_backend` builds one by name
and imports it lazily. This module imports neither torch nor httpx.
"""

from __future__ import annotations

import dataclasses
import math
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from chunksel.errors import ChunkselError, ConfigError, DataError
from chunksel.llm.parsing import (
    TokenStep,
    check_options,
    option_logprobs_from_steps,
    parse_choice,
    steps_after_reasoning,
    strip_reasoning,
)

#: one chat message: ``{"role": "system" | "user" | "assistant", "content": str}``
Message = Mapping[str, str]
#: a prompt: plain text (the user turn) or a list of chat messages
Prompt = str | Sequence[Message]

_ROLES = ("system", "user", "assistant")


class BackendError(ChunkselError, RuntimeError):
    """A backend request failed for good (after its retries) or returned unusable output."""


@dataclass(frozen=True)
class Generation:
    """One generated answer.

    Attributes:
        text: the generated text (special tokens removed).
        tokens_in: prompt tokens (0 when an HTTP server reports no usage).
        tokens_out: generated tokens, the end-of-sequence token included.
        seconds: wall time spent on this prompt; a batch's time is split evenly over
            its prompts.
        finish_reason: ``"stop"`` (end of sequence), ``"length"`` (``max_new_tokens``
            reached) or what the server said; ``None`` if unknown.
        top_logprobs: per generated position, the most likely next tokens as
            ``(token, log-probability)`` pairs, most likely first; only when asked for.
    """

    text: str
    tokens_in: int
    tokens_out: int
    seconds: float
    finish_reason: str | None = None
    top_logprobs: tuple[tuple[tuple[str, float], ...], ...] | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (tuples become lists)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Generation:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        top = data.get("top_logprobs")
        if top is not None:
            data["top_logprobs"] = tuple(tuple((str(t), float(lp)) for t, lp in pos) for pos in top)
        return cls(**data)


@dataclass(frozen=True)
class Choice:
    """A decision among fixed options.

    Attributes:
        option: the chosen option (always one of ``options``).
        index: its position in ``options``.
        options: the options, in the order given.
        logprobs: per option, its log-probability as the answer (summed over its tokens);
            ``-inf`` for an option the server's top log-probabilities did not include;
            ``None`` when the choice was parsed from text.
        source: ``"logprobs"`` (scored options) or ``"text"`` (parsed from the output).
        parsed: false when the text named no option and ``option`` is the default.
        reason: why the output could not be parsed (``None`` when it could).
        text: the generated text the choice was read from (``""`` for local scoring).
        tokens_in: prompt tokens.
        tokens_out: generated tokens (0 when the options were scored locally).
        seconds: wall time.
    """

    option: str
    index: int
    options: tuple[str, ...]
    logprobs: tuple[float, ...] | None
    source: str
    parsed: bool = True
    reason: str | None = None
    text: str = ""
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0

    def probabilities(self) -> tuple[float, ...] | None:
        """The options' probabilities renormalised over the options (softmax of
        ``logprobs``), or ``None`` without log-probabilities."""
        if self.logprobs is None:
            return None
        finite = [lp for lp in self.logprobs if math.isfinite(lp)]
        if not finite:
            return None
        top = max(finite)
        w = [math.exp(lp - top) if math.isfinite(lp) else 0.0 for lp in self.logprobs]
        s = sum(w)
        return tuple(x / s for x in w)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict; ``-inf`` log-probabilities become ``None`` (strict JSON)."""
        d = dataclasses.asdict(self)
        if self.logprobs is not None:
            d["logprobs"] = [lp if math.isfinite(lp) else None for lp in self.logprobs]
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Choice:
        """Inverse of :meth:`to_dict`."""
        data = dict(data)
        data["options"] = tuple(data["options"])
        if data.get("logprobs") is not None:
            data["logprobs"] = tuple(
                -math.inf if lp is None else float(lp) for lp in data["logprobs"]
            )
        return cls(**data)


@dataclass(frozen=True)
class ParseFailure:
    """An output that named none of the options (kept, with the raw text and the reason).

    Attributes:
        text: the raw generated text.
        options: the options asked for.
        default: the option used instead.
        reason: why no option was read.
    """

    text: str
    options: tuple[str, ...]
    default: str
    reason: str


@dataclass
class Usage:
    """Running totals of one backend's requests.

    Attributes:
        calls: prompts answered (a batch of 8 counts 8).
        requests: forward passes (local) or HTTP requests that got a usable answer.
        retries: HTTP attempts that failed and were retried.
        tokens_in: prompt tokens.
        tokens_out: generated tokens.
        seconds: wall time inside the backend.
        unparsed: choices whose output named no option (see ``parse_failures``).
        logprob_refusals: requests a server refused because they asked for
            log-probabilities (HTTP 400 naming ``logprobs``); each was sent again without
            them and its decision read from the text.
    """

    calls: int = 0
    requests: int = 0
    retries: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    unparsed: int = 0
    logprob_refusals: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


def normalize_prompt(prompt: Prompt) -> list[dict[str, str]]:
    """A prompt as a list of chat messages, validated.

    Args:
        prompt: a non-empty string (the user turn) or a non-empty list of messages, each
            with a ``role`` among system/user/assistant and a string ``content``.

    Returns:
        A new list of ``{"role", "content"}`` dicts.

    Raises:
        DataError: empty prompt, an unknown role, a message without content, or no
            non-empty message at all.
    """
    if isinstance(prompt, str):
        if not prompt.strip():
            raise DataError("empty prompt: an LLM request needs some text")
        return [{"role": "user", "content": prompt}]
    if not isinstance(prompt, Sequence) or not prompt:
        raise DataError("empty prompt: pass a string or a non-empty list of chat messages")
    out = []
    for i, msg in enumerate(prompt):
        if not isinstance(msg, Mapping) or "role" not in msg or "content" not in msg:
            raise DataError(f"chat message {i} needs 'role' and 'content' keys, got {msg!r}")
        role, content = msg["role"], msg["content"]
        if role not in _ROLES:
            raise DataError(f"chat message {i} has role {role!r}; expected one of {_ROLES}")
        if not isinstance(content, str):
            raise DataError(f"chat message {i} content must be a string, got {type(content).__name__}")
        out.append({"role": role, "content": content})
    if not any(m["content"].strip() for m in out):
        raise DataError("empty prompt: every chat message is empty")
    return out


class LLMBackend(ABC):
    """Base class of every LLM backend.

    Subclasses set ``name`` and implement :meth:`generate` and :meth:`choose_many`
    (which :meth:`choose` calls). They keep running totals in ``usage`` and every
    unparseable output in ``parse_failures``.

    Attributes:
        name: short backend name, part of the response-cache key.
        model_id: the model's stable id (set by the subclass), part of the cache key.
    """

    name: ClassVar[str]
    model_id: str

    def __init__(self) -> None:
        self.usage = Usage()
        self.parse_failures: list[ParseFailure] = []
        self._usage_lock = threading.Lock()

    @abstractmethod
    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """Generate one answer per prompt (greedy unless ``temperature > 0``).

        Args:
            prompts: strings (the user turn) or lists of chat messages.
            max_new_tokens: generation limit per prompt.
            temperature: 0 for greedy decoding.
            top_logprobs: with ``n > 0``, each :class:`Generation` carries the ``n``
                most likely tokens at every generated position.
        """

    @abstractmethod
    def choose_many(
        self, prompts: Sequence[Prompt], options: Sequence[str], *, default: str | None = None
    ) -> list[Choice]:
        """:meth:`choose` for several prompts that share the same options."""

    def choose(self, prompt: Prompt, options: Sequence[str], *, default: str | None = None) -> Choice:
        """Pick one of ``options`` as the answer to ``prompt``.

        Args:
            prompt: a string (the user turn) or a list of chat messages.
            options: the fixed answers, e.g. ``["Yes", "No"]`` or ``["1", "2", "3"]``.
            default: the option a text-parsed answer falls back to when it names none
                (``None``: the first option); unused when options are scored.

        Returns:
            The :class:`Choice`.

        Raises:
            DataError: empty prompt, no options, or bad options.
        """
        return self.choose_many([prompt], options, default=default)[0]

    def settings(self) -> dict[str, Any]:
        """Settings that change outputs (beyond the request's own), for the cache key."""
        return {}

    # -- bookkeeping shared by the implementations
    def _record(self, results: Sequence[Generation | Choice], requests: int) -> None:
        with self._usage_lock:
            u = self.usage
            u.calls += len(results)
            u.requests += requests
            for r in results:
                u.tokens_in += r.tokens_in
                u.tokens_out += r.tokens_out
                u.seconds += r.seconds
                if isinstance(r, Choice) and not r.parsed:
                    u.unparsed += 1
                    self.parse_failures.append(
                        ParseFailure(r.text, r.options, r.option, r.reason or "unparsed")
                    )

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={getattr(self, 'model_id', '?')!r})"


def choice_from_logprobs(
    options: tuple[str, ...],
    logprobs: Sequence[float],
    *,
    text: str = "",
    tokens_in: int = 0,
    tokens_out: int = 0,
    seconds: float = 0.0,
) -> Choice:
    """The :class:`Choice` of the option with the highest log-probability (ties: the
    first option)."""
    lps = tuple(float(x) for x in logprobs)
    best = max(range(len(options)), key=lambda i: (lps[i], -i))
    return Choice(
        option=options[best], index=best, options=options, logprobs=lps, source="logprobs",
        text=text, tokens_in=tokens_in, tokens_out=tokens_out, seconds=seconds,
    )


def choice_from_text(
    options: tuple[str, ...],
    text: str,
    default: str | None = None,
    *,
    tokens_in: int = 0,
    tokens_out: int = 0,
    seconds: float = 0.0,
) -> Choice:
    """The :class:`Choice` read from free text by :func:`parse_choice`."""
    idx, reason = parse_choice(text, options, default)
    return Choice(
        option=options[idx], index=idx, options=options, logprobs=None, source="text",
        parsed=reason is None, reason=reason, text=text, tokens_in=tokens_in,
        tokens_out=tokens_out, seconds=seconds,
    )


_BACKENDS = {
    "local": ("chunksel.llm.local", "LocalBackend"),
    "openai": ("chunksel.llm.openai_http", "OpenAIBackend"),
}


def register_backend(name: str, module: str, cls: str) -> None:
    """Make ``get_backend(name)`` build ``module.cls`` (imported on first use); e.g. a
    model-free test double, or a backend of another package.

    Raises:
        ConfigError: ``name`` is a built-in backend.
    """
    if name in ("local", "openai"):
        raise ConfigError(f"backend {name!r} is built in and cannot be replaced")
    _BACKENDS[name] = (module, cls)


def get_backend(name: str, **kwargs: Any) -> LLMBackend:
    """Build a backend by name, importing its module only now.

    Args:
        name: ``"local"`` (:class:`~chunksel.llm.local.LocalBackend`), ``"openai"``
            (:class:`~chunksel.llm.openai_http.OpenAIBackend`) or a name given to
            :func:`register_backend`.
        **kwargs: the backend's constructor arguments.

    Raises:
        ConfigError: unknown name.
        MissingExtraError: the backend's optional dependency is not installed.
    """
    import importlib

    if name not in _BACKENDS:
        raise ConfigError(f"unknown LLM backend {name!r}; expected one of {sorted(_BACKENDS)}")
    module, cls = _BACKENDS[name]
    return getattr(importlib.import_module(module), cls)(**kwargs)


__all__ = [
    "BackendError", "Choice", "Generation", "LLMBackend", "Message", "ParseFailure", "Prompt",
    "TokenStep", "Usage", "check_options", "choice_from_logprobs", "choice_from_text",
    "get_backend", "normalize_prompt", "register_backend", "option_logprobs_from_steps", "parse_choice",
    "steps_after_reasoning", "strip_reasoning",
]
