"""The server's settings, its JSON request checks, its error type and its metrics.

Every check of a request body lives here (:func:`parse_select`): a body of the wrong
shape is an :class:`ApiError` (HTTP 422) whose ``field`` names the offending field, a
breached limit a 413 whose ``limit`` names it.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ConfigError

STAGES = ("queue", "encode", "warmup", "score", "generate", "request")


@dataclass
class ServeSettings:
    """Server settings (``chunksel serve`` options)."""

    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    answer: bool = True
    max_request_bytes: int = 1_000_000
    max_chunks: int = 64
    max_chunk_chars: int = 8000
    max_questions: int = 32
    max_new_tokens: int = 64
    concurrency: int = 2
    queue: int = 64
    timeout_s: float = 30.0
    batch_wait_ms: float = 0.0
    #: chunks summed over the questions of one /select/batch request
    max_batch_chunks: int = 256
    #: answer 503 at once when the predicted wait would not leave time to do the work
    admission: bool = True
    #: encoder engine ("torch", "onnx", "onnx-int8") and the chunk-embedding cache
    encoder: str = "torch"
    embedding_cache_items: int = 20_000
    embedding_cache_path: str | None = None
    #: server processes sharing the port, each with its own copy of the models
    workers: int = 1

    def check(self) -> ServeSettings:
        for name in ("max_request_bytes", "max_chunks", "max_chunk_chars", "max_questions", "max_new_tokens",
                     "concurrency", "queue", "max_batch_chunks", "workers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {self.timeout_s}")
        if not 0 <= self.batch_wait_ms <= 1000:
            raise ConfigError(f"batch wait must be in [0, 1000] ms, got {self.batch_wait_ms}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        if self.encoder not in ("torch", "onnx", "onnx-int8"):
            raise ConfigError(f"encoder must be torch, onnx or onnx-int8, got {self.encoder!r}")
        if isinstance(self.embedding_cache_items, bool) or not isinstance(self.embedding_cache_items, int) \
                or self.embedding_cache_items < 0:
            raise ConfigError(f"embedding_cache_items must be a whole number >= 0, got {self.embedding_cache_items!r}")
        return self

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out["api_key"] = bool(self.api_key)
        return out


class ApiError(Exception):
    """An HTTP error with a JSON body ``{"error": code, "message": ..., **extra}``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None,
                 **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra
        self.headers = headers

    def body(self) -> dict[str, Any]:
        return {"error": self.code, "message": self.message, **self.extra}


class Metrics:
    """Request counts and per-stage latencies (the last ``window`` of each), thread-safe."""

    def __init__(self, window: int = 10_000) -> None:
        self._lock = threading.Lock()
        self.started = time.time()
        self.counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
        self.latency: dict[str, deque] = {s: deque(maxlen=window) for s in STAGES}
        self.batches = 0
        self.batched_requests = 0
        self.in_flight = 0
        #: work not done, by reason (admission, queue_full, client_gone, deadline_*)
        self.dropped: dict[str, int] = defaultdict(int)

    def drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1

    def count(self, endpoint: str, status: int) -> None:
        with self._lock:
            self.counts[endpoint][str(status)] += 1

    def observe(self, timings: dict[str, float]) -> None:
        with self._lock:
            for stage, ms in timings.items():
                if stage in self.latency:
                    self.latency[stage].append(float(ms))

    def batch(self, size: int) -> None:
        with self._lock:
            self.batches += 1
            self.batched_requests += size

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            lat = {}
            for stage, values in self.latency.items():
                if not values:
                    continue
                arr = np.fromiter(values, dtype=np.float64)
                lat[stage] = {
                    "count": int(arr.size), "mean": round(float(arr.mean()), 3),
                    "p50": round(float(np.percentile(arr, 50)), 3),
                    "p90": round(float(np.percentile(arr, 90)), 3),
                    "p99": round(float(np.percentile(arr, 99)), 3),
                }
            return {
                "uptime_s": round(time.time() - self.started, 1),
                "requests": {ep: dict(by) for ep, by in self.counts.items()},
                "latency_ms": lat,
                "batches": self.batches,
                "batched_requests": self.batched_requests,
                "in_flight": self.in_flight,
                "dropped": dict(self.dropped),
            }


# ------------------------------------------------------------------ requests
def parse_select(obj: Any, s: ServeSettings, where: str = "") -> dict[str, Any]:
    """A select request -> keyword arguments of ``select_batch`` for one question."""
    if not isinstance(obj, dict):
        raise ApiError(422, "invalid_request", f"{where}expected a JSON object", field=where.rstrip(": ") or "body")
    known = {"question", "chunks", "k", "threshold", "min_p", "chunk_embeddings", "question_embedding",
             "chunk_scores", "features", "titles", "max_new_tokens"}
    unknown = sorted(set(obj) - known)
    if unknown:
        raise ApiError(422, "invalid_request", f"{where}unknown field(s): {', '.join(unknown)}",
                       field=unknown[0])
    q = obj.get("question")
    if not isinstance(q, str) or not q.strip():
        raise ApiError(422, "invalid_request", f"{where}'question' must be a non-empty string",
                       field="question")
    if len(q) > s.max_chunk_chars:
        raise ApiError(413, "limit_exceeded", f"{where}the question has {len(q)} characters; the limit is "
                       f"{s.max_chunk_chars}", limit="max_chunk_chars", max=s.max_chunk_chars)
    chunks = obj.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        raise ApiError(422, "invalid_request", f"{where}'chunks' must be a non-empty list of strings",
                       field="chunks")
    if len(chunks) > s.max_chunks:
        raise ApiError(413, "limit_exceeded", f"{where}{len(chunks)} chunks; the limit is {s.max_chunks}",
                       limit="max_chunks", max=s.max_chunks)
    for j, c in enumerate(chunks):
        if not isinstance(c, str):
            raise ApiError(422, "invalid_request", f"{where}chunks[{j}] must be a string",
                           field=f"chunks[{j}]")
        if len(c) > s.max_chunk_chars:
            raise ApiError(413, "limit_exceeded", f"{where}chunks[{j}] has {len(c)} characters; the limit is "
                           f"{s.max_chunk_chars}", limit="max_chunk_chars", max=s.max_chunk_chars)
    k = obj.get("k", 1)
    if k != "auto" and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= s.max_chunks):
        raise ApiError(422, "invalid_request", f"{where}'k' must be a whole number in [1, {s.max_chunks}] "
                       'or "auto"', limit="max_chunks", field="k")
    out: dict[str, Any] = {"question": q, "chunks": chunks, "k": k}
    for key in ("threshold", "min_p"):  # k="auto", threshold, min_p: chunksel.pipeline.select_rules
        v = obj.get(key)
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1):
            raise ApiError(422, "invalid_request", f"{where}'{key}' must be a probability in [0, 1]", field=key)
        out[key] = None if v is None else float(v)
    for key in ("chunk_embeddings", "question_embedding", "chunk_scores", "titles"):
        if obj.get(key) is not None:
            out[key] = _array(obj[key], key, where) if key != "titles" else _strings(obj[key], key, where)
    if obj.get("features") is not None:
        f = obj["features"]
        if not isinstance(f, dict) or set(f) != {"h", "r"}:
            raise ApiError(422, "invalid_request", f"{where}'features' must be {{\"h\": [...], \"r\": [...]}}",
                           field="features")
        out["features"] = {n: _array(f[n], f"features.{n}", where) for n in ("h", "r")}
    return out


def _array(value: Any, key: str, where: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ApiError(422, "invalid_request", f"{where}'{key}' must be numbers", field=key) from None
    if arr.dtype == object or arr.size == 0 or not np.isfinite(arr).all():
        raise ApiError(422, "invalid_request", f"{where}'{key}' must be finite numbers", field=key)
    return arr


def _strings(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(422, "invalid_request", f"{where}'{key}' must be a list of strings", field=key)
    return value


def public_paths(obj: Any) -> Any:
    """``obj`` with every absolute filesystem path cut to its last part (``/health``
    must not reveal the server's directory layout)."""
    if isinstance(obj, dict):
        return {k: public_paths(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [public_paths(v) for v in obj]
    if isinstance(obj, str) and obj.startswith(("/", "~")) and len(obj) > 1:
        return Path(obj).name
    return obj


def rss_mb(pid: int | str = "self") -> float | None:
    """Resident memory of a process in MiB (Linux ``/proc``; None elsewhere)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return round(int(line.split()[1]) / 1024, 1)
    except OSError:
        return None
    return None


def worker_info() -> dict[str, Any]:
    """This server process: its pid and resident memory (``/health``)."""
    import os

    return {"pid": os.getpid(), "rss_mb": rss_mb()}
