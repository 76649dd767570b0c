"""``ChunkSelector.select`` with k="auto", threshold and min_p: a property test over random
inputs (indices refer to the input order, the caller's list is never changed, the rules
hold), an empty selection, and the errors."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from chunksel.errors import ConfigError

pytest.importorskip("torch")

from tests.unit.selectors.test_calibration import _instances, _splits  # noqa: E402

GOOD = np.eye(8, dtype=np.float32)[0]


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    """A saved SRAS selector (reads q and E only: no encoder when they are given),
    calibrated on the validation split, and the same selector without calibration."""
    import torch

    from chunksel.selectors.sras import SRASSelector

    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("abstain")
    train, val, _ = _splits(_instances())
    settings = dict(hidden=16, warmup_epochs=30, warmup_lr=1e-2, ppo_epochs=0, progress=False)
    SRASSelector(**settings).fit(train, None, val).save(root / "cal")
    SRASSelector(**settings).fit(train).save(root / "plain")
    return root


@pytest.fixture(scope="module")
def cs(calibrated):
    from chunksel import ChunkSelector

    return ChunkSelector.load(calibrated / "cal")


def _far(n: int, seed: int = 0) -> np.ndarray:
    """Chunk embeddings pointing away from the evidence direction (low probabilities)."""
    v = -GOOD + 0.05 * np.random.default_rng(seed).normal(size=(n, 8)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_auto_may_return_nothing_and_says_it_abstained(cs):
    q = np.eye(8, dtype=np.float32)[1]
    res = cs.select("what is the golf answer", ["a", "b", "c"], k="auto", chunk_embeddings=_far(3),
                    question_embedding=q)
    assert res.selected == [] and res.indices == [] and res.abstained
    assert all(p < cs.calibrator.auto_threshold for p in res.probabilities)
    d = json.loads(json.dumps(res.to_dict(), allow_nan=False))
    assert d["selected"] == [] and d["abstained"] is True and 0 <= d["p_answerable"] <= 1
    # the same chunks with a fixed k: the best one, with its probability, not abstained
    one = cs.select("what is the golf answer", ["a", "b", "c"], k=1, chunk_embeddings=_far(3), question_embedding=q)
    assert len(one.selected) == 1 and not one.abstained
    assert one.selected[0].probability == one.probabilities[one.selected[0].index]
    # an evidence-like chunk passes the operating point
    emb = np.vstack([_far(2), GOOD[None, :]])
    hit = cs.select("q", ["a", "b", "c"], k="auto", chunk_embeddings=emb, question_embedding=q)
    assert 2 in hit.indices and not hit.abstained


def test_min_p_and_threshold_abstain(cs):
    q = np.eye(8, dtype=np.float32)[1]
    emb = np.vstack([_far(2), GOOD[None, :]])
    res = cs.select("q", ["a", "b", "c"], k=3, chunk_embeddings=emb, question_embedding=q, min_p=1.0)
    assert res.selected == [] and res.abstained  # p_answerable < 1
    res = cs.select("q", ["a", "b", "c"], k=3, chunk_embeddings=emb, question_embedding=q, threshold=0.0)
    assert len(res.selected) == 3 and not res.abstained


def test_rules_need_a_calibrated_selector_and_valid_values(calibrated, cs):
    from chunksel import ChunkSelector

    plain = ChunkSelector.load(calibrated / "plain")
    emb, q = _far(2), np.eye(8, dtype=np.float32)[1]
    res = plain.select("q", ["a", "b"], k=1, chunk_embeddings=emb, question_embedding=q)
    assert res.probabilities == [None, None] and res.p_answerable is None and not res.abstained
    for kw in ({"k": "auto"}, {"threshold": 0.5}, {"min_p": 0.5}):
        with pytest.raises(ConfigError, match="no calibrator"):
            plain.select("q", ["a", "b"], chunk_embeddings=emb, question_embedding=q, **kw)
    for kw, what in (({"k": "all"}, "k must be"), ({"k": 0}, "k must be"), ({"threshold": 1.5}, "threshold"),
                     ({"min_p": -0.1}, "min_p"), ({"threshold": "high"}, "threshold")):
        with pytest.raises(ConfigError, match=what):
            cs.select("q", ["a", "b"], chunk_embeddings=emb, question_embedding=q, **kw)


def test_property_indices_follow_input_order_and_inputs_are_never_changed(cs):
    """A seeded random loop (hypothesis is not installed here) over chunk counts, vectors,
    k, threshold and min_p."""
    rng = np.random.default_rng(7)
    auto_t = cs.calibrator.auto_threshold
    for trial in range(150):
        n = int(rng.integers(1, 9))
        chunks = [f"chunk {int(rng.integers(0, 4))}" for _ in range(n)]  # duplicates on purpose
        emb = rng.normal(size=(n, 8)).astype(np.float32)
        emb[rng.random(n) < 0.3] = GOOD
        q = rng.normal(size=8).astype(np.float32)
        k = "auto" if rng.random() < 0.4 else int(rng.integers(1, n + 3))
        threshold = None if rng.random() < 0.5 else float(rng.random())
        min_p = None if rng.random() < 0.6 else float(rng.random())
        before, emb_before = list(chunks), emb.copy()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # more than K=5 chunks: the rest are unscored
            res = cs.select("what is it", chunks, k=k, chunk_embeddings=emb, question_embedding=q,
                            threshold=threshold, min_p=min_p)
        assert chunks == before and np.array_equal(emb, emb_before), trial
        n_scored = min(n, 5)
        idx = res.indices
        assert len(set(idx)) == len(idx) and all(0 <= j < n_scored for j in idx)
        assert [c.text for c in res.selected] == [chunks[j] for j in idx]
        assert [c.rank for c in res.selected] == list(range(1, len(idx) + 1))
        assert [c.score for c in res.selected] == [res.all_scores[j] for j in idx]
        assert res.scores == sorted(res.scores, reverse=True)
        assert len(res.probabilities) == n and res.probabilities[n_scored:] == [None] * (n - n_scored)
        p = res.probabilities
        bar = max([b for b in (auto_t if k == "auto" else None, threshold) if b is not None], default=None)
        if min_p is not None and res.p_answerable < min_p:
            assert idx == []
        else:
            passing = [j for j in range(n_scored) if bar is None or p[j] >= bar]
            want = len(passing) if k == "auto" else min(k, len(passing))
            assert len(idx) == want and set(idx) <= set(passing), trial
        ruled = k == "auto" or threshold is not None or min_p is not None
        assert res.abstained == (ruled and not idx)
        json.dumps(res.to_dict(), allow_nan=False)
    # a batch gives what single calls give
    qs = ["a", "b"]
    embs = [rng.normal(size=(3, 8)).astype(np.float32) for _ in qs]
    qv = [rng.normal(size=8).astype(np.float32) for _ in qs]
    batch = cs.select_batch(qs, [["x", "y", "z"]] * 2, k="auto", chunk_embeddings=embs, question_embeddings=qv)
    for i, r in enumerate(batch):
        one = cs.select(qs[i], ["x", "y", "z"], k="auto", chunk_embeddings=embs[i], question_embedding=qv[i])
        assert r.indices == one.indices and r.probabilities == pytest.approx(one.probabilities)
