"""The FastAPI app of ``chunksel serve`` (see :mod:`chunksel.pipeline.server` for the
endpoints, limits and concurrency): the bounded worker pool with its wait queue and
timeout, continuous batching of /select, and the endpoints."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

from chunksel.errors import ChunkselError, DeadlineExceeded, require
from chunksel.pipeline.serve_requests import (
    ApiError,
    Metrics,
    ServeSettings,
    parse_select,
    public_paths,
    worker_info,
)

try:  # module level: FastAPI resolves the endpoints' (string) annotations in these globals
    from fastapi import Request
except ImportError:  # pragma: no cover - create_app names the extra to install
    Request = Any  # type: ignore[misc,assignment]

log = logging.getLogger("chunksel.serve")
#: admit a request only when it is predicted to be answered within this share of the time
#: it has left: the rest absorbs the prediction's error (a request answered late is work lost)
ADMIT_SHARE = 0.5

# ------------------------------------------------------------------- the app
class _Gate:
    """Bounded concurrency, a bounded wait queue, admission control and the request
    deadline.

    Admission happens before the request's body is read: the gate counts the requests
    admitted and not yet answered (``admitted``) and keeps a moving average of the time
    between two requests' work finishing while others waited (``interval_s``, what the
    worker really sustains, body parsing and the event loop included; before it knows
    one, the work of one request over the concurrency). A request that would be answered after its
    deadline (``admitted + 1`` intervals from now, against :data:`ADMIT_SHARE` of the time it
    has left) is answered 503 at once, with
    ``Retry-After``, instead of being queued to time out. A request whose client has gone
    by the time a worker is free is dropped unworked; a started request carries its
    deadline into :meth:`ChunkSelector.select_batch`, which stops before the next stage
    once it has passed.
    """

    def __init__(self, s: ServeSettings, metrics: Metrics) -> None:
        self.s = s
        self.metrics = metrics
        self.pool = ThreadPoolExecutor(max_workers=s.concurrency, thread_name_prefix="chunksel-serve")
        self.sem: asyncio.Semaphore | None = None
        self.waiting = 0
        self.admitted = 0  # admitted requests not answered yet
        self.service_s: float | None = None  # moving average of one request's work in the pool
        self.interval_s: float | None = None  # moving average of the time between answers while busy
        self._last_done: float | None = None

    def deadline(self, t0: float) -> float:
        """The request's deadline on the ``time.monotonic()`` clock."""
        return time.monotonic() + self.s.timeout_s - (time.perf_counter() - t0)

    def per_request_s(self) -> float | None:
        """How long one more request adds to the wait (None: nothing measured yet)."""
        if self.interval_s is not None:
            return self.interval_s
        return None if self.service_s is None else self.service_s / self.s.concurrency

    def admit(self, t0: float) -> None:
        """Count the request in, or 503 now (with Retry-After) when the queue is full or it
        would not be answered before its deadline."""
        ahead = self.admitted
        if ahead - self.s.concurrency >= self.s.queue:
            self.metrics.drop("queue_full")
            raise self._busy(f"{ahead - self.s.concurrency} requests are waiting; the limit is {self.s.queue}",
                             "queue", self.s.queue, ahead)
        each = self.per_request_s()
        if self.s.admission and each is not None and ahead >= self.s.concurrency:
            finish = (ahead + 1) * each
            left = self.s.timeout_s - (time.perf_counter() - t0)
            if finish > ADMIT_SHARE * left:
                self.metrics.drop("admission")
                raise self._busy(f"the server is at capacity: about {finish:.2f} s of queued work, which would "
                                 f"not leave this request time to finish within {self.s.timeout_s:g} s",
                                 "timeout_s", self.s.timeout_s, ahead)
        self.admitted += 1

    def leave(self) -> None:
        """An admitted request was answered (whatever the answer)."""
        self.admitted -= 1

    def _busy(self, message: str, limit: str, most: float, ahead: int) -> ApiError:
        each = self.per_request_s()
        retry = 1 if each is None else max(1, math.ceil((ahead + 1) * each))
        return ApiError(503, "busy", message, headers={"Retry-After": str(retry)}, limit=limit, max=most,
                        retry_after_s=retry)

    async def run(self, fn: Callable[[], Any], t0: float, request: Any = None) -> tuple[Any, float]:
        """Run ``fn`` in the pool; returns (its result, ms spent waiting for a slot)."""
        if self.sem is None:
            self.sem = asyncio.Semaphore(self.s.concurrency)
        self.waiting += 1
        try:
            await asyncio.wait_for(self.sem.acquire(), timeout=max(0.0, self.s.timeout_s - (time.perf_counter() - t0)))
        except asyncio.TimeoutError:
            self.metrics.drop("deadline_in_queue")
            raise self._timeout() from None
        finally:
            self.waiting -= 1
        queued = (time.perf_counter() - t0) * 1e3
        self.metrics.in_flight += 1
        try:
            if request is not None and await request.is_disconnected():
                self.metrics.drop("client_gone")
                raise ApiError(499, "client_gone", "the client closed the connection before the work started")
            left = self.s.timeout_s - (time.perf_counter() - t0)
            started = time.perf_counter()
            fut = asyncio.get_running_loop().run_in_executor(self.pool, self._call, fn)
            fut.add_done_callback(lambda _f: self._observe(time.perf_counter() - started))
            try:
                return await asyncio.wait_for(fut, timeout=max(0.0, left)), queued
            except asyncio.TimeoutError:
                raise self._timeout() from None
        finally:
            self.metrics.in_flight -= 1
            self.sem.release()

    def _call(self, fn: Callable[[], Any]) -> Any:
        """In a worker thread: ``fn``, counting the work a passed deadline stopped."""
        try:
            return fn()
        except DeadlineExceeded as err:
            self.metrics.drop(f"deadline_before_{err.stage}")
            raise

    def _observe(self, seconds: float) -> None:
        """A request's work finished in the pool (on the event loop, before its answer)."""
        self.service_s = seconds if self.service_s is None else 0.8 * self.service_s + 0.2 * seconds
        now = time.perf_counter()
        if self._last_done is not None:
            dt = now - self._last_done
            self.interval_s = dt if self.interval_s is None else 0.8 * self.interval_s + 0.2 * dt
        # the next interval is service time only if work is waiting now (an idle gap is not;
        # requests that time out in the queue are no work done, so they never shorten it)
        self._last_done = now if self.waiting > 0 else None

    def _timeout(self) -> ApiError:
        return ApiError(504, "timeout", f"the request took longer than {self.s.timeout_s:g} s",
                        limit="timeout_s", max=self.s.timeout_s)


#: the endpoints whose requests pass the admission gate
ADMITTED_PATHS = frozenset({"/select", "/select/batch", "/answer"})
#: where the admission layer leaves the request's arrival time in the ASGI scope's state
T0_KEY = "chunksel_t0"


class _AdmitFirst:
    """Admission as a bare ASGI layer in front of the app: a request to a working endpoint
    passes :meth:`_Gate.admit` as it arrives, before routing, authentication or its body,
    so a 503 under overload costs little more than parsing its headers; an admitted one
    leaves the gate when its answer is sent."""

    def __init__(self, app: Any, gate: _Gate, metrics: Metrics) -> None:
        self.app, self.gate, self.metrics = app, gate, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in ADMITTED_PATHS:
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        try:
            self.gate.admit(t0)
        except ApiError as err:
            body = json.dumps(err.body()).encode()
            headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                       *((k.lower().encode(), str(v).encode()) for k, v in (err.headers or {}).items())]
            await send({"type": "http.response.start", "status": err.status, "headers": headers})
            await send({"type": "http.response.body", "body": body})
            self.metrics.count(scope["path"], err.status)
            return
        scope.setdefault("state", {})[T0_KEY] = t0
        try:
            await self.app(scope, receive, send)
        finally:
            self.gate.leave()


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
            results: list[Any] = _select_many(self.cs, items, min(it["deadline"] for it in items))
            errors: list[BaseException | None] = [None] * len(items)
        except Exception:  # noqa: BLE001 - find the bad request(s), each under its own deadline
            results, errors = [], []
            for it in items:
                try:
                    results.append(_select_many(self.cs, [it], it["deadline"])[0])
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


def _select_many(cs: Any, items: list[dict[str, Any]], deadline: float | None = None) -> list[Any]:
    """One ``select_batch`` over parsed requests; each result keeps its own ``k``,
    ``threshold`` and ``min_p`` (:func:`chunksel.pipeline.select_rules.restrict`)."""
    import warnings

    from chunksel.errors import UnscoredChunksWarning
    from chunksel.pipeline.select_rules import check_rule, restrict

    cal = getattr(cs, "calibrator", None)
    for it in items:
        check_rule(it["k"], it.get("threshold"), it.get("min_p"), cal, cs.name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnscoredChunksWarning)  # reported as n_scored
        res = cs.select_batch(
            [it["question"] for it in items], [it["chunks"] for it in items],
            max(len(it["chunks"]) if it["k"] == "auto" else it["k"] for it in items),
            chunk_embeddings=[it.get("chunk_embeddings") for it in items],
            question_embeddings=[it.get("question_embedding") for it in items],
            chunk_scores=[it.get("chunk_scores") for it in items],
            features=[it.get("features") for it in items],
            titles=[it.get("titles") for it in items],
            deadline=deadline,
        )
    for it, r in zip(items, res, strict=True):
        restrict(r, it["k"], it.get("threshold"), it.get("min_p"), None if cal is None else cal.auto_threshold)
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
    app.add_middleware(_AdmitFirst, gate=gate, metrics=metrics)
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
            raise ApiError(400, "malformed_json", f"the body is not valid JSON ({err})") from None
        except RecursionError:
            raise ApiError(422, "invalid_request", "the JSON body is nested too deeply (a select request nests "
                           "at most 4 levels)", limit="json_depth", field="body") from None

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
        t0 = request.scope.get("state", {}).get(T0_KEY) or time.perf_counter()  # admitted at arrival
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
            return JSONResponse(err.body(), status_code=err.status, headers=err.headers)
        except DeadlineExceeded as err:  # the request's time ran out between two stages
            status = 504
            return JSONResponse({"error": "timeout", "message": str(err), "stage": err.stage,
                                 "limit": "timeout_s", "max": s.timeout_s}, status_code=504)
        except ChunkselError as err:  # bad input found by the selector (shapes, NaN, ...)
            status = 422
            body = {"error": "invalid_request", "message": str(err)}
            if getattr(err, "field", None):
                body["field"] = err.field
            return JSONResponse(body, status_code=422)
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
            item = parse_select(await body_json(request), s)
            item["deadline"] = gate.deadline(t0)
            if batcher is not None:
                res, queued = await batcher.submit(item, t0)
            else:
                out, queued = await gate.run(lambda: _select_many(cs, [item], item["deadline"]), t0, request)
                res = out[0]
            return res.to_dict(), {**res.timings, "queue": queued}

        return await handle(request, "/select", work)

    @app.post("/select/batch")
    async def select_batch(request: Request):
        async def work(t0):
            obj = await body_json(request)
            items = obj.get("items") if isinstance(obj, dict) else None
            if not isinstance(items, list) or not items:
                raise ApiError(422, "invalid_request", "'items' must be a non-empty list of select requests",
                               field="items")
            if len(items) > s.max_questions:
                raise ApiError(413, "limit_exceeded", f"{len(items)} items; the limit is {s.max_questions}",
                               limit="max_questions", max=s.max_questions)
            parsed = [parse_select(it, s, f"items[{i}]: ") for i, it in enumerate(items)]
            total = sum(len(it["chunks"]) for it in parsed)
            if total > s.max_batch_chunks:
                raise ApiError(413, "limit_exceeded", f"{total} chunks over the batch's questions; the limit is "
                               f"{s.max_batch_chunks}", limit="max_batch_chunks", max=s.max_batch_chunks)
            deadline = gate.deadline(t0)
            out, queued = await gate.run(lambda: _select_many(cs, parsed, deadline), t0, request)
            metrics.batch(len(parsed))
            return {"results": [r.to_dict() for r in out]}, {**out[0].timings, "queue": queued}

        return await handle(request, "/select/batch", work)

    @app.post("/answer")
    async def answer(request: Request):
        async def work(t0):
            if not s.answer:
                raise ApiError(404, "disabled", "answer generation is turned off on this server (--no-answer)")
            obj = await body_json(request)
            item = parse_select(obj, s)
            mnt = obj.get("max_new_tokens", 32)
            if isinstance(mnt, bool) or not isinstance(mnt, int) or not 1 <= mnt <= s.max_new_tokens:
                raise ApiError(422, "invalid_request", f"'max_new_tokens' must be a whole number in "
                               f"[1, {s.max_new_tokens}]", limit="max_new_tokens", max=s.max_new_tokens,
                               field="max_new_tokens")
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

            kw["deadline"] = gate.deadline(t0)
            (text, sel), queued = await gate.run(run, t0, request)
            return {"answer": text, "selection": sel.to_dict()}, {**sel.timings, "queue": queued}

        return await handle(request, "/answer", work)

    @app.get("/health")
    async def health(request: Request):
        async def work(t0):
            return {"status": "ok", "selector": public_paths(cs.describe()), "answer": s.answer,
                    "worker": worker_info(),
                    "settings": {k: v for k, v in s.public().items() if k not in ("host", "port")}}, {}

        return await handle(request, "/health", work)

    @app.get("/metrics")
    async def get_metrics(request: Request):
        async def work(t0):
            return metrics.snapshot(), {}

        return await handle(request, "/metrics", work)

    return app

