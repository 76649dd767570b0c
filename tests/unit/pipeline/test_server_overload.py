"""Overload and both cores: admission control (503 + Retry-After), deadlines that stop
work between stages, work of departed clients dropped, batch requests bounded by their
total chunks, and ``chunksel serve --workers 2`` (two processes on one port)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from tests.unit.pipeline.test_application_api import CHUNKS, QUESTION, FakeEncoder  # noqa: E402
from tests.unit.pipeline.test_server import running, saved, tiny_generator  # noqa: E402, F401


class SlowEncoder(FakeEncoder):
    """The fake encoder, taking ``delay`` seconds a call (a busy worker)."""

    def __init__(self, delay: float) -> None:
        super().__init__()
        self.delay = delay

    def encode(self, texts, progress=False):
        time.sleep(self.delay)
        return super().encode(texts, progress)


def _load(saved, tiny_generator, delay):  # noqa: F811
    from chunksel import ChunkSelector

    return ChunkSelector.load(saved, encoder=SlowEncoder(delay), generator=tiny_generator, embedding_cache=False)


def _post(base, path, body, **kw):
    return httpx.post(base + path, json=body, timeout=kw.pop("timeout", 30), **kw)


def test_admission_answers_503_with_retry_after_instead_of_timing_out(saved, tiny_generator):  # noqa: F811
    cs = _load(saved, tiny_generator, 0.3)
    with running(cs, concurrency=1, queue=50, timeout_s=1.0, answer=False) as base:
        assert _post(base, "/select", {"question": QUESTION, "chunks": CHUNKS}).status_code == 200  # learns 0.3 s
        with ThreadPoolExecutor(10) as pool:
            got = list(pool.map(lambda _: _post(base, "/select", {"question": QUESTION, "chunks": CHUNKS}),
                                range(10)))
        codes = [r.status_code for r in got]
        assert 200 in codes and 503 in codes and 504 not in codes, codes
        busy = next(r for r in got if r.status_code == 503)
        assert busy.json()["error"] == "busy" and int(busy.headers["retry-after"]) >= 1
        assert busy.json()["retry_after_s"] >= 1
        m = httpx.get(base + "/metrics").json()
        assert m["dropped"]["admission"] == codes.count(503)


def test_a_passed_deadline_stops_the_work_before_the_next_stage(saved, tiny_generator):  # noqa: F811
    cs = _load(saved, tiny_generator, 0.8)
    with running(cs, concurrency=1, timeout_s=0.4, answer=False, admission=False) as base:
        r = _post(base, "/select", {"question": QUESTION, "chunks": CHUNKS})
        assert r.status_code == 504 and r.json()["limit"] == "timeout_s"
        time.sleep(0.8)  # the encode stage finishes; the score stage must not start
        m = httpx.get(base + "/metrics").json()
        assert m["dropped"] == {"deadline_before_score": 1}
        assert "score" not in m["latency_ms"]


def test_work_of_a_departed_client_is_dropped(saved, tiny_generator):  # noqa: F811
    cs = _load(saved, tiny_generator, 0.6)
    with running(cs, concurrency=1, timeout_s=10, answer=False, admission=False) as base:
        with ThreadPoolExecutor(2) as pool:
            first = pool.submit(_post, base, "/select", {"question": QUESTION, "chunks": CHUNKS})
            time.sleep(0.1)
            with pytest.raises(httpx.ReadTimeout):  # this client leaves while it waits
                _post(base, "/select", {"question": "gone?", "chunks": CHUNKS}, timeout=0.2)
            assert first.result().status_code == 200
        time.sleep(0.3)
        m = httpx.get(base + "/metrics").json()
        assert m["dropped"].get("client_gone") == 1
        assert m["latency_ms"]["score"]["count"] == 1  # only the first request was worked on


def test_batch_requests_are_bounded_by_their_total_chunks(saved, tiny_generator):  # noqa: F811
    cs = _load(saved, tiny_generator, 0.0)
    with running(cs, max_batch_chunks=6, answer=False) as base:
        items = [{"question": QUESTION, "chunks": CHUNKS}, {"question": "q2", "chunks": CHUNKS}]
        r = _post(base, "/select/batch", {"items": items})
        assert r.status_code == 413 and r.json()["limit"] == "max_batch_chunks"
        assert _post(base, "/select/batch", {"items": items[:1]}).status_code == 200


def test_serve_with_two_workers_shares_one_port(tmp_path):
    from chunksel.selectors.simple import RetrievalSelector

    RetrievalSelector().save(tmp_path / "r")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "chunksel.cli", "serve", "--model", str(tmp_path / "r"),
                             "--port", "0", "--no-answer", "--workers", "2"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        addr = json.loads(proc.stdout.readline())
        pids = {w["pid"] for w in addr["workers"]}
        assert len(pids) == 2 and all(w["rss_mb"] > 0 for w in addr["workers"])
        base = f"http://127.0.0.1:{addr['port']}"
        seen = set()
        for _ in range(20):
            h = httpx.get(base + "/health").json()
            seen.add(h["worker"]["pid"])
            r = httpx.post(base + "/select", json={"question": "q", "chunks": ["a", "b"], "k": 2})
            assert r.status_code == 200 and r.json()["indices"] == [0, 1]
        assert seen == pids  # twenty new connections: each worker got some (SO_REUSEPORT spreads them)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert "Traceback" not in err and "2 workers (RSS pid" in err


def test_idle_keep_alive_connections_do_not_turn_requests_away(saved, tiny_generator):  # noqa: F811
    import socket

    cs = _load(saved, tiny_generator, 0.0)
    with running(cs, concurrency=1, queue=2, answer=False) as base:
        port = int(base.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(40)]  # > concurrency + queue + 16
        try:
            time.sleep(0.3)  # the server has accepted them
            r = _post(base, "/select", {"question": QUESTION, "chunks": CHUNKS})
            assert r.status_code == 200, r.text
        finally:
            for c in idle:
                c.close()
