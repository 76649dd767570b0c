from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.selectors import get_selector_class, load_selector, make_selector
from chunksel.selectors.base import Selector, rank_order, selection_from_scores
from chunksel.types import Candidate, Instance, Question


class ConstantSelector(Selector):
    """Scores every candidate the same: exercises tie-breaking by retrieval rank."""

    name = "constant"
    requires_fit = False

    def __init__(self) -> None:
        pass

    def _score(self, batch, features, k):
        return np.zeros((len(batch), k))


def _inst(n: int) -> Instance:
    return Instance(Question("q", "q?"), [Candidate(f"p{i}", "t", rank=i) for i in range(n)])


def test_ties_go_to_the_better_retrieval_rank():
    sel = ConstantSelector()
    out = sel.select([_inst(4)], k=3)[0]
    assert out.indices == [0, 1, 2]
    assert rank_order(np.array([[1.0, 2.0, 2.0, 0.0]])).tolist() == [[1, 2, 0, 3]]


def test_padded_slots_are_minus_inf_and_never_selected():
    sel = ConstantSelector()
    scores = sel.score([_inst(5), _inst(2)])
    assert scores.shape == (2, 5)
    assert np.isneginf(scores[1, 2:]).all() and np.isfinite(scores[1, :2]).all()
    picked = sel.select([_inst(5), _inst(2)], k=4)
    assert [len(p.indices) for p in picked] == [4, 2]


def test_selection_from_scores_orders_by_score():
    sel = selection_from_scores(_inst(3), np.array([0.1, 0.9, 0.5]), 2)
    assert sel.indices == [1, 2] and sel.candidate_ids == ["p1", "p2"]


def test_no_candidates_and_bad_k_are_clear_errors():
    sel = ConstantSelector()
    with pytest.raises(DataError, match="no candidates"):
        sel.score([_inst(0)])
    with pytest.raises(ConfigError, match="k must be"):
        sel.select([_inst(2)], k=0)


def test_registry_names_and_unknown_name():
    assert get_selector_class("retrieval").name == "retrieval"
    with pytest.raises(ConfigError, match="unknown selector 'nope'"):
        make_selector("nope")


def test_corrupt_or_foreign_checkpoints_are_rejected(tmp_path):
    make_selector("random", seed=3).save(tmp_path / "r")
    assert load_selector(tmp_path / "r").seed == 3
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "config.json").write_text("{broken")
    with pytest.raises(DataError, match="corrupt checkpoint"):
        load_selector(tmp_path / "bad")
    cfg = json.loads((tmp_path / "r" / "config.json").read_text())
    cfg["format_version"] = 99
    (tmp_path / "r" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DataError, match="format version 99"):
        load_selector(tmp_path / "r")
    with pytest.raises(DataError, match="not a saved selector"):
        load_selector(tmp_path / "missing")


def test_oracle_and_retrieval_behave(toy_instances):
    test = toy_instances[:6]
    oracle = make_selector("oracle").select(test)
    assert all(inst.labels()[s.indices[0]] == 1 for inst, s in zip(test, oracle))
    assert all(s.indices == [0] for s in make_selector("retrieval").select(test))
    r1 = make_selector("random", seed=1).score(test)
    np.testing.assert_array_equal(r1, make_selector("random", seed=1).score(test))
