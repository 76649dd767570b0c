"""An append-only, kill-safe response cache for LLM calls, and a cached map over items.

One JSONL file per *namespace*: backend name, model id, task (``generate`` or
``choose``), a hash of the prompt template and a hash of the decoding settings
(``max_new_tokens``, temperature, options, the backend's own output-changing settings)::

    <cache_root>/llm/<backend>/<model id>/<task>-<template hash>-<settings hash>.jsonl

Inside it, one line per item: ``{"id", "prompt", "kind", "result", "time"}`` where
``prompt`` is a hash of the item's rendered prompt (a changed prompt under the same id is
a miss and its new line supersedes the old one) and ``result`` a
:class:`~chunksel.llm.backends.Generation` or :class:`~chunksel.llm.backends.Choice` as a
dict. A ``.meta.json`` beside the file spells out the namespace.

Crash safety: each record is one ``write`` of a whole line to a file opened with
``O_APPEND``, followed by ``fsync`` (``fsync=False`` keeps the write, skips the sync). After
``kill -9`` at most the line being written is torn; opening the cache cuts a torn last
line off (it is then recomputed), so a re-run loses nothing that was written and
duplicates nothing. Writers take an exclusive ``flock`` per append (POSIX), so two
processes never interleave bytes; the cache assumes one process fills a namespace at a
time (two concurrent ones would both compute, and the later line wins on reading).

:func:`map_cached` maps items through a backend, calling it only for misses, in batches,
with a tqdm bar that honours :func:`chunksel.config.show_progress`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from chunksel.config import cache_root, config_hash, show_progress, stable_json
from chunksel.errors import DataError
from chunksel.llm.backends import (
    Choice,
    Generation,
    LLMBackend,
    Prompt,
    check_options,
    normalize_prompt,
)

try:  # POSIX only; elsewhere appends rely on O_APPEND alone
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None  # type: ignore[assignment]

T = TypeVar("T")

_KINDS = {"generation": Generation, "choice": Choice}


def template_hash(template: str, length: int = 12) -> str:
    """Short sha256 of a prompt template's text."""
    if not isinstance(template, str) or not template.strip():
        raise DataError("the prompt template (its text, for the cache key) must be a non-empty string")
    return hashlib.sha256(template.encode()).hexdigest()[:length]


def prompt_hash(prompt: Prompt, length: int = 16) -> str:
    """Short sha256 of a prompt, normalised to chat messages (validates it)."""
    return hashlib.sha256(stable_json(normalize_prompt(prompt)).encode()).hexdigest()[:length]


def _slug(text: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "model"
    if safe != text:
        safe = f"{safe[:80]}-{hashlib.sha256(text.encode()).hexdigest()[:8]}"
    return safe


@dataclass
class CacheStats:
    """Accounting of one :func:`map_cached` run.

    Attributes:
        items: items mapped.
        hits: items answered from the cache.
        misses: items sent to the backend.
        calls: backend calls made (batches of misses).
        tokens_in: prompt tokens of the new calls.
        tokens_out: generated tokens of the new calls.
        seconds: backend time of the new calls.
        saved_seconds: backend time the hits had cost when they were computed.
        unparsed: results (hits included) whose output named no option.
    """

    items: int = 0
    hits: int = 0
    misses: int = 0
    calls: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    seconds: float = 0.0
    saved_seconds: float = 0.0
    unparsed: int = 0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict."""
        return dataclasses.asdict(self)


class ResponseCache:
    """One namespace's append-only JSONL file of LLM results, keyed by item id.

    Args:
        path: the JSONL file (created with its folder when absent).
        fsync: ``fsync`` after every record (durable against power loss too; a killed
            process loses nothing either way once ``write`` returned).

    Attributes:
        torn: bytes of a torn last line cut off when the file was opened.
        corrupt: complete lines that were not valid records (skipped, with a warning).
    """

    def __init__(self, path: str | os.PathLike, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.fsync = fsync
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._records: dict[str, dict[str, Any]] = {}
        self.torn = 0
        self.corrupt = 0
        self._thread_lock = threading.Lock()  # flock does not exclude threads of one process
        self._fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        self._load()

    @classmethod
    def for_backend(
        cls,
        backend: LLMBackend,
        *,
        task: str,
        template: str,
        settings: dict[str, Any] | None = None,
        cache: str | os.PathLike | None = None,
        fsync: bool = True,
    ) -> ResponseCache:
        """The cache of one namespace (see the module docstring).

        Args:
            backend: the backend (its ``name``, ``model_id`` and ``settings()``).
            task: ``"generate"`` or ``"choose"``.
            template: the prompt template's text (hashed).
            settings: the request's decoding settings.
            cache: cache root (default :func:`chunksel.config.cache_root`).
            fsync: see the class.
        """
        key = {
            "backend": backend.name,
            "model": backend.model_id,
            "task": task,
            "template": template_hash(template),
            "settings": {**(settings or {}), **backend.settings()},
        }
        folder = cache_root(cache) / "llm" / _slug(backend.name) / _slug(backend.model_id)
        path = folder / f"{task}-{key['template']}-{config_hash(key['settings'])}.jsonl"
        out = cls(path, fsync=fsync)
        meta = path.with_name(path.stem + ".meta.json")
        if not meta.is_file():
            tmp = meta.with_name(meta.name + f".{os.getpid()}.part")
            tmp.write_text(json.dumps(key, indent=1, sort_keys=True, default=str) + "\n")
            os.replace(tmp, meta)
        return out

    # -- file handling
    def _lock(self, exclusive: bool = True) -> None:
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)

    def _unlock(self) -> None:
        if fcntl is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def _load(self) -> None:
        self._lock()
        try:
            data = self.path.read_bytes()
            end = data.rfind(b"\n") + 1
            if end < len(data):  # a torn last line (killed mid-write): cut it off
                self.torn = len(data) - end
                os.ftruncate(self._fd, end)
                os.fsync(self._fd)
        finally:
            self._unlock()
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                if not isinstance(rec, dict) or rec.get("kind") not in _KINDS:
                    raise ValueError("not a record")
                str(rec["id"]), rec["prompt"], dict(rec["result"])
            except (ValueError, KeyError, TypeError):
                self.corrupt += 1
                continue
            self._records[str(rec["id"])] = rec
        if self.corrupt:
            warnings.warn(
                f"{self.path}: skipped {self.corrupt} unreadable line(s); those items are recomputed",
                stacklevel=3,
            )

    def close(self) -> None:
        """Close the file."""
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> ResponseCache:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - depends on the garbage collector
        try:
            self.close()
        except Exception:
            pass

    # -- records
    def __len__(self) -> int:
        return len(self._records)

    def __contains__(self, item_id: object) -> bool:
        return item_id in self._records

    def get(self, item_id: str, prompt: str | None = None) -> Generation | Choice | None:
        """The cached result of ``item_id`` (``None`` when absent, or when ``prompt`` is
        given and the record was made from another prompt)."""
        rec = self._records.get(item_id)
        if rec is None or (prompt is not None and rec["prompt"] != prompt):
            return None
        return _KINDS[rec["kind"]].from_dict(rec["result"])

    def put(self, item_id: str, prompt: str, result: Generation | Choice) -> None:
        """Append one record (one whole line, then ``fsync``)."""
        kind = "choice" if isinstance(result, Choice) else "generation"
        rec = {"id": item_id, "prompt": prompt, "kind": kind, "result": result.to_dict(),
               "time": round(time.time(), 3)}
        line = (json.dumps(rec, ensure_ascii=False, allow_nan=False) + "\n").encode()
        with self._thread_lock:
            self._append(line)
        self._records[item_id] = rec

    def _append(self, line: bytes) -> None:
        self._lock()
        try:
            view = memoryview(line)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self.fsync:
                os.fsync(self._fd)
        finally:
            self._unlock()

    def records(self) -> dict[str, dict[str, Any]]:
        """Every record by item id (the latest line of each id)."""
        return dict(self._records)

    def failures(self) -> list[dict[str, Any]]:
        """Records of choices whose output named no option: id, raw text, reason, default."""
        out = []
        for item_id, rec in self._records.items():
            res = rec["result"]
            if rec["kind"] == "choice" and not res.get("parsed", True):
                out.append({"id": item_id, "text": res.get("text", ""), "reason": res.get("reason"),
                            "default": res.get("option")})
        return out


@dataclass
class MapResult(Generic[T]):
    """What :func:`map_cached` returns.

    Attributes:
        results: one result per item, in the items' order.
        stats: call, token and time accounting.
        failures: unparseable outputs among the results, with their item id, raw text,
            reason and the default used.
        cache_path: the cache file.
    """

    results: list[Any]
    stats: CacheStats
    failures: list[dict[str, Any]] = field(default_factory=list)
    cache_path: Path | None = None


def map_cached(
    backend: LLMBackend,
    items: Sequence[T],
    *,
    prompt: Callable[[T], Prompt],
    item_id: Callable[[T], str],
    template: str,
    options: Sequence[str] | None = None,
    default: str | None = None,
    max_new_tokens: int = 64,
    temperature: float = 0.0,
    batch_size: int = 8,
    cache: str | os.PathLike | None = None,
    fsync: bool = True,
    progress: bool = True,
    desc: str | None = None,
) -> MapResult[T]:
    """Map items through a backend, calling it only for items not in the response cache.

    With ``options``, each item is a :meth:`~LLMBackend.choose_many` decision, else a
    :meth:`~LLMBackend.generate` answer. Misses are sent ``batch_size`` at a time and each
    result is appended to the cache as soon as its batch returns, so a killed run resumes
    where it stopped.

    Args:
        backend: the LLM backend.
        items: the items (anything; ``prompt`` and ``item_id`` read them).
        prompt: item -> prompt (a string or chat messages).
        item_id: item -> stable unique id (e.g. ``question id`` or ``qid:passage id``).
        template: the prompt template's text; its hash keys the cache, so editing the
            template starts a new namespace.
        options: fixed options for a choice task.
        default: the option an unparseable text answer falls back to.
        max_new_tokens: generation limit (generate task).
        temperature: sampling temperature (generate task; 0 is greedy).
        batch_size: misses per backend call.
        cache: cache root (default :func:`chunksel.config.cache_root`).
        fsync: ``fsync`` every record.
        progress: show a tqdm bar over the misses (silenced by ``TQDM_DISABLE``).
        desc: the bar's label.

    Returns:
        A :class:`MapResult`.

    Raises:
        DataError: an empty prompt, bad options, a batch size under 1, or one id given
            to two items with different prompts.
    """
    from tqdm.auto import tqdm

    if batch_size < 1:
        raise DataError(f"batch_size must be >= 1, got {batch_size}")
    if options is not None:
        opts = check_options(options)
        if default is not None and default not in opts:
            raise DataError(f"default {default!r} is not one of the options {list(opts)}")
        task, settings = "choose", {"options": list(opts), "default": default}
    else:
        task, settings = "generate", {"max_new_tokens": max_new_tokens, "temperature": temperature}
    store = ResponseCache.for_backend(backend, task=task, template=template, settings=settings,
                                      cache=cache, fsync=fsync)
    ids = [str(item_id(x)) for x in items]
    prompts: dict[str, Prompt] = {}
    hashes: dict[str, str] = {}
    for i, x in zip(ids, items):
        p = prompt(x)
        h = prompt_hash(p)
        if i in hashes and hashes[i] != h:
            raise DataError(f"item id {i!r} is given to two items with different prompts")
        prompts[i], hashes[i] = p, h
    stats = CacheStats(items=len(ids))
    done: dict[str, Generation | Choice] = {}
    for i in hashes:
        hit = store.get(i, hashes[i])
        if hit is not None:
            done[i] = hit
            stats.hits += 1
            stats.saved_seconds += hit.seconds
    misses = [i for i in hashes if i not in done]
    bar = tqdm(total=len(misses), desc=desc or f"{backend.name} {backend.model_id}", unit="item",
               disable=not show_progress(progress))
    try:
        for start in range(0, len(misses), batch_size):
            batch = misses[start:start + batch_size]
            batch_prompts = [prompts[i] for i in batch]
            if task == "choose":
                results: list[Any] = backend.choose_many(batch_prompts, opts, default=default)
            else:
                results = backend.generate(batch_prompts, max_new_tokens, temperature=temperature)
            stats.calls += 1
            for i, res in zip(batch, results):
                store.put(i, hashes[i], res)
                done[i] = res
                stats.misses += 1
                stats.tokens_in += res.tokens_in
                stats.tokens_out += res.tokens_out
                stats.seconds += res.seconds
            bar.update(len(batch))
    finally:
        bar.close()
        store.close()
    out = [done[i] for i in ids]
    failures = []
    for i in hashes:
        res = done[i]
        if isinstance(res, Choice) and not res.parsed:
            failures.append({"id": i, "text": res.text, "reason": res.reason, "default": res.option})
    stats.unparsed = len(failures)
    return MapResult(results=out, stats=stats, failures=failures, cache_path=store.path)


__all__ = ["CacheStats", "MapResult", "ResponseCache", "map_cached", "prompt_hash", "template_hash"]
