"""Grouped splits: questions sharing an evidence passage never straddle train and test."""

from __future__ import annotations

import pytest

from chunksel.data.grouped_splits import evidence_groups, evidence_overlap, grouped_splits
from chunksel.data.splits import split_of_text
from chunksel.types import Candidate, Instance, Question


def _inst(qtext: str, pos_ids: list[str], gold_ids=(), split="train") -> Instance:
    cands = [Candidate(id=p, text=f"passage {p}", title="", score=1.0, rank=j,
                       labels={"containment": 1}) for j, p in enumerate(pos_ids)]
    cands.append(Candidate(id=f"neg-{qtext}", text=f"negative for {qtext}", title="", score=0.0,
                           rank=len(cands), labels={"containment": 0}))
    return Instance(question=Question(id=qtext, text=qtext, gold_ids=list(gold_ids)),
                    candidates=cands, split=split)


def _questions_with_splits(n: int = 400):
    """Questions whose default splits differ, chained by shared positive passages."""
    insts = []
    for i in range(n):
        # question i shares passage i // 4 with three others; every 10th also has a gold id
        gold = [f"gold{i // 10}"] if i % 10 == 0 else []
        insts.append(_inst(f"question number {i} about topic", [f"p{i // 4}"], gold))
    for inst in insts:
        inst.split = split_of_text(inst.question.text)
    return insts


def test_groups_join_shared_evidence_transitively():
    a = _inst("a", ["x"])
    b = _inst("b", ["x", "y"])
    c = _inst("c", ["y"])
    d = _inst("d", ["z"])
    e = _inst("e", [], gold_ids=["z"])  # a gold id and a positive candidate id meet
    g = evidence_groups([a, b, c, d, e])
    assert g[0] == g[1] == g[2] and g[3] == g[4] and g[0] != g[3]


def test_negatives_do_not_join_groups():
    a = _inst("a", ["x"])
    b = _inst("b", ["y"])
    b.candidates.append(Candidate(id="x", text="passage x", title="", score=0.0, rank=9,
                                  labels={"containment": 0}))
    g = evidence_groups([a, b])
    assert g[0] != g[1]


def test_grouped_splits_remove_overlap_and_keep_singletons():
    insts = _questions_with_splits()
    before = evidence_overlap(insts)
    assert before["test"]["shared"] > 0  # the constructed data does overlap
    splits = grouped_splits(insts)
    after = evidence_overlap(insts, splits)
    assert after["val"]["shared"] == 0 and after["test"]["shared"] == 0
    assert set(splits) == {"train", "val", "test"}
    lone = _inst("a question alone", ["only-mine"])
    assert grouped_splits([lone]) == [split_of_text(lone.question.text)]


def test_overlap_by_own_labels_ignores_labels_attached_later():
    train = _inst("a", ["x"])
    test = _inst("b", ["y"], split="test")
    test.candidates[-1].labels["semantic@judge"] = 1  # a judge marks b's negative positive...
    test.candidates[-1].id = "x"  # ...and it is a's evidence passage
    assert evidence_overlap([train, test])["test"]["shared"] == 1
    assert evidence_overlap([train, test], own_labels=True)["test"]["shared"] == 0
    test.candidates[-1].labels["containment"] = 1  # under its own labels it is shared
    assert evidence_overlap([train, test], own_labels=True)["test"]["shared"] == 1


def test_grouped_split_ignores_input_order():
    insts = _questions_with_splits(120)
    fwd = dict(zip((i.id for i in insts), grouped_splits(insts), strict=True))
    rev = list(reversed(insts))
    bwd = dict(zip((i.id for i in rev), grouped_splits(rev), strict=True))
    assert fwd == bwd


@pytest.mark.data
@pytest.mark.model
@pytest.mark.parametrize("dataset", ["triviaqa", "nq", "popqa", "msmarco", "squad2", "hotpotqa"])
def test_every_dataset_has_zero_overlap_when_grouped(dataset, data_root):
    from chunksel.build import build_instances
    from chunksel.data.instances import load_meta

    built = build_instances(dataset, k=5, limit=150, root=data_root, progress=False, split="grouped")
    after = evidence_overlap(built.instances)
    assert after["val"]["shared"] == 0 and after["test"]["shared"] == 0
    meta = load_meta(built.path)["evidence_overlap"]
    assert meta["after"] == after
    assert built.config["split"] == "grouped"


def test_unknown_split_scheme_is_an_error():
    from chunksel.build import build_instances
    from chunksel.errors import ConfigError

    with pytest.raises(ConfigError, match="unknown split scheme"):
        build_instances("popqa", split="random", progress=False)
