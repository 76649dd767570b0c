from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.selectors import load_selector
from chunksel.selectors.letor import FEATURE_NAMES
from chunksel.selectors.ltr import LambdaMARTSelector, RankSVMSelector
from chunksel.types import Candidate, Instance, Question


def _inst(i: int, x: np.ndarray, pos: int) -> Instance:
    cands = [Candidate(id=f"p{i}-{j}", text="t", rank=j, labels={"given": int(j == pos)}) for j in range(len(x))]
    return Instance(Question(id=f"toy:q:{i}", text="q", dataset="toy"), cands, label_source="given")


def _planted(n: int, k: int, seed: int) -> tuple[list[Instance], dict[str, np.ndarray]]:
    """Features where column 3 (the 'bm25' slot) is highest for the positive."""
    rng = np.random.default_rng(seed)
    insts, table = [], {}
    for i in range(n):
        x = rng.normal(size=(k, len(FEATURE_NAMES)))
        pos = int(rng.integers(k))
        x[pos, 3] = x[:, 3].max() + 0.5 + rng.random()  # separable by feature 3
        inst = _inst(i + seed * 1000, x, pos)
        insts.append(inst)
        table[inst.id] = x
    return insts, table


@pytest.fixture
def planted(monkeypatch):
    train, t1 = _planted(60, 5, 0)
    test, t2 = _planted(40, 5, 1)
    table = {**t1, **t2}

    def fake_features(self, batch, progress=False):
        k = max(len(i.candidates) for i in batch)
        x = np.zeros((len(batch), k, len(FEATURE_NAMES)))
        mask = np.zeros((len(batch), k), dtype=bool)
        for b, inst in enumerate(batch):
            x[b, : len(inst.candidates)] = table[inst.id]
            mask[b, : len(inst.candidates)] = True
        return x, mask

    # the LETOR extraction has its own tests; here the learners get planted feature rows
    monkeypatch.setattr(RankSVMSelector, "_features", fake_features)
    monkeypatch.setattr(LambdaMARTSelector, "_features", fake_features)
    return train, test


def _top1(scores: np.ndarray, batch: list[Instance]) -> float:
    return float(np.mean([i.labels()[int(np.argmax(s))] for s, i in zip(scores, batch, strict=True)]))


def test_ranksvm_ranks_the_positive_first_on_separable_features(planted, tmp_path: Path) -> None:
    train, test = planted
    sel = RankSVMSelector(C=10.0).fit(train)
    assert _top1(sel.score(test), test) == 1.0
    assert np.argmax(np.abs(sel.coef_)) == 3
    assert sel.n_parameters() == len(FEATURE_NAMES)
    assert sel.n_pairs_ == 60 * 4
    sel.save(tmp_path / "svm")
    np.testing.assert_array_equal(load_selector(tmp_path / "svm").score(test), sel.score(test))


def test_lambdamart_learns_a_toy_ranking(planted, tmp_path: Path) -> None:
    train, test = planted
    val, test = test[:10], test[10:]
    sel = LambdaMARTSelector(n_estimators=60, min_child_samples=5, early_stopping_rounds=10).fit(train, val=val)
    assert _top1(sel.score(test), test) >= 0.9  # chance: 0.2
    assert sel.n_parameters() > 0
    sel.save(tmp_path / "lm")
    assert (tmp_path / "lm" / "model.txt").is_file()
    np.testing.assert_array_equal(load_selector(tmp_path / "lm").score(test), sel.score(test))


def test_training_needs_a_contested_instance(planted) -> None:
    train, _ = planted
    for inst in train:
        for c in inst.candidates:
            c.labels["given"] = 0
    with pytest.raises(DataError, match="positive and a negative"):
        RankSVMSelector().fit(train)
