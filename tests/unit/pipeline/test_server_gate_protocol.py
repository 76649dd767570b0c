"""Admission in the server's HTTP protocol: under ``chunksel serve`` a refused request is
answered 503 from its request line and headers, before any ASGI task runs and before its
body has arrived; the keep-alive connection then serves the next request, and an admitted
request is admitted once and leaves the gate when answered."""

from __future__ import annotations

import json
import socket
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("httptools")

from tests.unit.pipeline.uvicorn_thread import in_thread  # noqa: E402

from chunksel.pipeline.serve_gate import T0_KEY  # noqa: E402


@pytest.fixture
def server():
    """A real uvicorn server (make_server) over the app of a selector that needs no model,
    with every ASGI call the app receives recorded."""
    from chunksel import ChunkSelector
    from chunksel.pipeline.server import ServeSettings, bind, create_app, make_server

    s = ServeSettings(port=0, concurrency=1, queue=1, timeout_s=5.0, answer=False)
    app = create_app(ChunkSelector.load("retrieval"), s)
    calls: list[tuple[str, bool]] = []

    async def recorded(scope, receive, send):
        if scope["type"] == "http":
            calls.append((scope["path"], T0_KEY in scope.get("state", {})))
        await app(scope, receive, send)

    sock = bind("127.0.0.1", 0)
    with in_thread(make_server(recorded, s, gate=app.state.gate), sock):
        yield sock.getsockname()[1], app.state.gate, calls


def _read_response(conn: socket.socket) -> tuple[int, dict[str, str], bytes]:
    buf = b""
    while b"\r\n\r\n" not in buf:
        part = conn.recv(65536)
        assert part, f"connection closed after {buf!r}"
        buf += part
    head, rest = buf.split(b"\r\n\r\n", 1)
    lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, v in (line.split(":", 1) for line in lines[1:])}
    n = int(headers["content-length"])
    while len(rest) < n:
        rest += conn.recv(65536)
    return int(lines[0].split()[1]), headers, rest[:n]


def _head(path: str, n: int, extra: str = "") -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {n}\r\n"
            f"{extra}\r\n").encode()


def test_a_refusal_is_sent_before_the_body_arrives_and_no_asgi_task_runs(server):
    port, gate, calls = server
    body = json.dumps({"question": "who wrote hamlet?", "chunks": ["x" * 100] * 40, "k": 1}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        gate.admitted = gate.s.concurrency + gate.s.queue  # full: the next request is refused
        conn.sendall(_head("/select", len(body)) + body[:100])  # headers and the body's first bytes only
        status, headers, got = _read_response(conn)
        assert status == 503 and int(headers["retry-after"]) >= 1
        assert json.loads(got)["error"] == "busy" and json.loads(got)["limit"] == "queue"
        assert calls == []  # answered by the protocol: the app never saw it
        conn.sendall(body[100:])  # the rest of its body is dropped, not read as a new request
        gate.admitted = 0
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # the same keep-alive connection
        status, _, got = _read_response(conn)
        assert status == 200 and json.loads(got)["status"] == "ok"
        conn.sendall(_head("/select", len(body)) + body)
        status, _, got = _read_response(conn)
        assert status == 200 and json.loads(got)["indices"] == [0]
    assert calls == [("/health", False), ("/select", True)]  # admitted in the protocol, once
    assert gate.admitted == 0  # and it left the gate when answered
    snap = gate.metrics.snapshot()
    assert snap["requests"]["/select"] == {"503": 1, "200": 1} and snap["dropped"] == {"queue_full": 1}


def test_a_refusal_on_a_closing_connection_closes_it(server):
    port, gate, calls = server
    gate.admitted = gate.s.concurrency + gate.s.queue
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(_head("/select/batch", 2, "Connection: close\r\n") + b"{}")
        status, headers, _ = _read_response(conn)
        assert status == 503 and headers["connection"] == "close"
        assert conn.recv(10) == b""  # closed by the server
    assert calls == []


def test_work_finished_past_its_deadline_is_a_504_never_a_late_answer(server, monkeypatch):
    """A starved event loop can wake after a request's deadline with its work done; the
    answer is then 504, not a 200 delivered late. The app's clock is moved on 10 s."""
    import types

    from chunksel.pipeline import serve_app

    port, gate, calls = server
    late = types.SimpleNamespace(perf_counter=lambda: time.perf_counter() + 10.0)
    monkeypatch.setattr(serve_app, "time", late)
    body = json.dumps({"question": "who wrote hamlet?", "chunks": ["a", "b"]}).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:
        conn.sendall(_head("/select", len(body)) + body)
        status, _, got = _read_response(conn)
        assert status == 504 and json.loads(got)["limit"] == "timeout_s"
        conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")  # not gated: no deadline, answered
        assert _read_response(conn)[0] == 200
    assert gate.metrics.snapshot()["dropped"] == {"deadline_after_work": 1} and gate.admitted == 0
