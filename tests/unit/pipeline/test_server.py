"""``chunksel serve``: the FastAPI app on a real uvicorn server (port 0, loopback), hit
with valid, oversized and malformed requests and with a wrong key; batching, timeouts,
and a clean shutdown of the ``chunksel serve`` process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import make_toy_instances

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from tests.doubles import FakeEncoder  # noqa: E402
from tests.unit.pipeline.test_application_api import CHUNKS, QUESTION  # noqa: E402
from tests.unit.pipeline.uvicorn_thread import in_thread  # noqa: E402

KEY = "s3cret"


@pytest.fixture(scope="module")
def tiny_generator():
    import torch

    torch.set_num_threads(1)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "features"))
    from tiny import tiny_llama, tiny_tokenizer

    return tiny_llama(seed=1), tiny_tokenizer(), "tiny-llama-test"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A small saved LambdaMART (BM25 statistics travel with it)."""
    from chunksel.selectors import make_selector

    root = tmp_path_factory.mktemp("serve")
    insts = make_toy_instances(n=30, dim=8, seed=2)
    corpus = root / "corpus.tsv"
    lines = ["id\ttext\ttitle\tsource"] + [f"{c.id}\t{c.text}\t\ttoy" for i in insts for c in i.candidates]
    corpus.write_text("\n".join(lines) + "\n", encoding="utf-8")
    sel = make_selector("lambdamart", corpus=str(corpus), n_estimators=10, min_child_samples=1, progress=False)
    sel.fit([i for i in insts if i.split == "train"])
    sel.save(root / "lm")
    return root / "lm"


@contextmanager
def running(cs, **settings):
    """The app on a uvicorn server in a thread, bound to 127.0.0.1:0; yields its base URL."""
    from chunksel.pipeline.server import ServeSettings, bind, create_app, make_server

    s = ServeSettings(port=0, **settings)
    sock = bind("127.0.0.1", 0)
    with in_thread(make_server(create_app(cs, s), s), sock):
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture(scope="module")
def cs(saved, tiny_generator):
    from chunksel import ChunkSelector

    return ChunkSelector.load(saved, encoder=FakeEncoder(), generator=tiny_generator)


@pytest.fixture(scope="module")
def url(cs):
    with running(cs, api_key=KEY, max_chunks=8, max_chunk_chars=200, max_request_bytes=4000,
                 max_new_tokens=8) as base:
        yield base


def _post(url, path, body, key=KEY, **kw):
    headers = {"X-API-Key": key} if key is not None else {}
    if isinstance(body, (dict, list)):
        return httpx.post(url + path, json=body, headers=headers, timeout=30, **kw)
    return httpx.post(url + path, content=body, headers={**headers, "content-type": "application/json"},
                      timeout=30, **kw)


def test_valid_requests(url, cs):
    r = _post(url, "/select", {"question": QUESTION, "chunks": CHUNKS, "k": 2})
    assert r.status_code == 200, r.text
    doc = r.json()
    want = cs.select(QUESTION, CHUNKS, k=2)
    assert doc["indices"] == want.indices and [c["rank"] for c in doc["selected"]] == [1, 2]
    assert doc["selector"] == "lambdamart" and set(doc["timings_ms"]) >= {"encode", "score", "total"}
    r = _post(url, "/select/batch", {"items": [{"question": QUESTION, "chunks": CHUNKS},
                                               {"question": "alpha?", "chunks": CHUNKS[:2], "k": 2}]})
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert len(res[0]["selected"]) == 1 and len(res[1]["selected"]) == 2
    r = _post(url, "/answer", {"question": QUESTION, "chunks": CHUNKS, "max_new_tokens": 3})
    assert r.status_code == 200, r.text
    assert isinstance(r.json()["answer"], str) and r.json()["selection"]["indices"]
    h = httpx.get(url + "/health", headers={"X-API-Key": KEY}).json()
    assert not any(str(v).startswith("/") for v in _leaves(h["selector"]))  # no absolute paths
    assert h["status"] == "ok" and h["selector"]["name"] == "lambdamart" and h["selector"]["corpus"].startswith("bundled:")
    m = httpx.get(url + "/metrics", headers={"X-API-Key": KEY}).json()
    assert m["requests"]["/select"]["200"] >= 1 and {"score", "request", "generate"} <= set(m["latency_ms"])


@pytest.mark.parametrize(("body", "status", "code", "limit"), [
    (b'{"question": "q", "chunks": ["a"', 400, "malformed_json", None),
    (b"\xff\xfe", 400, "malformed_json", None),
    ({"question": "q"}, 422, "invalid_request", None),
    ({"question": "", "chunks": ["a"]}, 422, "invalid_request", None),
    ({"question": "q", "chunks": ["a", 3]}, 422, "invalid_request", None),
    ({"question": "q", "chunks": ["a"], "k": 0}, 422, "invalid_request", "max_chunks"),
    ({"question": "q", "chunks": ["a"], "extra": 1}, 422, "invalid_request", None),
    ({"question": "q", "chunks": ["a"], "chunk_scores": [1.0, 2.0]}, 422, "invalid_request", None),
    ({"question": "q", "chunks": [f"c{i}" for i in range(9)]}, 413, "limit_exceeded", "max_chunks"),
    ({"question": "q", "chunks": ["x" * 201]}, 413, "limit_exceeded", "max_chunk_chars"),
    ({"question": "q" * 5000, "chunks": ["a"]}, 413, "limit_exceeded", "max_request_bytes"),
    (b"[" * 1500 + b"]" * 1500, 422, "invalid_request", "json_depth"),
])
def test_bad_requests_get_a_json_4xx_naming_the_problem(url, body, status, code, limit):
    r = _post(url, "/select", body)
    assert r.status_code == status, r.text
    doc = r.json()
    assert doc["error"] == code and doc["message"]
    if limit:
        assert doc["limit"] == limit


@pytest.mark.parametrize(("body", "field", "message"), [
    ({"question": "q", "chunks": CHUNKS, "chunk_embeddings": [[0.1] * 5] * len(CHUNKS)},
     "chunk_embeddings", "expected (4, 8)"),
    ({"question": "q", "chunks": CHUNKS, "question_embedding": [0.1] * 3}, "question_embedding", "expected (8,)"),
    ({"question": "q", "chunks": CHUNKS, "question_embedding": [[[0.1] * 8]]}, "question_embedding", "shape (d,)"),
    ({"question": "q", "chunks": CHUNKS, "chunk_embeddings": [[[[1.0]]] * 2] * 4}, "chunk_embeddings", "(n, d)"),
    ({"question": "q", "chunks": "one string"}, "chunks", "list of strings"),
    ({"question": "q", "chunks": ["a"], "titles": "t"}, "titles", "list of strings"),
    ({"question": "q", "chunks": ["a"], "chunk_embeddings": [[[[[[[[[1]]]]]]]]] * 3}, "chunk_embeddings", ""),
    ({"question": "q", "chunks": ["a", ""]}, "chunks", "chunks[1] is empty"),
    ({"question": "q", "chunks": CHUNKS, "chunk_embeddings": [[0.1] * 8] * 3 + [[0.0] * 8]}, "chunk_embeddings",
     "chunk_embeddings[3] is all zeros"),
])
def test_wrong_shapes_are_a_422_naming_the_field(url, body, field, message):
    r = _post(url, "/select", body)
    assert r.status_code == 422, r.text
    doc = r.json()
    assert doc["error"] == "invalid_request" and doc["field"] == field and message in doc["message"]


def test_api_key(url):
    for key in (None, "wrong", KEY + "x"):
        r = _post(url, "/select", {"question": QUESTION, "chunks": CHUNKS}, key=key)
        assert r.status_code == 401 and r.json()["error"] == "unauthorised"
    assert httpx.get(url + "/metrics").status_code == 401
    assert _post(url, "/answer", {"question": "q", "chunks": ["a"], "max_new_tokens": 99}).json()["limit"] == \
        "max_new_tokens"


def test_batching_and_no_answer(cs):
    with running(cs, batch_wait_ms=100, concurrency=1, answer=False) as base:
        qs = [f"what is the {w} answer" for w in ("alpha", "bravo", "golf", "echo", "delta", "hotel")]
        with ThreadPoolExecutor(6) as pool:
            got = list(pool.map(lambda q: _post(base, "/select", {"question": q, "chunks": CHUNKS, "k": 2}, key=None),
                                qs))
        assert all(r.status_code == 200 for r in got)
        for q, r in zip(qs, got, strict=True):
            assert r.json()["indices"] == cs.select(q, CHUNKS, k=2).indices
        m = httpx.get(base + "/metrics").json()
        assert m["batched_requests"] == 6 and m["batches"] < 6  # some requests shared a pass
        r = _post(base, "/answer", {"question": "q", "chunks": ["a"]}, key=None)
        assert r.status_code == 404 and r.json()["error"] == "disabled"


def test_timeout_and_a_failing_request_in_a_batch(cs, monkeypatch):
    real = type(cs).select_batch

    def slow(self, questions, *a, **k):
        if any("slow" in q for q in questions):
            time.sleep(2.0)
        if any("boom" in q for q in questions):
            raise ValueError("boom")
        return real(self, questions, *a, **k)

    monkeypatch.setattr(type(cs), "select_batch", slow)
    with running(cs, timeout_s=0.8, batch_wait_ms=50) as base:
        r = _post(base, "/select", {"question": "slow one", "chunks": CHUNKS}, key=None)
        assert r.status_code == 504 and r.json()["limit"] == "timeout_s"
        with ThreadPoolExecutor(2) as pool:
            good, bad = pool.map(lambda q: _post(base, "/select", {"question": q, "chunks": CHUNKS}, key=None),
                                 ["fine", "boom"])
        assert good.status_code == 200 and bad.status_code == 500 and bad.json()["error"] == "internal"


def test_chunksel_serve_process_starts_on_port_0_and_shuts_down_cleanly(tmp_path):
    from chunksel.selectors.simple import RetrievalSelector

    RetrievalSelector().save(tmp_path / "r")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[3] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-m", "chunksel.cli", "serve", "--model", str(tmp_path / "r"),
                             "--port", "0", "--no-answer"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        line = proc.stdout.readline()
        addr = json.loads(line)
        assert addr["host"] == "127.0.0.1" and addr["port"] > 0
        base = f"http://127.0.0.1:{addr['port']}"
        # printed once the socket accepts connections: the first request succeeds
        r = httpx.post(base + "/select", json={"question": "q", "chunks": ["a", "b"], "k": 2})
        assert r.status_code == 200 and r.json()["indices"] == [0, 1]
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert "Traceback" not in proc.stderr.read()


def _leaves(obj):
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _leaves(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _leaves(v)
    else:
        yield obj


def test_exposed_without_a_key_warns(capsys):
    from chunksel.pipeline.server import ServeSettings, warn_if_exposed

    assert warn_if_exposed(ServeSettings(host="0.0.0.0"))
    assert "without an API key" in capsys.readouterr().err
    assert not warn_if_exposed(ServeSettings(host="0.0.0.0", api_key="k"))
    assert not warn_if_exposed(ServeSettings(host="127.0.0.1"))
    assert not warn_if_exposed(ServeSettings(host="::1"))


def test_settings_are_checked():
    from chunksel.errors import ConfigError
    from chunksel.pipeline.server import ServeSettings

    with pytest.raises(ConfigError, match="concurrency must be"):
        ServeSettings(concurrency=0).check()
    with pytest.raises(ConfigError, match="timeout must be > 0"):
        ServeSettings(timeout_s=0).check()
    assert ServeSettings().host == "127.0.0.1"
    assert np.isfinite(ServeSettings().timeout_s)


def test_served_sockets_have_tcp_nodelay(cs):
    """Nagle's algorithm off on the listening socket and on an accepted connection."""
    import socket

    from chunksel.pipeline.server import ServeSettings, bind, create_app, make_server

    sock = bind("127.0.0.1", 0)
    assert sock.proto == socket.IPPROTO_TCP
    assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    s = ServeSettings(port=0)
    server = make_server(create_app(cs, s), s)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        for _ in range(1000):
            if server.started:
                break
            time.sleep(0.02)
        with httpx.Client(base_url=f"http://127.0.0.1:{sock.getsockname()[1]}") as client:
            assert client.get("/health").status_code == 200
            conns = list(server.server_state.connections)
            assert conns
            for proto in conns:
                accepted = proto.transport.get_extra_info("socket")
                assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        server.should_exit = True
        thread.join(timeout=20)
