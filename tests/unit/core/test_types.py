from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.data.instances import load_instances, save_instances
from chunksel.errors import DataError
from chunksel.types import (
    Candidate,
    Instance,
    Question,
    candidate_mask,
    label_matrix,
    read_jsonl,
    write_jsonl,
)


def _inst(labels, spec="containment|gold"):
    cands = [Candidate(id=f"p{i}", text=f"t{i}", rank=i, labels=lab) for i, lab in enumerate(labels)]
    return Instance(Question(id="d:s:1", text="q?", answers=["a"]), cands, "train", spec)


def test_label_spec_is_an_or_over_sources():
    inst = _inst([{"containment": 1}, {"gold": 1}, {"containment": 0, "gold": 0}, {}])
    assert inst.labels().tolist() == [1, 1, 0, 0]
    assert inst.labels("gold").tolist() == [0, 1, 0, 0]
    assert inst.answerable() and inst.contested()
    assert not _inst([{"containment": 1}]).contested()
    assert not _inst([{"gold": 0}]).answerable()


def test_graded_labels_count_as_positive_from_one():
    inst = _inst([{"qrels": 0}, {"qrels": 2}], spec="qrels")
    assert inst.labels().tolist() == [0, 1]


def test_masks_and_label_matrix_pad_short_instances():
    a = _inst([{"containment": 1}, {}, {}])
    b = _inst([{}, {"containment": 1}])
    assert candidate_mask([a, b]).tolist() == [[True, True, True], [True, True, False]]
    assert label_matrix([a, b]).tolist() == [[1, 0, 0], [0, 1, 0]]
    assert label_matrix([a, b], k=2).shape == (2, 2)


def test_jsonl_round_trip(tmp_path):
    inst = _inst([{"containment": 1, "gold": 0}, {}])
    inst.question.meta["qrels"] = {"p1": 3}
    write_jsonl(tmp_path / "x.jsonl", [inst])
    back = Instance.from_dict(next(read_jsonl(tmp_path / "x.jsonl")))
    assert back == inst


def test_malformed_jsonl_names_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"a": 1}) + "\n{not json\n")
    with pytest.raises(DataError, match=r"bad.jsonl:2: malformed JSON"):
        list(read_jsonl(path))


def test_instances_store_keeps_embeddings(tmp_path, toy_instances):
    save_instances(tmp_path / "inst", toy_instances, meta={"k": 5})
    back = load_instances(tmp_path / "inst")
    assert [i.to_dict() for i in back] == [i.to_dict() for i in toy_instances]
    for a, b in zip(toy_instances, back):
        for ca, cb in zip(a.candidates, b.candidates):
            np.testing.assert_array_equal(ca.embedding, cb.embedding)
    assert {i.split for i in load_instances(tmp_path / "inst", split="val")} == {"val"}


def test_missing_instances_say_how_to_build(tmp_path):
    with pytest.raises(DataError, match="chunksel build"):
        load_instances(tmp_path / "nothing")
