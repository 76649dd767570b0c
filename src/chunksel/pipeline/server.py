"""``chunksel serve``: a saved selector over HTTP (FastAPI + uvicorn, extra ``serve``).

Endpoints (JSON in, JSON out; every error is ``{"error": CODE, "message": TEXT, ...}``):

- ``POST /select`` ``{"question", "chunks": [str], "k"?, "chunk_embeddings"?,
  "question_embedding"?, "chunk_scores"?, "features"?: {"h", "r"}, "titles"?}`` -> the
  :class:`~chunksel.pipeline.chunk_selector.ChunkSelection` as JSON.
- ``POST /select/batch`` ``{"items": [select request, ...]}`` -> ``{"results": [...]}``
  (one pass through the encoder, the warm-up and the selector).
- ``POST /answer`` ``{"question", "chunks", "max_new_tokens"?}`` -> ``{"answer",
  "selection"}``: selects one chunk and generates from the warm-up pass's KV cache with
  the local generator (:func:`chunksel.features.kv.generate_with_reuse`). ``--no-answer``
  turns it off (404).
- ``GET /health`` -> status, the selector's description and provenance.
- ``GET /metrics`` -> request counts by endpoint and status, latencies (ms: count, mean,
  p50, p90, p99) by stage (``queue``, ``encode``, ``warmup``, ``score``, ``generate``,
  ``request``), batches run, requests in flight.

Limits (each breach is a 4xx whose body names the limit in ``"limit"``): request body
bytes (413), questions per batch, chunks per question and characters per chunk (413),
``k`` and ``max_new_tokens`` ranges (422). A malformed body is 400, a body of the wrong
shape 422, a missing or wrong ``X-API-Key`` (when a key is set) 401.

Concurrency: at most ``concurrency`` requests run at once in a thread pool; up to
``queue`` more wait (a request beyond that gets 503 ``busy``); a request that takes
longer than ``timeout_s`` (waiting included) gets 504 (its work finishes in the
background and is dropped). With ``batch_wait_ms`` > 0, ``/select`` requests are batched
continuously: those that arrive within that window, or while every worker is busy, run
as one batch (:meth:`ChunkSelector.select_batch`: one encoder call, one batched warm-up
pass, one scoring call) as soon as a worker is free; a batch that fails is retried
request by request, so one bad request never fails its neighbours.

Models load once, before the port opens. The server binds 127.0.0.1 unless told
otherwise; on SIGINT/SIGTERM uvicorn stops accepting, lets running requests finish (up to
``timeout_s``) and the worker pool is shut down.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import signal
import socket
import threading
import time
from collections import defaultdict, deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import ChunkselError, ConfigError, require

try:  # module level: FastAPI resolves the endpoints' (string) annotations in these globals
    from fastapi import Request
except ImportError:  # pragma: no cover - create_app names the extra to install
    Request = Any  # type: ignore[misc,assignment]

log = logging.getLogger("chunksel.serve")

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

    def check(self) -> ServeSettings:
        for name in ("max_request_bytes", "max_chunks", "max_chunk_chars", "max_questions", "max_new_tokens",
                     "concurrency", "queue"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(f"{name} must be a whole number >= 1, got {value!r}")
        if not self.timeout_s > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {self.timeout_s}")
        if not 0 <= self.batch_wait_ms <= 1000:
            raise ConfigError(f"batch wait must be in [0, 1000] ms, got {self.batch_wait_ms}")
        if not 0 <= self.port < 65536:
            raise ConfigError(f"port must be in [0, 65535], got {self.port}")
        return self

    def public(self) -> dict[str, Any]:
        out = asdict(self)
        out["api_key"] = bool(self.api_key)
        return out


class ApiError(Exception):
    """An HTTP error with a JSON body ``{"error": code, "message": ..., **extra}``."""

    def __init__(self, status: int, code: str, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.code, self.message, self.extra = status, code, message, extra

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
            }


# ------------------------------------------------------------------ requests
def _parse_select(obj: Any, s: ServeSettings, where: str = "") -> dict[str, Any]:
    """A select request -> keyword arguments of ``select_batch`` for one question."""
    if not isinstance(obj, dict):
        raise ApiError(422, "invalid_request", f"{where}expected a JSON object")
    known = {"question", "chunks", "k", "chunk_embeddings", "question_embedding", "chunk_scores", "features",
             "titles", "max_new_tokens"}
    unknown = sorted(set(obj) - known)
    if unknown:
        raise ApiError(422, "invalid_request", f"{where}unknown field(s): {', '.join(unknown)}")
    q = obj.get("question")
    if not isinstance(q, str) or not q.strip():
        raise ApiError(422, "invalid_request", f"{where}'question' must be a non-empty string")
    if len(q) > s.max_chunk_chars:
        raise ApiError(413, "limit_exceeded", f"{where}the question has {len(q)} characters; the limit is "
                       f"{s.max_chunk_chars}", limit="max_chunk_chars", max=s.max_chunk_chars)
    chunks = obj.get("chunks")
    if not isinstance(chunks, list) or not chunks:
        raise ApiError(422, "invalid_request", f"{where}'chunks' must be a non-empty list of strings")
    if len(chunks) > s.max_chunks:
        raise ApiError(413, "limit_exceeded", f"{where}{len(chunks)} chunks; the limit is {s.max_chunks}",
                       limit="max_chunks", max=s.max_chunks)
    for j, c in enumerate(chunks):
        if not isinstance(c, str):
            raise ApiError(422, "invalid_request", f"{where}chunks[{j}] must be a string")
        if len(c) > s.max_chunk_chars:
            raise ApiError(413, "limit_exceeded", f"{where}chunks[{j}] has {len(c)} characters; the limit is "
                           f"{s.max_chunk_chars}", limit="max_chunk_chars", max=s.max_chunk_chars)
    k = obj.get("k", 1)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= s.max_chunks:
        raise ApiError(422, "invalid_request", f"{where}'k' must be a whole number in [1, {s.max_chunks}]",
                       limit="max_chunks")
    out: dict[str, Any] = {"question": q, "chunks": chunks, "k": k}
    for key in ("chunk_embeddings", "question_embedding", "chunk_scores", "titles"):
        if obj.get(key) is not None:
            out[key] = _array(obj[key], key, where) if key != "titles" else _strings(obj[key], key, where)
    if obj.get("features") is not None:
        f = obj["features"]
        if not isinstance(f, dict) or set(f) != {"h", "r"}:
            raise ApiError(422, "invalid_request", f"{where}'features' must be {{\"h\": [...], \"r\": [...]}}")
        out["features"] = {n: _array(f[n], f"features.{n}", where) for n in ("h", "r")}
    return out


def _array(value: Any, key: str, where: str) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise ApiError(422, "invalid_request", f"{where}'{key}' must be numbers") from None
    if arr.dtype == object or arr.size == 0 or not np.isfinite(arr).all():
        raise ApiError(422, "invalid_request", f"{where}'{key}' must be finite numbers")
    return arr


def _strings(value: Any, key: str, where: str) -> list[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ApiError(422, "invalid_request", f"{where}'{key}' must be a list of strings")
    return value


# ------------------------------------------------------------------- the app
class _Gate:
    """Bounded concurrency, a bounded wait queue and the request timeout."""

    def __init__(self, s: ServeSettings, metrics: Metrics) -> None:
        self.s = s
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="chunksel-serve")
        self.sem: asyncio.Semaphore | None = None
        self.waiting = 0

    async def run(self, fn: Callable[[], Any], t0: float) -> tuple[Any, float]:
        """Run ``fn`` in the pool; returns (its result, ms spent waiting for a slot)."""
        if self.sem is None:
            self.sem = asyncio.Semaphore(self.s.concurrency)
        if self.waiting >= self.s.queue:
            raise ApiError(503, "busy", f"{self.waiting} requests are waiting; the limit is {self.s.queue}",
                           limit="queue", max=self.s.queue)
        self.waiting += 1
        try:
            await asyncio.wait_for(self.sem.acquire(), timeout=max(0.0, self.s.timeout_s - (time.perf_counter() - t0)))
        except asyncio.TimeoutError:
            raise self._timeout() from None
        finally:
            self.waiting -= 1
        queued = (time.perf_counter() - t0) * 1e3
        self.metrics.in_flight += 1
        try:
            left = self.s.timeout_s - (time.perf_counter() - t0)
            fut = asyncio.get_running_loop().run_in_executor(self.pool, fn)
            try:
                return await asyncio.wait_for(fut, timeout=max(0.0, left)), queued
            except asyncio.TimeoutError:
                raise self._timeout() from None
        finally:
            self.metrics.in_flight -= 1
            self.sem.release()

    def _timeout(self) -> ApiError:
        return ApiError(504, "timeout", f"the request took longer than {self.s.timeout_s:g} s",
                        limit="timeout_s", max=self.s.timeout_s)


class _Batcher:
    """Continuous batching of /select: requests that arrive while the workers are busy (or
    within ``wait`` seconds) are taken together, up to ``max_batch``, by the next worker
    that starts.

    At most one runner waits for a worker at a time; when it starts (in the worker
    thread) it takes everything pending, so a batch grows while the workers are busy. A
    batch that fails is retried request by request, so one bad request only fails itself.
    """

    def __init__(self, cs: Any, gate: _Gate, metrics: Metrics, wait: float, max_batch: int) -> None:
        self.cs, self.gate, self.metrics = cs, gate, metrics
        self.wait, self.max_batch = wait, max_batch
        self.lock = threading.Lock()
        self.pending: list[tuple[dict[str, Any], asyncio.Future, float]] = []
        self.runner_waiting = False

    async def submit(self, item: dict[str, Any], t0: float) -> tuple[Any, float]:
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        with self.lock:
            self.pending.append((item, fut, t0))
            start = not self.runner_waiting
            self.runner_waiting = True
        if start:
            asyncio.ensure_future(self._runner(loop))
        left = self.gate.s.timeout_s - (time.perf_counter() - t0)
        try:
            return await asyncio.wait_for(fut, timeout=max(0.0, left))
        except asyncio.TimeoutError:
            raise self.gate._timeout() from None

    async def _runner(self, loop: asyncio.AbstractEventLoop) -> None:
        if self.wait > 0:
            await asyncio.sleep(self.wait)
        started = threading.Event()

        def work() -> None:
            started.set()
            self._take_and_run(loop)

        try:
            await self.gate.run(work, time.perf_counter())
        except Exception as err:  # noqa: BLE001 - busy, or a timeout
            if started.is_set():  # its batch is answered by the worker; what is pending now is not its own
                return
            with self.lock:
                batch, self.pending = self.pending, []
                self.runner_waiting = False
            for _, fut, _ in batch:
                loop.call_soon_threadsafe(_settle, fut, None, err)

    def _take_and_run(self, loop: asyncio.AbstractEventLoop) -> None:
        """In a worker thread: take the pending requests and answer each one's future."""
        started = time.perf_counter()
        with self.lock:
            batch = [b for b in self.pending[: self.max_batch] if not b[1].done()]
            self.pending = self.pending[self.max_batch:]
            more = bool(self.pending)
            self.runner_waiting = more
        if more:  # the rest go to the next runner
            loop.call_soon_threadsafe(lambda: asyncio.ensure_future(self._runner(loop)))
        if not batch:
            return
        items = [b[0] for b in batch]
        try:
            results: list[Any] = _select_many(self.cs, items)
            errors: list[BaseException | None] = [None] * len(items)
        except Exception:  # noqa: BLE001 - find the bad request(s)
            results, errors = [], []
            for it in items:
                try:
                    results.append(_select_many(self.cs, [it])[0])
                    errors.append(None)
                except Exception as err:  # noqa: BLE001
                    results.append(None)
                    errors.append(err)
        self.metrics.batch(len(items))
        for (_, fut, t0), res, err in zip(batch, results, errors, strict=True):
            queued = (started - t0) * 1e3
            loop.call_soon_threadsafe(_settle, fut, None if err else (res, queued), err)


def _settle(fut: asyncio.Future, result: Any, error: BaseException | None) -> None:
    if fut.done():
        return
    if error is not None:
        fut.set_exception(error)
    else:
        fut.set_result(result)


def _select_many(cs: Any, items: list[dict[str, Any]]) -> list[Any]:
    """One ``select_batch`` over parsed requests; each result keeps its own ``k``."""
    import warnings

    from chunksel.errors import UnscoredChunksWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnscoredChunksWarning)  # reported as n_scored
        res = cs.select_batch(
            [it["question"] for it in items], [it["chunks"] for it in items], max(it["k"] for it in items),
            chunk_embeddings=[it.get("chunk_embeddings") for it in items],
            question_embeddings=[it.get("question_embedding") for it in items],
            chunk_scores=[it.get("chunk_scores") for it in items],
            features=[it.get("features") for it in items],
            titles=[it.get("titles") for it in items],
        )
    for it, r in zip(items, res, strict=True):
        r.selected = r.selected[: it["k"]]
    return res


def create_app(cs: Any, settings: ServeSettings | None = None) -> Any:
    """The FastAPI app serving ``cs`` (a loaded :class:`ChunkSelector`)."""
    require("fastapi", "serve")
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse

    s = (settings or ServeSettings()).check()
    metrics = Metrics()
    gate = _Gate(s, metrics)
    batcher = _Batcher(cs, gate, metrics, s.batch_wait_ms / 1e3, s.max_questions) if s.batch_wait_ms > 0 else None

    @asynccontextmanager
    async def lifespan(_app):
        yield
        gate.pool.shutdown(wait=True, cancel_futures=True)

    app = FastAPI(title="chunksel", lifespan=lifespan, docs_url=None, redoc_url=None, openapi_url=None)
    app.state.metrics = metrics
    app.state.settings = s

    async def body_json(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > s.max_request_bytes:
            raise _too_large(int(declared))
        size, parts = 0, []
        async for part in request.stream():
            size += len(part)
            if size > s.max_request_bytes:
                raise _too_large(size)
            parts.append(part)
        try:
            return json.loads(b"".join(parts))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ApiError(400, "malformed_json", f"the body is not valid JSON ({getattr(err, 'msg', err)})") from None

    def _too_large(n: int) -> ApiError:
        return ApiError(413, "limit_exceeded", f"the request body has {n} bytes; the limit is "
                        f"{s.max_request_bytes}", limit="max_request_bytes", max=s.max_request_bytes)

    def authorise(request: Request) -> None:
        if s.api_key is None:
            return
        got = request.headers.get("x-api-key", "")
        if not hmac.compare_digest(got.encode(), s.api_key.encode()):
            raise ApiError(401, "unauthorised", "a valid X-API-Key header is required")

    async def handle(request: Request, endpoint: str, work) -> Any:
        t0 = time.perf_counter()
        status = 200
        try:
            authorise(request)
            body, timings = await work(t0)
            timings["request"] = (time.perf_counter() - t0) * 1e3
            metrics.observe(timings)
            if isinstance(body, dict) and isinstance(body.get("timings_ms"), dict):
                body["timings_ms"]["queue"] = round(timings.get("queue", 0.0), 3)
                body["timings_ms"]["request"] = round(timings["request"], 3)
            return JSONResponse(body)
        except ApiError as err:
            status = err.status
            return JSONResponse(err.body(), status_code=err.status)
        except ChunkselError as err:  # bad input found by the selector (shapes, NaN, ...)
            status = 422
            return JSONResponse({"error": "invalid_request", "message": str(err)}, status_code=422)
        except Exception:  # noqa: BLE001
            log.exception("request to %s failed", endpoint)
            status = 500
            return JSONResponse({"error": "internal", "message": "internal error (see the server log)"},
                                status_code=500)
        finally:
            metrics.count(endpoint, status)

    @app.post("/select")
    async def select(request: Request):
        async def work(t0):
            item = _parse_select(await body_json(request), s)
            if batcher is not None:
                res, queued = await batcher.submit(item, t0)
            else:
                out, queued = await gate.run(lambda: _select_many(cs, [item]), t0)
                res = out[0]
            return res.to_dict(), {**res.timings, "queue": queued}

        return await handle(request, "/select", work)

    @app.post("/select/batch")
    async def select_batch(request: Request):
        async def work(t0):
            obj = await body_json(request)
            items = obj.get("items") if isinstance(obj, dict) else None
            if not isinstance(items, list) or not items:
                raise ApiError(422, "invalid_request", "'items' must be a non-empty list of select requests")
            if len(items) > s.max_questions:
                raise ApiError(413, "limit_exceeded", f"{len(items)} items; the limit is {s.max_questions}",
                               limit="max_questions", max=s.max_questions)
            parsed = [_parse_select(it, s, f"items[{i}]: ") for i, it in enumerate(items)]
            out, queued = await gate.run(lambda: _select_many(cs, parsed), t0)
            metrics.batch(len(parsed))
            return {"results": [r.to_dict() for r in out]}, {**out[0].timings, "queue": queued}

        return await handle(request, "/select/batch", work)

    @app.post("/answer")
    async def answer(request: Request):
        async def work(t0):
            if not s.answer:
                raise ApiError(404, "disabled", "answer generation is turned off on this server (--no-answer)")
            obj = await body_json(request)
            item = _parse_select(obj, s)
            mnt = obj.get("max_new_tokens", 32)
            if isinstance(mnt, bool) or not isinstance(mnt, int) or not 1 <= mnt <= s.max_new_tokens:
                raise ApiError(422, "invalid_request", f"'max_new_tokens' must be a whole number in "
                               f"[1, {s.max_new_tokens}]", limit="max_new_tokens", max=s.max_new_tokens)
            kw = {k: item[k] for k in ("chunk_embeddings", "question_embedding", "chunk_scores", "titles")
                  if k in item}
            if "features" in item:
                kw["features"] = item["features"]

            def run():
                import warnings

                from chunksel.errors import UnscoredChunksWarning

                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", UnscoredChunksWarning)
                    return cs.answer(item["question"], item["chunks"], max_new_tokens=mnt, **kw)

            (text, sel), queued = await gate.run(run, t0)
            return {"answer": text, "selection": sel.to_dict()}, {**sel.timings, "queue": queued}

        return await handle(request, "/answer", work)

    @app.get("/health")
    async def health(request: Request):
        async def work(t0):
            return {"status": "ok", "selector": cs.describe(), "answer": s.answer,
                    "settings": {k: v for k, v in s.public().items() if k not in ("host", "port")}}, {}

        return await handle(request, "/health", work)

    @app.get("/metrics")
    async def get_metrics(request: Request):
        async def work(t0):
            return metrics.snapshot(), {}

        return await handle(request, "/metrics", work)

    return app


# ------------------------------------------------------------------- running
def load_for_serving(model: str | Path, settings: ServeSettings, corpus: str | None = None,
                     generator: str | None = None) -> Any:
    """Load the selector and every model it (and /answer) needs, once."""
    from chunksel.pipeline.chunk_selector import ChunkSelector

    cs = ChunkSelector.load(model, corpus=corpus, generator=generator)
    return cs.warm(generator=True if settings.answer else None)


def bind(host: str, port: int) -> socket.socket:
    """A listening-ready TCP socket on (host, port); port 0 picks a free one.

    The socket is created with ``IPPROTO_TCP`` and ``TCP_NODELAY``: asyncio sets
    TCP_NODELAY on an accepted connection only when its protocol is TCP, and Linux
    accepted sockets inherit the option from the listener. Without it Nagle's algorithm
    meets the client's delayed ACK and each response waits about 40 ms.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    return sock


def make_server(app: Any, settings: ServeSettings) -> Any:
    """A ``uvicorn.Server`` for ``app`` (graceful shutdown waits up to ``timeout_s``)."""
    uvicorn = require("uvicorn", "serve")
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                            timeout_graceful_shutdown=max(1, int(settings.timeout_s)),
                            limit_concurrency=settings.concurrency + settings.queue + 16)
    return uvicorn.Server(config)


def serve(model: str | Path, settings: ServeSettings, corpus: str | None = None, generator: str | None = None) -> None:
    """``chunksel serve``: load, bind, print the address, run until SIGINT/SIGTERM."""
    import sys

    require("fastapi", "serve")
    require("uvicorn", "serve")
    settings.check()
    cs = load_for_serving(model, settings, corpus, generator)
    sock = bind(settings.host, settings.port)
    host, port = sock.getsockname()[:2]
    print(f"chunksel serve: {cs.name} selector from {model} on http://{host}:{port}"
          f"{' (X-API-Key required)' if settings.api_key else ''}", file=sys.stderr, flush=True)
    print(json.dumps({"host": host, "port": port}), flush=True)
    def stop(signum, _frame):  # uvicorn re-raises the signal once it has shut down
        print(f"chunksel serve: stopped ({signal.Signals(signum).name})", file=sys.stderr, flush=True)
        sys.exit(0)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, stop)
    make_server(create_app(cs, settings), settings).run(sockets=[sock])
