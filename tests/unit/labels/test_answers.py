"""Answer metrics: SQuAD normalisation, exact match, relaxed F1, overlap, BERTScore."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.labels.answers import (
    BertScoreF1,
    answer_overlap,
    exact_match,
    normalize_answer,
    relaxed_f1,
    relaxed_tokens,
)


def test_normalize_answer_squad_rules() -> None:
    assert normalize_answer("  The Eiffel-Tower, in  PARIS! ") == "eiffeltower in paris"
    assert normalize_answer("a an the") == ""


def test_relaxed_tokens_drop_stopwords_but_never_everything() -> None:
    assert relaxed_tokens("It was in the city of Paris") == ["city", "paris"]
    assert relaxed_tokens("The Who") == ["who"]  # all stopwords: the SQuAD tokens stay


@pytest.mark.parametrize(
    ("pred", "answers", "want"),
    [
        ("Barack Obama", ["Barack Obama"], 1.0),
        ("It was Barack Obama.", ["Obama"], 2 / 3),  # pred {barack, obama}, ref {obama}
        ("the president Obama", ["Barack Obama", "Obama"], 2 / 3),  # max over aliases
        ("in 1999", ["1999"], 1.0),  # "in" is a stopword
        ("Paris", ["London"], 0.0),
        ("", ["London"], 0.0),
        ("anything", [], 0.0),
        ("new york city new york", ["New York"], 2 * (2 / 5) * 1.0 / (2 / 5 + 1.0)),  # multiset counts
    ],
)
def test_relaxed_f1_fixed_strings(pred: str, answers: list[str], want: float) -> None:
    assert relaxed_f1(pred, answers) == pytest.approx(want)


def test_exact_match_and_overlap() -> None:
    assert exact_match("The Beatles.", ["beatles"]) == 1.0
    assert exact_match("Beatles band", ["beatles"]) == 0.0
    assert answer_overlap("George Washington was the first president", ["Washington", "G. W."]) == 1.0
    assert answer_overlap("Barack lives here", ["Barack Obama"]) == 0.5
    assert answer_overlap("nothing", ["Obama"]) == 0.0


def test_bertscore_empty_inputs_score_zero_without_loading() -> None:
    pytest.importorskip("bert_score")
    scorer = BertScoreF1()
    out = scorer(["", "  ", "x"], [["a"], ["b"], [""]])
    np.testing.assert_array_equal(out, np.zeros(3))
    assert scorer._scorer is None  # nothing to score: the model was never loaded


@pytest.mark.model
def test_bertscore_on_local_minilm() -> None:
    pytest.importorskip("bert_score")
    scorer = BertScoreF1()
    f = scorer(["Barack Obama", "Paris", ""], [["Obama", "Barack Obama"], ["London"], ["x"]])
    assert f[0] == pytest.approx(1.0, abs=1e-5)  # max over the references: the exact one
    assert 0.0 < f[1] < 0.9 and f[2] == 0.0
    assert scorer.model_id == "all-MiniLM-L6-v2-L5"
