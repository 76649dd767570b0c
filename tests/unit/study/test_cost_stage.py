"""Table 1's cost stage times the cold query path. Evaluation fills the in-process LETOR
memo with the very test instances the stage then times; the stage must read none of it,
so every timed call computes its features. The memo's hits and computations are counted
(:data:`~chunksel.selectors.letor.MEMO_COUNTS`); nothing here is timed."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from tests.conftest import make_toy_instances
from tests.doubles import FakeEncoder

from chunksel.selectors import letor, make_selector
from chunksel.study import state
from chunksel.study.cost import measure_cost, raw, text_path
from chunksel.study.profiles import Profile
from chunksel.study.state import Study

QUERIES = 4  # latency_queries: each path runs 3 warm-up calls, then 3 passes (given) or 1 (text)
CALLS = (3 + 3 * QUERIES) + (3 + QUERIES)


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    path = tmp_path / "toy.tsv"
    texts = sorted({c.text for i in make_toy_instances() for c in i.candidates})
    path.write_text("id\ttext\ttitle\n" + "".join(f"d{j}\t{t}\t\n" for j, t in enumerate(texts)))
    return path


def _delta(before: Counter) -> Counter:
    return Counter({k: letor.MEMO_COUNTS[k] - before[k] for k in ("hits", "computed")})


def test_the_cost_stage_reads_no_memo_that_evaluation_filled(corpus: Path, monkeypatch) -> None:
    prof = Profile("tiny", limit=None, seeds=(0,), budgets=(), latency_queries=QUERIES,
                   overrides={"lambdamart": {"corpus": str(corpus), "n_estimators": 20}})
    study = Study({"toy": make_toy_instances(n=40)}, ["lambdamart"], prof, None, 0, False, False, {})
    study.encoder = FakeEncoder()
    counts: dict[str, Counter] = {}
    real = state.measure_cost

    def cost_stage(*args, **kwargs):
        counts["before cost"] = _delta(start)
        before = Counter(letor.MEMO_COUNTS)
        out = real(*args, **kwargs)
        counts["cost"] = _delta(before)
        return out

    monkeypatch.setattr(state, "measure_cost", cost_stage)
    start = Counter(letor.MEMO_COUNTS)
    res = study.fit_eval("lambdamart", 0, "toy", want_cost=True)
    assert counts["before cost"]["hits"] > 0  # evaluation re-read the memo: it holds the test set
    assert counts["cost"]["hits"] == 0
    assert counts["cost"]["computed"] == CALLS  # every timed and warm-up call computed its features
    assert res["cost"]["p50_ms"] > 0 and res["cost"]["text_p50_ms"] > 0
    assert study.encoder.n_encoded == (3 + QUERIES) * 6  # K chunks and the question, per call


def _toy_data(n: int = 30):
    from chunksel.features.base import InMemoryFeatures

    insts = make_toy_instances(n=n)
    rng = np.random.default_rng(0)
    feats = InMemoryFeatures([i.id for i in insts], h=rng.normal(size=(n, 6)), r=rng.random((n, 4)))
    split = {s: [i for i in insts if i.split == s] for s in ("train", "val", "test")}
    return split, feats


@pytest.mark.parametrize("name, settings", [
    ("ranksvm", {}),
    ("anchored", {"blocks": "hs+q+letor+lambdamart", "members": 1, "hidden": 8, "phi_hidden": 8,
                  "max_epochs": 2, "batch_size": 8}),
])
def test_letor_selectors_compute_every_call(corpus: Path, name: str, settings: dict) -> None:
    split, feats = _toy_data()
    sel = make_selector(name, corpus=str(corpus), progress=False, **settings).fit(split["train"], feats, split["val"])
    sel.score(split["test"], feats)  # evaluation: fills the memo
    before = Counter(letor.MEMO_COUNTS)
    cost = measure_cost(sel, split["test"], feats, QUERIES, encoder=FakeEncoder())
    assert _delta(before) == Counter({"hits": 0, "computed": CALLS})
    assert cost["text_p95_ms"] >= cost["text_p50_ms"] > 0
    sel.score(split["test"][:1], feats)
    assert _delta(before)["hits"] == 1  # the memo itself is back on


def test_the_text_path_encodes_what_the_selector_reads(corpus: Path) -> None:
    split, feats = _toy_data()
    inst = split["test"][0]
    enc = FakeEncoder()
    anchored = make_selector("anchored", blocks="q+chunk", members=1, hidden=8, max_epochs=2,
                             progress=False).fit(split["train"], feats, split["val"])
    got = text_path(anchored, feats, enc)(raw(inst))
    assert enc.n_encoded == len(inst.candidates) + 1  # the chunks and the question, in one call
    # the same as scoring the instance with the encoder's vectors and their cosines
    vec = FakeEncoder().encode([c.text for c in inst.candidates] + [inst.question.text])
    want = replace(inst, question=replace(inst.question, embedding=vec[-1]), candidates=[
        replace(c, embedding=vec[j], score=float(vec[j] @ vec[-1])) for j, c in enumerate(inst.candidates)])
    np.testing.assert_array_equal(got, anchored.score([want], feats))
    assert inst.question.embedding is not None and inst.candidates[0].embedding is not None  # untouched
    assert raw(inst).question.embedding is None and all(np.isnan(c.score) for c in raw(inst).candidates)

    bm25 = make_selector("bm25", corpus=str(corpus), progress=False)
    text_path(bm25, None, enc)(raw(inst))
    assert enc.n_encoded == len(inst.candidates) + 1  # BM25 reads neither embeddings nor scores


def test_no_text_figures_from_an_encoder_of_another_space(corpus: Path) -> None:
    split, feats = _toy_data()
    sel = make_selector("ranksvm", corpus=str(corpus), progress=False).fit(split["train"], None, split["val"])
    enc = FakeEncoder()
    enc.dim = 16  # the toy vectors are 8-dimensional
    cost = measure_cost(sel, split["test"], None, 2, encoder=enc)
    assert "text_p50_ms" not in cost and cost["p50_ms"] > 0 and enc.n_encoded == 0
    retrieval = make_selector("retrieval").fit(split["train"])
    assert measure_cost(retrieval, split["test"], None, 2, encoder=enc)["text_p50_ms"] > 0  # reads no vectors
