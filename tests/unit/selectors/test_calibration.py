"""Calibrators: validation only (an instrumented split check), monotone maps, probabilities
in [0, 1] and JSON-safe, identical after save/reload, scores left untouched."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import make_toy_instances

from chunksel.errors import DataError, NotFittedError
from chunksel.selectors import load_selector
from chunksel.selectors.calibration import (
    Calibrator,
    calibrate_selector,
    fit_calibrator,
    fit_score_map,
)
from chunksel.selectors.simple import RetrievalSelector
from chunksel.selectors.sras import SRASSelector


def _instances(n: int = 200, seed: int = 0):
    """Toy sets, about half without any positive; the positive's retrieval score and
    embedding direction carry a noisy signal."""
    insts = make_toy_instances(n, seed=seed)
    rng = np.random.default_rng(seed)
    good = np.eye(8, dtype=np.float32)[0]
    for inst in insts:
        unanswerable = rng.random() < 0.5
        for c in inst.candidates:
            if unanswerable:
                c.labels["containment"] = 0
            y = c.labels["containment"]
            c.score = float(0.3 + 0.1 * rng.normal() + 0.25 * y)
            if y:
                v = good + 0.6 * rng.normal(size=8).astype(np.float32)
                c.embedding = v / np.linalg.norm(v)
    return insts


def _splits(insts):
    return ([i for i in insts if i.split == "train"], [i for i in insts if i.split == "val"],
            [i for i in insts if i.split == "test"])


class SplitSpy(list):
    """A validation list that records which splits the calibrator read."""

    seen: set[str] = set()

    def __iter__(self):
        for inst in super().__iter__():
            SplitSpy.seen.add(inst.split)
            yield inst


def test_calibrator_sees_only_validation_and_refuses_test():
    train, val, test = _splits(_instances())
    SplitSpy.seen = set()
    sel = RetrievalSelector().fit(train, None, SplitSpy(val))
    assert sel.calibrator_ is not None and SplitSpy.seen == {"val"}
    with pytest.raises(DataError, match="must not see the test split"):
        calibrate_selector(RetrievalSelector(), val + test[:1])
    # fit() given test instances as its validation split trains, but never calibrates on them
    with pytest.warns(UserWarning, match="not calibrated: calibration must not see the test split"):
        sel = SRASSelector(hidden=8, warmup_epochs=1, ppo_epochs=0, progress=False).fit(train, None, test)
    assert sel.is_fitted() and sel.calibrator_ is None


def test_score_maps_are_monotone_and_in_unit_interval():
    rng = np.random.default_rng(1)
    s = rng.normal(size=400)
    y = (rng.random(400) < 1 / (1 + np.exp(-2 * s))).astype(float)
    grid = np.linspace(-6, 6, 500)
    for method in ("isotonic", "platt"):
        p = fit_score_map(s, y, method)(grid)
        assert np.all(np.diff(p) >= 0), method
        assert p.min() >= 0 and p.max() <= 1
    with pytest.raises(ValueError, match="unknown calibration method"):
        fit_score_map(s, y, "beta")


def test_fit_calibrator_records_its_choices_and_an_auto_operating_point():
    rng = np.random.default_rng(2)
    labels = np.zeros((300, 5), dtype=np.int8)
    ans = rng.random(300) < 0.4
    labels[ans, rng.integers(0, 5, ans.sum())] = 1
    scores = rng.normal(size=(300, 5)) + 1.5 * labels
    scores[0, 4] = -np.inf  # padding
    cal = fit_calibrator(scores, labels, label_source="containment")
    assert cal.chunk.method in ("isotonic", "platt", "set_rank", "chunk_logistic")
    assert cal.set.method in ("logistic", "top", "max", "noisy_or")
    assert cal.info["chunk_brier_oof"][cal.chunk.method] == min(cal.info["chunk_brier_oof"].values())
    assert set(cal.info["set_brier_oof"]) == {"logistic", "top", "max", "noisy_or"}
    op = cal.info["auto_operating_point"]
    assert 0 < cal.auto_threshold < 1 and op["auto_mean_kept"] <= op["k2_mean_kept"] + 1e-12  # k=2's budget
    # 60% of these sets have no evidence: k=2's recall fits in fewer chunks
    assert op["auto_recall"] >= op["k2_recall"] and op["auto_mean_kept"] < 2 and not op["capped_at_k2_budget"]
    p = cal.chunk_probabilities(scores)
    assert np.isnan(p[0, 4]) and np.all((p[np.isfinite(p)] >= 0) & (p[np.isfinite(p)] <= 1))
    ps = cal.set_probabilities(scores)
    assert ps.shape == (300,) and np.all((ps >= 0) & (ps <= 1))
    d = json.loads(json.dumps(cal.to_dict(), allow_nan=False))  # JSON-safe
    assert d["label_source"] == "containment" and d["split"] == "val"
    np.testing.assert_array_equal(Calibrator.from_dict(d).set_probabilities(scores), ps)
    np.testing.assert_array_equal(Calibrator.from_dict(d).chunk_probabilities(scores), p)
    with pytest.raises(DataError, match="with and without evidence"):
        fit_calibrator(scores, np.zeros_like(labels))


def test_fit_calibrator_on_a_validation_split_too_small_for_its_folds():
    # two sets: each fold's training part holds one of them, so one fold has nothing to
    # learn from; the calibrator still fits (it used to hand scikit-learn zero rows)
    labels = np.zeros((2, 5), dtype=np.int8)
    labels[0, 1] = 1
    scores = np.asarray([[0.1, 2.0, -0.3, 0.0, -1.0], [0.2, -0.5, 0.4, -0.1, 0.3]])
    cal = fit_calibrator(scores, labels, retrieval=scores.copy())
    p, ps = cal.chunk_probabilities(scores), cal.set_probabilities(scores)
    assert np.all((p >= 0) & (p <= 1)) and ps.shape == (2,) and np.all((ps >= 0) & (ps <= 1))
    # one answerable set and its positive's fold: no out-of-fold probabilities at all
    cal = fit_calibrator(scores[:1], labels[:1])
    assert cal.info["auto_operating_point"]["in_sample"] and 0 <= cal.auto_threshold <= 1


def test_trained_selector_is_calibrated_after_fit_and_reloads_identically(tmp_path):
    train, val, test = _splits(_instances())
    sel = SRASSelector(hidden=16, warmup_epochs=30, warmup_lr=1e-2, ppo_epochs=0, progress=False)
    uncalibrated = SRASSelector(hidden=16, warmup_epochs=30, warmup_lr=1e-2, ppo_epochs=0, progress=False).fit(train)
    sel.fit(train, None, val)
    # calibration is an add-on: the scores are those of the same fit without it
    np.testing.assert_array_equal(sel.score(test), uncalibrated.score(test))
    with pytest.raises(NotFittedError, match="not calibrated"):
        uncalibrated.probabilities(test)
    chunk_p, set_p = sel.probabilities(test)
    real = np.isfinite(sel.score(test))
    assert np.all(np.isnan(chunk_p[~real])) and np.all((chunk_p[real] >= 0) & (chunk_p[real] <= 1))
    assert sel.provenance_["calibration"]["label_source"] == "containment"
    assert sel.provenance_["calibration"]["split"] == "val"
    sel.save(tmp_path / "m")
    assert "calibration.json" in json.loads((tmp_path / "m" / "config.json").read_text())["checksums"]
    again = load_selector(tmp_path / "m")
    p2, s2 = again.probabilities(test)
    np.testing.assert_array_equal(p2, chunk_p)
    np.testing.assert_array_equal(s2, set_p)
    assert again.provenance_["calibration"]["label_source"] == "containment"
    # a damaged calibration file is a corrupt checkpoint
    (tmp_path / "m" / "calibration.json").write_text("{}")
    with pytest.raises(DataError, match="corrupt checkpoint"):
        load_selector(tmp_path / "m")


def test_retrieval_order_is_calibrated_on_its_retrieval_scores(tmp_path):
    train, val, test = _splits(_instances())
    sel = RetrievalSelector().fit(train, None, val)
    assert sel.calibrator_.source == "retrieval_score"
    _, set_p = sel.probabilities(test)
    answerable = np.array([i.answerable() for i in test])
    # the top retrieval score carries the planted signal: answerable sets rank higher
    assert set_p[answerable].mean() > set_p[~answerable].mean()
    sel.save(tmp_path / "r")
    np.testing.assert_array_equal(load_selector(tmp_path / "r").probabilities(test)[1], set_p)
    # no validation split: no calibrator, and saving writes none
    assert RetrievalSelector().fit(train).calibrator_ is None


def test_set_model_may_read_retrieval_scores_and_says_so():
    rng = np.random.default_rng(4)
    labels = np.zeros((300, 5), dtype=np.int8)
    ans = rng.random(300) < 0.4
    labels[ans, rng.integers(0, 5, ans.sum())] = 1
    scores = rng.normal(size=(300, 5)) + 1.0 * labels  # a weak within-set signal
    retrieval = 0.3 + 0.05 * rng.normal(size=(300, 5)) + 0.3 * ans[:, None]  # the set-level signal
    cal = fit_calibrator(scores, labels, retrieval=retrieval)
    assert "logistic+retrieval" in cal.info["set_brier_oof"]
    assert cal.set.method == "logistic+retrieval" and cal.set.retrieval and cal.reads_retrieval
    p = cal.set_probabilities(scores, retrieval=retrieval)
    assert p[ans].mean() > p[~ans].mean() + 0.3
    with pytest.raises(DataError, match="retrieval scores"):
        cal.set_probabilities(scores)
    again = Calibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(again.set_probabilities(scores, retrieval=retrieval), p)


def test_auto_operating_point_never_keeps_more_than_k2():
    from chunksel.selectors.calibration import _auto_threshold

    # every set answerable and the evidence anywhere: k=2's recall needs every chunk, so the
    # threshold is capped at k=2's budget (2 chunks per set)
    rng = np.random.default_rng(5)
    labels = np.zeros((60, 5), dtype=np.int8)
    labels[np.arange(60), rng.integers(0, 5, 60)] = 1
    scores = rng.normal(size=(60, 5))
    p = 1 / (1 + np.exp(-scores))
    t, op = _auto_threshold(p, labels, scores)
    assert op["capped_at_k2_budget"] and op["auto_mean_kept"] <= 2.0
    assert (p >= t).sum(axis=1).mean() == op["auto_mean_kept"]


def test_rank_aware_chunk_probabilities_when_the_set_signal_is_elsewhere():
    """Scores rank within a set but say nothing across sets; the retrieval scores say
    which sets hold evidence: P(set) x P(rank) wins on validation and k=auto then keeps
    fewer chunks than k=2 at k=2's recall there."""
    rng = np.random.default_rng(6)
    n = 400
    labels = np.zeros((n, 5), dtype=np.int8)
    ans = rng.random(n) < 0.4
    labels[ans, rng.integers(0, 2, ans.sum())] = 1  # evidence at rank 1 or 2 by score
    scores = np.sort(rng.normal(size=(n, 5)), axis=1)[:, ::-1] - rng.normal(size=(n, 1)) * 3  # set offsets
    retrieval = 0.3 + 0.05 * rng.normal(size=(n, 5)) + 0.3 * ans[:, None]
    cal = fit_calibrator(scores, labels, retrieval=retrieval)
    assert cal.chunk.method == "set_rank" and cal.set.retrieval
    assert cal.info["chunk_brier_oof"]["set_rank"] < min(cal.info["chunk_brier_oof"][m] for m in ("isotonic", "platt"))
    p = cal.chunk_probabilities(scores, retrieval)
    assert np.all(np.diff(p, axis=1) <= 1e-12)  # within a set: non-increasing with the rank (scores sorted)
    op = cal.info["auto_operating_point"]
    assert op["auto_mean_kept"] < op["k2_mean_kept"] and op["auto_recall"] >= op["k2_recall"]
    again = Calibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(again.chunk_probabilities(scores, retrieval), p)
    with pytest.raises(ValueError, match="whole set"):
        cal.chunk(scores[0])


def test_a_chunk_far_below_its_sets_top_falls_on_its_own():
    """Evidence sits in the top chunk, and in the second too when its score is close to the
    top's: a chunk's own gap decides, which a per-rank share of the set's probability
    (set_rank) cannot say. The chunk logistic wins out of fold, and at the same set
    probability the close second gets a higher probability than the distant one."""
    rng = np.random.default_rng(7)
    n = 400
    scores = np.sort(rng.normal(size=(n, 5)), axis=1)[:, ::-1] * 2
    labels = np.zeros((n, 5), dtype=np.int8)
    ans = rng.random(n) < 0.6
    labels[ans, 0] = 1
    close = scores[:, 0] - scores[:, 1] < 0.8
    labels[ans & close, 1] = 1
    cal = fit_calibrator(scores, labels)
    assert cal.chunk.method == "chunk_logistic", cal.info["chunk_brier_oof"]
    assert cal.info["chunk_brier_oof"]["chunk_logistic"] < cal.info["chunk_brier_oof"]["set_rank"]
    pair = np.array([[2.0, 1.8, -1.0, -1.5, -2.0], [2.0, 0.0, -1.0, -1.5, -2.0]])
    p = cal.chunk_probabilities(pair)
    assert p[0, 1] > p[1, 1] + 0.1 and p[0, 0] == pytest.approx(p[1, 0], abs=0.1)
    again = Calibrator.from_dict(json.loads(json.dumps(cal.to_dict())))
    np.testing.assert_array_equal(again.chunk_probabilities(pair), p)
