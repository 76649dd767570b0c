"""The OpenAI-compatible HTTP backend: ``POST <base_url>/chat/completions``.

Works with any server that speaks the chat-completions API (OpenAI, vLLM, llama.cpp's
server, Ollama, LM Studio, ...). Needs the ``llm-http`` extra (``httpx``); importing this
module without it raises :class:`~chunksel.errors.MissingExtraError`.

Requests:

- **Retries**: a timeout, a connection error, status 408, 429 or 5xx, and a 200 whose
  body is not a well-formed chat completion (invalid or truncated JSON, no choices) are
  retried up to ``max_retries`` times. The wait before retry ``n`` (from 0) is
  ``min(max_backoff, backoff * 2**n)`` times a jitter factor drawn uniformly in
  [0.5, 1], and at least the server's ``Retry-After`` (seconds or an HTTP date, capped
  at ``max_retry_after``). Other 4xx statuses fail at once. A request that fails for
  good raises :class:`~chunksel.llm.backends.BackendError` naming the URL, the attempts
  and the last status or error.
- **Concurrency**: a batch is sent from a thread pool; at most ``max_concurrency``
  requests are in flight per backend (a semaphore, shared by every calling thread), and
  at most ``requests_per_second`` start per second (attempts and retries alike).
- **API key**: read from the environment variable ``api_key_env`` (default
  ``OPENAI_API_KEY``) when the backend is built; sent as a bearer token when set, never
  logged or shown in ``repr`` or errors.

:meth:`OpenAIBackend.choose_many` asks for ``logprobs`` / ``top_logprobs`` and scores the
options from them (:func:`~chunksel.llm.backends.option_logprobs_from_steps`); when the
server returns none, or none of the options is among them, it parses the text with
:func:`~chunksel.llm.backends.parse_choice` (explicit default, failures recorded).

- **Servers without log-probabilities**: a request refused with status 400 whose body
  names ``logprobs`` is sent again at once without them (not a retry); the backend stops
  asking for them (``logprobs_refused``), reads decisions from the text, and counts each
  refusal in ``usage.logprob_refusals``.
- **Reasoning models**: ``max_tokens_field="max_completion_tokens"`` for APIs that take
  that name (OpenAI's reasoning models); ``<think>...</think>`` blocks are removed from
  the text before anything parses it, and the top tokens are read after the block
  (:func:`~chunksel.llm.parsing.strip_reasoning`); ``extra_body`` carries fields such as
  ``{"chat_template_kwargs": {"enable_thinking": false}}`` or ``reasoning_effort``.
- **Cache key**: :meth:`OpenAIBackend.settings` holds the URL and every request setting
  (``top_logprobs``, the choice budget, the token field, ``extra_body``), so two servers
  that serve the same model name never share cached answers.
"""

from __future__ import annotations

import email.utils
import json
import logging
import math
import os
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chunksel.errors import ConfigError, DataError, require
from chunksel.llm.backends import (
    BackendError,
    Choice,
    Generation,
    LLMBackend,
    Prompt,
    TokenStep,
    check_options,
    choice_from_logprobs,
    choice_from_text,
    normalize_prompt,
    option_logprobs_from_steps,
    steps_after_reasoning,
    strip_reasoning,
)

httpx = require("httpx", "llm-http")

log = logging.getLogger(__name__)

#: statuses retried besides 5xx
RETRY_STATUSES = frozenset({408, 429})


class MalformedResponse(ValueError):
    """A 200 response whose body is not a usable chat completion."""


class _RateLimiter:
    """At most ``rate`` starts per second: each caller reserves the next free slot."""

    def __init__(self, rate: float | None) -> None:
        self.interval = 1.0 / rate if rate else 0.0
        self._next = 0.0
        self._lock = threading.Lock()

    def wait(self) -> None:
        if not self.interval:
            return
        with self._lock:
            now = time.monotonic()
            at = max(now, self._next)
            self._next = at + self.interval
        if at > now:
            time.sleep(at - now)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta seconds or an HTTP date).

    Returns:
        A non-negative number of seconds, or ``None`` for a missing or unreadable header.
    """
    if not value:
        return None
    value = value.strip()
    try:
        secs = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        secs = when.timestamp() - time.time()
    return max(0.0, secs) if math.isfinite(secs) else None


def _completion(data: Any) -> dict[str, Any]:
    """The first choice of a chat-completion body, validated."""
    if not isinstance(data, dict):
        raise MalformedResponse(f"body is a JSON {type(data).__name__}, not an object")
    if "error" in data and "choices" not in data:
        raise MalformedResponse(f"body is an error object: {str(data['error'])[:200]}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise MalformedResponse("body has no 'choices'")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise MalformedResponse("choices[0] has no 'message'")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise MalformedResponse("choices[0].message.content is not a string")
    return choices[0]


def _steps(choice: dict[str, Any]) -> list[TokenStep] | None:
    """``choices[0].logprobs.content`` as :class:`TokenStep` s (``None`` when absent)."""
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if not isinstance(content, list) or not content:
        return None
    steps = []
    for item in content:
        if not isinstance(item, dict) or "token" not in item or "logprob" not in item:
            return None
        top = tuple(
            (str(t["token"]), float(t["logprob"]))
            for t in item.get("top_logprobs") or []
            if isinstance(t, dict) and "token" in t and "logprob" in t
        )
        steps.append(TokenStep(str(item["token"]), float(item["logprob"]), top))
    return steps


class OpenAIBackend(LLMBackend):
    """A client of an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``https://api.openai.com/v1`` or
            ``http://127.0.0.1:8000/v1``; ``/chat/completions`` is appended (unless the
            URL already ends with it).
        model: the model name sent to the server; also the backend's ``model_id``.
        api_key_env: environment variable holding the API key (optional for local
            servers).
        timeout: seconds per request (connect, read and write each).
        max_retries: retries after the first attempt.
        backoff: base of the exponential backoff, in seconds.
        max_backoff: cap of the exponential backoff.
        max_retry_after: cap on a server's ``Retry-After``.
        max_concurrency: requests in flight at once.
        requests_per_second: request starts per second (``None``: no limit).
        top_logprobs: top tokens per position asked for by :meth:`choose_many`
            (0: do not ask for log-probabilities, parse the text).
        choose_max_tokens: ``max_tokens`` of a :meth:`choose_many` request (a reasoning
            model needs room for its ``<think>`` block).
        max_tokens_field: the request field of the token budget: ``"max_tokens"`` or
            ``"max_completion_tokens"``.
        extra_body: more JSON fields for every request (e.g. ``{"seed": 0}``); they
            override the backend's own.
        seed: seed of the backoff jitter.
        transport: an ``httpx`` transport (tests, proxies).

    Raises:
        ConfigError: an empty URL or model, or a non-positive limit.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key_env: str = "OPENAI_API_KEY",
        timeout: float = 60.0,
        max_retries: int = 5,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        max_retry_after: float = 120.0,
        max_concurrency: int = 4,
        requests_per_second: float | None = None,
        top_logprobs: int = 20,
        choose_max_tokens: int = 8,
        max_tokens_field: str = "max_tokens",
        extra_body: dict[str, Any] | None = None,
        seed: int | None = None,
        transport: Any = None,
    ) -> None:
        super().__init__()
        if not base_url or not base_url.strip():
            raise ConfigError("OpenAIBackend needs a base_url, e.g. http://127.0.0.1:8000/v1")
        if not model or not model.strip():
            raise ConfigError("OpenAIBackend needs a model name")
        if timeout <= 0 or max_concurrency < 1 or max_retries < 0 or backoff < 0:
            raise ConfigError(
                "OpenAIBackend needs timeout > 0, max_concurrency >= 1, max_retries >= 0 "
                "and backoff >= 0"
            )
        if max_tokens_field not in ("max_tokens", "max_completion_tokens"):
            raise ConfigError(
                f"max_tokens_field must be 'max_tokens' or 'max_completion_tokens', got {max_tokens_field!r}")
        if extra_body is not None and not isinstance(extra_body, dict):
            raise ConfigError(f"extra_body must be a JSON object, got {type(extra_body).__name__}")
        if requests_per_second is not None and requests_per_second <= 0:
            raise ConfigError(f"requests_per_second must be > 0, got {requests_per_second}")
        url = base_url.rstrip("/")
        self.url = url if url.endswith("/chat/completions") else url + "/chat/completions"
        self.model_id = model
        self.api_key_env = api_key_env
        self.timeout = float(timeout)
        self.max_retries = int(max_retries)
        self.backoff = float(backoff)
        self.max_backoff = float(max_backoff)
        self.max_retry_after = float(max_retry_after)
        self.max_concurrency = int(max_concurrency)
        self.requests_per_second = requests_per_second
        self.top_logprobs = int(top_logprobs)
        self.choose_max_tokens = int(choose_max_tokens)
        self.max_tokens_field = max_tokens_field
        self.extra_body = dict(extra_body or {})
        self.logprobs_refused = False
        self._rng = random.Random(seed)
        self._limiter = _RateLimiter(requests_per_second)
        self._slots = threading.BoundedSemaphore(self.max_concurrency)
        headers = {"Content-Type": "application/json"}
        key = os.environ.get(api_key_env, "") if api_key_env else ""
        if key:
            headers["Authorization"] = f"Bearer {key}"
        self._client = httpx.Client(
            timeout=httpx.Timeout(self.timeout),
            headers=headers,
            limits=httpx.Limits(max_connections=self.max_concurrency),
            transport=transport,
        )

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> OpenAIBackend:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"OpenAIBackend(url={self.url!r}, model={self.model_id!r})"

    def settings(self) -> dict[str, Any]:
        """The server's URL and every request setting: they join the cache key."""
        return {"url": self.url, "top_logprobs": self.top_logprobs,
                "choose_max_tokens": self.choose_max_tokens,
                "max_tokens_field": self.max_tokens_field, "extra_body": self.extra_body}

    # -- one request with retries
    def _delay(self, attempt: int, retry_after: float | None) -> float:
        base = min(self.max_backoff, self.backoff * (2 ** attempt))
        delay = base * (0.5 + 0.5 * self._rng.random())
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.max_retry_after))
        return delay

    def post(self, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send one chat-completion request, retrying as the module docstring says.

        Args:
            body: the JSON request.

        Returns:
            ``(full response body, its first choice)``.

        Raises:
            BackendError: a non-retryable status, or every attempt failed.
        """
        attempts = self.max_retries + 1
        last = "no attempt"
        attempt = -1
        while attempt + 1 < attempts:
            attempt += 1
            retry_after = None
            refused = False
            with self._slots:
                self._limiter.wait()
                try:
                    resp = self._client.post(self.url, json=body)
                except httpx.TimeoutException as err:
                    last = f"timed out after {self.timeout:g}s ({type(err).__name__})"
                except httpx.TransportError as err:
                    last = f"connection error ({type(err).__name__}: {err})"
                else:
                    status = resp.status_code
                    if status == 200:
                        try:
                            data = json.loads(resp.content)
                            return data, _completion(data)
                        except (ValueError, UnicodeDecodeError) as err:
                            last = f"status 200 with a malformed body ({err})"
                    elif status in RETRY_STATUSES or status >= 500:
                        last = f"status {status}"
                        retry_after = parse_retry_after(resp.headers.get("Retry-After"))
                    elif status == 400 and "logprobs" in body and "logprob" in resp.text.lower():
                        refused = True
                    else:
                        raise BackendError(
                            f"POST {self.url} failed with status {status} (not retried): "
                            f"{resp.text[:300]!r}"
                        )
            if refused:  # the server takes no log-probabilities: ask again without them
                body = {k: v for k, v in body.items() if k not in ("logprobs", "top_logprobs")}
                with self._usage_lock:
                    self.usage.logprob_refusals += 1
                if not self.logprobs_refused:
                    log.warning("POST %s refused logprobs (%s); decisions are read from the text",
                                self.url, resp.text[:200])
                self.logprobs_refused = True
                attempt -= 1
                continue
            if attempt + 1 < attempts:
                delay = self._delay(attempt, retry_after)
                with self._usage_lock:
                    self.usage.retries += 1
                log.warning("POST %s: %s; retry %d/%d in %.2fs", self.url, last, attempt + 1,
                            self.max_retries, delay)
                time.sleep(delay)
        raise BackendError(f"POST {self.url} failed after {attempts} attempts; last: {last}")

    def _body(self, prompt: Prompt, max_tokens: int, temperature: float, top_logprobs: int) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self.model_id,
            "messages": normalize_prompt(prompt),
            self.max_tokens_field: max_tokens,
            "temperature": temperature,
            "n": 1,
        }
        if top_logprobs > 0 and not self.logprobs_refused:
            body["logprobs"] = True
            body["top_logprobs"] = top_logprobs
        body.update(self.extra_body)
        return body

    def _map(self, fn: Any, items: Sequence[Any]) -> list[Any]:
        if len(items) == 1:
            return [fn(items[0])]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    @staticmethod
    def _usage(data: dict[str, Any]) -> tuple[int, int]:
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        return int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0)

    # -- the interface
    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """One request per prompt, sent concurrently; see :meth:`LLMBackend.generate`.

        Raises:
            DataError: no prompts, an empty prompt, or ``max_new_tokens < 1``.
            BackendError: a request failed for good.
        """
        if isinstance(prompts, str) or not prompts:
            raise DataError("generate() needs a non-empty list of prompts")
        if max_new_tokens < 1:
            raise DataError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        bodies = [self._body(p, max_new_tokens, temperature, top_logprobs) for p in prompts]

        def one(body: dict[str, Any]) -> Generation:
            t0 = time.perf_counter()
            data, choice = self.post(body)
            n_in, n_out = self._usage(data)
            steps = _steps(choice) if top_logprobs > 0 else None
            top = None
            if steps:
                top = tuple(s.top or ((s.token, s.logprob),) for s in steps_after_reasoning(steps))
            return Generation(
                text=strip_reasoning(choice["message"].get("content") or ""), tokens_in=n_in, tokens_out=n_out,
                seconds=time.perf_counter() - t0, finish_reason=choice.get("finish_reason"),
                top_logprobs=top,
            )

        out = self._map(one, bodies)
        self._record(out, len(out))
        return out

    def choose_many(
        self, prompts: Sequence[Prompt], options: Sequence[str], *, default: str | None = None
    ) -> list[Choice]:
        """One request per prompt; options scored from log-probabilities when the server
        returns them, else read from the text.

        Args:
            prompts: the prompts.
            options: the fixed options.
            default: the option a text answer that names none falls back to (``None``:
                the first option); such answers are recorded in ``parse_failures``.

        Raises:
            DataError: no prompts, an empty prompt, bad options or a bad default.
            BackendError: a request failed for good.
        """
        if isinstance(prompts, str) or not prompts:
            raise DataError("choose_many() needs a non-empty list of prompts")
        opts = check_options(options)
        if default is not None and default not in opts:
            raise DataError(f"default {default!r} is not one of the options {list(opts)}")
        bodies = [self._body(p, self.choose_max_tokens, 0.0, self.top_logprobs) for p in prompts]

        def one(body: dict[str, Any]) -> Choice:
            t0 = time.perf_counter()
            data, choice = self.post(body)
            n_in, n_out = self._usage(data)
            text = strip_reasoning(choice["message"].get("content") or "")
            steps = _steps(choice)
            seconds = time.perf_counter() - t0
            if steps is not None:
                steps = steps_after_reasoning(steps)
            if steps:
                lps = option_logprobs_from_steps(opts, steps)
                if any(math.isfinite(lp) for lp in lps):
                    return choice_from_logprobs(opts, lps, text=text, tokens_in=n_in,
                                                tokens_out=n_out, seconds=seconds)
            return choice_from_text(opts, text, default, tokens_in=n_in, tokens_out=n_out,
                                    seconds=seconds)

        out = self._map(one, bodies)
        self._record(out, len(out))
        return out


__all__ = ["MalformedResponse", "OpenAIBackend", "RETRY_STATUSES", "parse_retry_after"]
