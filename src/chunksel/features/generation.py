"""Generation from chunks with KV reuse: the local generator continues the question's
warm-up KV cache (:mod:`chunksel.features.kv`, beside it: the prompt builder and the one
decoding loop it drives), cropped to the longest common token prefix with the generation
prompt (:func:`chunksel.llm.prompts.generation_prompt_ids`), so only the chunk(s) and the
closing template tokens are prefilled. The "no context" prompt *is*
the warm-up prompt, so it prefills a single token.

Per answer it records the prefilled tokens, the **time to first token** (TTFT: the
prefill forward pass, logits of the last position only, and the first argmax, from a
cache already in memory) and the **peak memory**: the growth of the process's peak
resident set (``VmHWM`` of ``/proc/self/status``, reset through ``/proc/self/clear_refs``
before each answer, minus ``VmRSS`` before it; torch's CPU tensors are invisible to
tracemalloc, so RSS it is). Without ``/proc`` (not Linux) the memory figures are
``None``. Optionally it also times a fresh prefill of the whole prompt, no cache.

:class:`AnswerCache`: answers are appended to a small JSONL file per (generator, settings)
under ``<cache>/answers/``; a (question, chunk ids) pair is generated once, and a killed
run resumes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from chunksel.config import cache_root, config_hash
from chunksel.errors import DataError

#: version of the answer records' definition (part of the cache key)
ANSWER_VERSION = 2  # 2: logits of the last position only (TTFT and memory as a runtime would)


# ---------------------------------------------------------------- memory
def _status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        return None
    return None


def reset_peak_rss() -> bool:
    """Reset the process's peak RSS (VmHWM) to its current RSS (Linux >= 4.0); False where
    not allowed."""
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
        return True
    except OSError:
        return False


# ---------------------------------------------------------------- generation
@dataclass
class Answer:
    """One generated answer and its costs.

    Attributes:
        text: the answer (special tokens removed).
        tokens_out: generated tokens (end of sequence excluded).
        prompt_tokens: generation-prompt length.
        prefill_tokens: tokens prefilled (prompt minus those reused from the warm-up).
        ttft_ms: time to first token with KV reuse.
        ttft_ms_noreuse: TTFT of a fresh prefill of the whole prompt (``None`` if not measured).
        first_token_agrees: the fresh prefill's first token equals the reused one's.
        peak_rss_mb: peak resident-set growth during the answer (``None`` without /proc).
        seconds: wall time of the whole answer.
        prompt: a hash of the prompt token ids (the cache checks it).
    """

    text: str
    tokens_out: int
    prompt_tokens: int
    prefill_tokens: int
    ttft_ms: float
    ttft_ms_noreuse: float | None
    first_token_agrees: bool | None
    peak_rss_mb: float | None
    seconds: float
    prompt: str


def ids_hash(ids: Sequence[int]) -> str:
    """A short hash of token ids (an answer record's ``prompt``: the cache checks it)."""
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()[:16]


class Generator:
    """The local generator with KV reuse from the question-only warm-up pass.

    Args:
        generator: a :class:`~chunksel.llm.local.LocalBackend` (its loaded model is used),
            a model folder / ``.gguf`` path, or ``None`` for SmolLM2-135M-Instruct.
        max_new_tokens: the answer budget (greedy decoding).
    """

    def __init__(self, generator: Any = None, max_new_tokens: int = 32) -> None:
        if max_new_tokens < 1:
            raise DataError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if generator is not None and hasattr(generator, "model") and hasattr(generator, "tokenizer"):
            self.model, self.tokenizer, self.model_id = generator.model, generator.tokenizer, generator.model_id
        else:
            from chunksel.llm.models import load_generator

            self.model, self.tokenizer, self.model_id = load_generator(generator)
        self.max_new_tokens = max_new_tokens
        self.calls = 0  # answers actually generated (cache misses)
        self._warm: tuple[str, Any] | None = None

    def prompt_ids(self, question: str, chunks: Sequence[str]) -> list[int]:
        """The generation prompt's ids (:func:`chunksel.features.kv.answer_prompt_ids`)."""
        from chunksel.features.kv import answer_prompt_ids

        return answer_prompt_ids(self.tokenizer, question, chunks)

    def warm_up(self, question: str) -> Any:
        """The question's warm-up pass (kept for the next answers of the same question)."""
        from chunksel.features.kv import warm_up

        if self._warm is None or self._warm[0] != question:
            self._warm = (question, warm_up(self.model, self.tokenizer, question))
        return self._warm[1]

    def _greedy(self, ids: list[int], cache: Any, keep: int, max_new: int) -> tuple[list[int], float]:
        """:func:`chunksel.features.kv.greedy_decode`: ``(new token ids, TTFT seconds)``."""
        from chunksel.features.kv import greedy_decode

        toks, ttft, _ = greedy_decode(self.model, self.tokenizer, ids, cache, keep, max_new)
        return toks, ttft

    def answer(self, question: str, chunks: Sequence[str], measure_noreuse: bool = True) -> Answer:
        """Generate one answer with KV reuse (and, when asked, time a fresh prefill too)."""
        from chunksel.features.kv import common_prefix

        t_start = time.perf_counter()
        warm = self.warm_up(question)
        ids = self.prompt_ids(question, chunks)
        keep = min(common_prefix(warm.ids, ids), len(ids) - 1)
        cache = copy.deepcopy(warm.cache)
        rss0 = _status_kb("VmRSS")
        peak_ok = reset_peak_rss()
        toks, ttft = self._greedy(ids, cache, keep, self.max_new_tokens)
        hwm = _status_kb("VmHWM")
        peak = (hwm - rss0) / 1024 if peak_ok and hwm is not None and rss0 is not None else None
        del cache
        seconds = time.perf_counter() - t_start
        fresh_ms, agrees = None, None
        if measure_noreuse:
            first, t_fresh = self._greedy(ids, None, 0, 1)
            fresh_ms = 1000 * t_fresh
            agrees = (first[:1] == toks[:1])
        self.calls += 1
        return Answer(
            text=self.tokenizer.decode(toks, skip_special_tokens=True).strip(), tokens_out=len(toks),
            prompt_tokens=len(ids), prefill_tokens=len(ids) - keep, ttft_ms=1000 * ttft,
            ttft_ms_noreuse=fresh_ms, first_token_agrees=agrees,
            peak_rss_mb=None if peak is None else max(0.0, peak), seconds=seconds, prompt=ids_hash(ids),
        )


class AnswerCache:
    """Append-only JSONL of answers keyed by ``question id::chunk ids`` (see module doc).

    A torn last line (a killed writer) is ignored on reading and cut off on the next write.
    """

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.records: dict[str, dict[str, Any]] = {}
        if self.path.is_file():
            data = self.path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):
                with open(self.path, "r+b") as fh:
                    fh.truncate(end)
            for line in data[:end].splitlines():
                try:
                    rec = json.loads(line)
                    self.records[str(rec["key"])] = rec
                except (ValueError, KeyError, TypeError):
                    continue

    @classmethod
    def for_generator(cls, model_id: str, max_new_tokens: int, cache: str | os.PathLike | None = None) -> AnswerCache:
        """The cache file of one generator and its settings."""
        slug = re.sub(r"[^A-Za-z0-9._-]+", "_", model_id)
        from chunksel.features.kv import CHUNK_JOIN

        key = config_hash({"model": model_id, "max_new_tokens": max_new_tokens, "join": CHUNK_JOIN,
                           "version": ANSWER_VERSION})
        return cls(cache_root(cache) / "answers" / slug / f"answers-{key}.jsonl")

    def get(self, key: str) -> dict[str, Any] | None:
        return self.records.get(key)

    def put(self, key: str, answer: Answer) -> None:
        rec = {"key": key, **asdict(answer)}
        line = (json.dumps(rec, ensure_ascii=False) + "\n").encode()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.records[key] = rec
