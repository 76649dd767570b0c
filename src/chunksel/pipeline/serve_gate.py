"""The server's admission gate (``chunksel serve``): bounded concurrency, a bounded wait
queue, admission control and the request deadline.

Admission runs before a request's body is read, at two depths:

- :func:`gated_protocol`: uvicorn's httptools protocol with the check moved into its
  headers-complete callback. A request refused there is answered 503 on the spot, from
  the request line and headers alone: no ASGI task, no request scope handed to the app,
  and the body's bytes are parsed past and dropped, never buffered. The connection stays
  open for the client's next request.
- :class:`AdmitFirst`: the same check as a bare ASGI layer, for any other server (the
  test client, h11): before routing, authentication or the body.

Either way an admitted request leaves the gate when its answer is sent.

A request's clock starts when it arrives, or earlier when it says so: an
``X-Request-Start: t=<unix time>`` header (the convention of proxies and load balancers;
seconds, milliseconds or microseconds) moves its start back to that time, so the time it
waited upstream (in a proxy, in the client's queue, in the socket) counts against its
deadline, for admission as for the work (:func:`arrival`).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from chunksel.errors import DeadlineExceeded
from chunksel.pipeline.serve_requests import ApiError, Metrics, ServeSettings

#: admit a request only when it is predicted to be answered within this share of the time
#: it has left: the rest absorbs the prediction's error (a request answered late is work lost)
ADMIT_SHARE = 0.5


class Gate:
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
            raise self.timeout() from None
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
                raise self.timeout() from None
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

    def timeout(self) -> ApiError:
        return ApiError(504, "timeout", f"the request took longer than {self.s.timeout_s:g} s",
                        limit="timeout_s", max=self.s.timeout_s)


#: an upstream start older than this is taken for a clock error and ignored
MAX_UPSTREAM_S = 3600.0


def arrival(headers: Any) -> float:
    """The request's start on the ``time.perf_counter()`` clock: now, or the time its
    ``X-Request-Start: t=<unix time>`` header gives (seconds, or milliseconds or
    microseconds as integers) when that is in the past by less than :data:`MAX_UPSTREAM_S`.
    A malformed header or a start in the future is ignored (the arrival counts)."""
    now = time.perf_counter()
    for name, value in headers:
        if name.lower() != b"x-request-start":
            continue
        raw = value.strip()
        raw = raw[2:] if raw[:2].lower() == b"t=" else raw
        try:
            start = float(raw)
        except ValueError:
            return now
        if start > 1e14:  # microseconds
            start /= 1e6
        elif start > 1e11:  # milliseconds
            start /= 1e3
        waited = time.time() - start
        return now - waited if 0.0 < waited < MAX_UPSTREAM_S else now
    return now


#: the endpoints whose requests pass the admission gate
ADMITTED_PATHS = frozenset({"/select", "/select/batch", "/answer"})
#: where the admission layer leaves the request's arrival time in the ASGI scope's state
T0_KEY = "chunksel_t0"


class AdmitFirst:
    """Admission as a bare ASGI layer in front of the app: a request to a working endpoint
    passes :meth:`Gate.admit` as it arrives, before routing, authentication or its body,
    so a 503 under overload costs little more than parsing its headers; an admitted one
    leaves the gate when its answer is sent. Under ``chunksel serve`` the server's
    protocol (:func:`gated_protocol`) admits the request earlier still, before any ASGI
    task exists; this layer then only sees the admitted ones, and lets them leave."""

    def __init__(self, app: Any, gate: Gate, metrics: Metrics) -> None:
        self.app, self.gate, self.metrics = app, gate, metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST" or scope.get("path") not in ADMITTED_PATHS:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        if T0_KEY not in state:  # not admitted by the server's protocol (GatedHttpToolsProtocol)
            t0 = arrival(scope.get("headers", ()))
            try:
                self.gate.admit(t0)
            except ApiError as err:
                body, headers = busy_response(err)
                await send({"type": "http.response.start", "status": err.status, "headers": headers})
                await send({"type": "http.response.body", "body": body})
                self.metrics.count(scope["path"], err.status)
                return
            state[T0_KEY] = t0
        try:
            await self.app(scope, receive, send)
        finally:
            self.gate.leave()


def busy_response(err: ApiError) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    """The JSON body and the headers of a refusal (503 ``busy``)."""
    body = json.dumps(err.body()).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *((k.lower().encode(), str(v).encode()) for k, v in (err.headers or {}).items())]
    return body, headers


def gated_protocol(gate: Gate, metrics: Metrics) -> type | None:
    """uvicorn's httptools HTTP protocol with :meth:`Gate.admit` run as the request's
    headers complete (None when httptools is not installed: :class:`AdmitFirst` alone
    then gates).

    A refused request is answered from the callback itself (its status line, headers and
    JSON body written at once); its body, still arriving, is parsed past and dropped, and
    the keep-alive connection serves the client's next request. An admitted one carries
    its arrival time into the app's scope (``state[T0_KEY]``), so :class:`AdmitFirst`
    does not admit it twice. A pipelined request, and one that uvicorn itself will refuse
    (its connection limit), are left to :class:`AdmitFirst`.
    """
    try:
        import httptools
        from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol
    except ImportError:  # pragma: no cover - uvicorn falls back to h11
        return None
    paths = frozenset(p.encode() for p in ADMITTED_PATHS)

    class _Refused:
        """Stands in for uvicorn's request cycle once a refusal is sent: its body
        callbacks see a complete response and drop what still arrives."""

        response_complete = True
        disconnected = False

        def __init__(self) -> None:
            self.message_event = asyncio.Event()

    class GatedHttpToolsProtocol(HttpToolsProtocol):
        def on_headers_complete(self) -> None:
            if (self.parser.get_method() == b"POST" and (self.cycle is None or self.cycle.response_complete)
                    and not self.parser.should_upgrade() and not self._at_connection_limit()):
                path = httptools.parse_url(self.url).path
                if path in paths:
                    t0 = arrival(self.headers)
                    try:
                        gate.admit(t0)
                    except ApiError as err:
                        self._refuse(err, path.decode("ascii"))
                        return
                    self.scope["state"][T0_KEY] = t0
            super().on_headers_complete()

        def _at_connection_limit(self) -> bool:
            limit = self.limit_concurrency
            return limit is not None and (len(self.connections) >= limit or len(self.tasks) >= limit)

        def _refuse(self, err: ApiError, path: str) -> None:
            body, headers = busy_response(err)
            keep_alive = self.parser.get_http_version() != "1.0" and self.parser.should_keep_alive()
            head = [STATUS_LINE[err.status]]
            for name, value in [*self.server_state.default_headers, *headers]:
                head += [name, b": ", value, b"\r\n"]
            if not keep_alive:
                head.append(b"connection: close\r\n")
            self.transport.write(b"".join([*head, b"\r\n", body]))
            metrics.count(path, err.status)
            self.cycle = _Refused()  # type: ignore[assignment]
            if not keep_alive:
                self.transport.close()
            self.on_response_complete()

    return GatedHttpToolsProtocol
