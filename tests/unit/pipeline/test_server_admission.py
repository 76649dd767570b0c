"""The server's admission gate on a scripted clock: what it predicts, what it learns
from, and that a rejected request is counted and never admitted."""

from __future__ import annotations

import pytest

pytest.importorskip("fastapi")

from chunksel.pipeline import serve_gate  # noqa: E402
from chunksel.pipeline.serve_gate import Gate  # noqa: E402
from chunksel.pipeline.serve_requests import ApiError, Metrics, ServeSettings  # noqa: E402


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def gate(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(serve_gate.time, "perf_counter", clock)
    g = Gate(ServeSettings(concurrency=1, queue=100, timeout_s=1.0).check(), Metrics())
    yield g, clock
    g.pool.shutdown()


def test_the_gate_learns_the_time_between_finished_work_while_others_wait(gate):
    g, clock = gate
    g.waiting = 3  # requests queued behind the one that finishes
    g._observe(0.05)
    clock.now += 0.1
    g._observe(0.05)
    assert g.interval_s == pytest.approx(0.1)  # what the worker sustains, not the 0.05 s of work
    g.waiting = 0
    clock.now += 0.1
    g._observe(0.05)  # nothing waited: the gap that follows is idle time, not service
    clock.now += 5.0
    g._observe(0.05)
    assert g.interval_s == pytest.approx(0.1)


def test_requests_that_time_out_in_the_queue_never_shorten_the_estimate(gate):
    g, clock = gate
    g.interval_s = 0.1
    for _ in range(20):  # admitted, then answered 504 without work: leave() alone
        g.admit(clock.now)
        g.leave()
    assert g.interval_s == pytest.approx(0.1) and g.admitted == 0


def test_admission_rejects_what_would_be_answered_too_late_and_counts_it(gate):
    g, clock = gate
    g.interval_s = 0.09
    t0 = clock.now
    admitted = 0
    with pytest.raises(ApiError) as err:
        for _ in range(50):
            g.admit(t0)
            admitted += 1
    # the k-th is answered after about k * 0.09 s: admitted while that is within ADMIT_SHARE of 1 s
    assert admitted == int(serve_gate.ADMIT_SHARE / 0.09) == g.admitted
    assert err.value.status == 503 and int(err.value.headers["Retry-After"]) >= 1
    assert g.metrics.dropped["admission"] == 1


def _call(layer, path, method="POST", headers=()):
    import asyncio

    sent, called = [], []

    async def inner(scope, receive, send):
        called.append(scope.get("state", {}).get(serve_gate.T0_KEY))
        await send({"type": "http.response.start", "status": 200, "headers": []})

    async def receive():  # the body is never read by the layer
        raise AssertionError("the admission layer read the body")

    async def send(msg):
        sent.append(msg)

    layer.app = inner
    asyncio.run(layer({"type": "http", "method": method, "path": path, "headers": list(headers)}, receive, send))
    return sent, called


def test_the_admission_layer_answers_503_before_the_app_or_the_body(gate):
    g, clock = gate
    layer = serve_gate.AdmitFirst(None, g, g.metrics)
    sent, called = _call(layer, "/select")  # an idle gate: through, and it leaves when answered
    assert called == [clock.now] and sent[0]["status"] == 200 and g.admitted == 0
    g.interval_s, g.admitted = 0.2, 5  # five ahead at 0.2 s each: past half of the 1 s deadline
    sent, called = _call(layer, "/select/batch")
    assert not called and sent[0]["status"] == 503 and g.admitted == 5
    headers = dict(sent[0]["headers"])
    assert headers[b"content-type"] == b"application/json" and int(headers[b"retry-after"]) >= 1
    assert b'"error": "busy"' in sent[1]["body"]
    assert g.metrics.counts["/select/batch"]["503"] == 1 and g.metrics.dropped["admission"] == 1
    sent, called = _call(layer, "/health", method="GET")  # health and metrics are never gated
    assert called and sent[0]["status"] == 200


def test_an_upstream_start_counts_against_the_deadline(gate, monkeypatch):
    g, clock = gate
    epoch = 1.8e9
    monkeypatch.setattr(serve_gate.time, "time", lambda: epoch)

    def start(value):
        return serve_gate.arrival([(b"content-type", b"application/json"), (b"X-Request-Start", value)])

    assert start(f"t={epoch - 0.25}".encode()) == pytest.approx(clock.now - 0.25)  # seconds
    assert start(str(int((epoch - 0.25) * 1e3)).encode()) == pytest.approx(clock.now - 0.25)  # milliseconds
    assert start(f"t={int((epoch - 0.25) * 1e6)}".encode()) == pytest.approx(clock.now - 0.25)  # microseconds
    for ignored in (b"t=soon", f"t={epoch + 5}".encode(), f"t={epoch - 7200}".encode()):
        assert start(ignored) == clock.now  # malformed, in the future, or older than an hour
    assert serve_gate.arrival([]) == clock.now

    # admission weighs the time the request has left, upstream wait included
    layer = serve_gate.AdmitFirst(None, g, g.metrics)
    g.interval_s, g.admitted = 0.01, 1  # one ahead: answered in about 0.02 s
    sent, called = _call(layer, "/select", headers=[(b"x-request-start", f"t={epoch - 0.7}".encode())])
    assert sent[0]["status"] == 200 and called == [pytest.approx(clock.now - 0.7)]
    sent, called = _call(layer, "/select", headers=[(b"x-request-start", f"t={epoch - 0.99}".encode())])
    assert sent[0]["status"] == 503 and not called and g.metrics.dropped["admission"] == 1
