"""k="auto", threshold and min_p over HTTP (a real uvicorn server on loopback): /select
and /select/batch may return no chunk, each batch item keeps its own rule, and bad
values or an uncalibrated selector get a JSON 422 naming the field."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
httpx = pytest.importorskip("httpx")
pytest.importorskip("torch")

from tests.doubles import FakeEncoder  # noqa: E402
from tests.unit.pipeline.test_abstention_api import GOOD, _far, calibrated  # noqa: E402,F401
from tests.unit.pipeline.test_server import running  # noqa: E402

Q = np.eye(8, dtype=np.float32)[1].tolist()


def _item(emb, **kw):
    return {"question": "what is it", "chunks": [f"c{j}" for j in range(len(emb))],
            "chunk_embeddings": np.asarray(emb).tolist(), "question_embedding": Q, **kw}


@pytest.fixture(scope="module")
def urls(calibrated):  # noqa: F811
    from chunksel import ChunkSelector

    cal = ChunkSelector.load(calibrated / "cal", encoder=FakeEncoder())
    plain = ChunkSelector.load(calibrated / "plain", encoder=FakeEncoder())
    with running(cal, batch_wait_ms=0) as a, running(plain) as b, running(cal, batch_wait_ms=20) as c:
        yield a, b, c, cal


def test_select_and_batch_may_return_nothing(urls):
    url, _, batched, cs = urls
    near = np.vstack([_far(2), GOOD[None, :]])
    for base in (url, batched):
        r = httpx.post(base + "/select", json=_item(_far(3), k="auto"), timeout=30)
        assert r.status_code == 200, r.text
        body = r.json()
        assert body["selected"] == [] and body["abstained"] is True
        assert len(body["probabilities"]) == 3 and 0 <= body["p_answerable"] <= 1
        r = httpx.post(base + "/select", json=_item(near, k="auto"), timeout=30).json()
        assert 2 in r["indices"] and r["abstained"] is False
    items = [_item(_far(3), k="auto"), _item(_far(3), k=2), _item(near, k=3, min_p=1.0), _item(near, k=3, threshold=0.0)]
    r = httpx.post(url + "/select/batch", json={"items": items}, timeout=30)
    assert r.status_code == 200, r.text
    res = r.json()["results"]
    assert [len(x["selected"]) for x in res] == [0, 2, 0, 3]
    assert [x["abstained"] for x in res] == [True, False, True, False]
    # each item is what a single call gives
    one = cs.select("what is it", ["c0", "c1", "c2"], k=2, chunk_embeddings=_far(3), question_embedding=np.array(Q))
    assert res[1]["indices"] == one.indices
    assert res[1]["probabilities"] == pytest.approx(one.probabilities)


def test_bad_rules_and_an_uncalibrated_selector_are_422(urls):
    url, plain, _, _ = urls
    for kw, field in (({"k": "all"}, "'k'"), ({"threshold": 1.5}, "'threshold'"), ({"min_p": "x"}, "'min_p'")):
        r = httpx.post(url + "/select", json=_item(_far(2), **kw), timeout=30)
        assert r.status_code == 422 and field in r.json()["message"], r.text
    r = httpx.post(plain + "/select", json=_item(_far(2), k="auto"), timeout=30)
    assert r.status_code == 422 and "no calibrator" in r.json()["message"]
    r = httpx.post(plain + "/select", json=_item(_far(2), k=1), timeout=30)
    assert r.status_code == 200 and r.json()["probabilities"] == [None, None]
