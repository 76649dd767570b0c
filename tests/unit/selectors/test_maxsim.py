"""MaxSim over the real all-MiniLM-L6-v2 token vectors (no training)."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.retrieval.tokens import BYTES_PER_TOKEN, maxsim, token_vectors
from chunksel.selectors import load_selector, make_selector
from chunksel.types import Candidate, Instance, Question

pytestmark = pytest.mark.model


def _instance(texts, titles=None):
    titles = titles or [""] * len(texts)
    return Instance(Question("q1", "Who wrote the play Hamlet?"),
                    [Candidate(f"c{j}", t, title=ti, rank=j) for j, (t, ti) in enumerate(zip(texts, titles, strict=True))])


def test_maxsim_is_the_mean_of_each_question_tokens_best_cosine():
    q = np.array([[1.0, 0.0], [0.0, 1.0]], dtype=np.float16)
    c = np.array([[0.6, 0.8], [1.0, 0.0]], dtype=np.float16)
    assert maxsim(q, c) == pytest.approx((1.0 + 0.8) / 2, abs=1e-3)
    with pytest.raises(DataError, match="one dim"):
        maxsim(q, np.ones((3, 4), dtype=np.float16))


def test_token_vectors_drop_special_tokens_and_are_unit_float16():
    from chunksel.retrieval.encoder import Encoder

    enc = Encoder()
    vecs = token_vectors(enc, ["who wrote hamlet?", "The Globe Theatre"])
    assert [v.shape for v in vecs] == [(4, 384), (3, 384)]  # who wrote hamlet ? / the globe theatre
    assert vecs[0].dtype == np.float16 and vecs[0].nbytes == 4 * BYTES_PER_TOKEN
    assert np.allclose(np.linalg.norm(vecs[0].astype(np.float32), axis=1), 1.0, atol=1e-2)
    with pytest.raises(DataError, match="text #1 is empty"):
        token_vectors(enc, ["fine", "  "])


def test_the_chunk_that_answers_word_for_word_ranks_first(tmp_path):
    sel = make_selector("maxsim")
    inst = _instance(["The Globe Theatre was built in 1599.",
                      "Hamlet is a tragedy written by William Shakespeare.",
                      "Denmark is a Nordic country."])
    scores = sel.score([inst])
    assert scores.shape == (1, 3) and int(np.argmax(scores[0])) == 1
    sel.save(tmp_path / "m")
    assert np.array_equal(load_selector(tmp_path / "m").score([inst]), scores)
    # titles are read with the text unless title=False
    titled = _instance(["It was written around 1600."], ["Hamlet"])
    assert make_selector("maxsim").score([titled])[0, 0] != make_selector("maxsim", title=False).score([titled])[0, 0]
