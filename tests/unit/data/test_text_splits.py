from __future__ import annotations

from collections import Counter

import pytest

from chunksel.data.splits import hash_unit, split_of, split_of_text
from chunksel.data.text import (
    normalise_passage,
    normalise_passage_text,
    normalise_question,
    unquote_csv_field,
)
from chunksel.errors import ConfigError


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Who wrote Hamlet ?", "who wrote  hamlet"),
        ("  WHO wrote\tHamlet?!", "who wrote hamlet"),
        ("who won hell 's kitchen", "Who won Hell's Kitchen?"),
        ("who won britain’s next top model", "who won britain's next top model"),
        ("why do n't cats swim", "why don't cats swim"),
        ("who sang i 'm gon na run away", "who sang i'm gonna run away"),
        ("the classic kitchen\u200b brigade", "the classic kitchen brigade"),
        ("ﬁnal ﬁve", "final five"),  # NFKC folds the ligature
    ],
)
def test_normalise_question_merges_spellings(a: str, b: str) -> None:
    assert normalise_question(a) == normalise_question(b)


def test_normalise_question_keeps_distinct_questions_apart() -> None:
    assert normalise_question("who wrote hamlet") != normalise_question("who wrote macbeth")
    assert normalise_question("what is 1,000") != normalise_question("what is 1000")


@pytest.mark.parametrize("text", ["  Who's  there ? ", "(a) b, c.", "", "???", "Ça va — bien?"])
def test_normalise_question_is_idempotent(text: str) -> None:
    once = normalise_question(text)
    assert normalise_question(once) == once
    assert once == once.strip()


def test_normalise_question_strips_only_the_ends() -> None:
    assert normalise_question("¿Qué pasa, amigo?") == "qué pasa,amigo"
    assert normalise_question("(what) is x?") == "what)is x"
    assert normalise_question("U.S.A.?") == "u.s.a"


def test_normalise_passage_strips_a_repeated_title() -> None:
    with_title = normalise_passage("Easy Living", "Easy Living  Easy Living (1937) is a film.")
    without = normalise_passage("Easy Living", "Easy Living (1937) is a film.")
    assert with_title == without
    assert normalise_passage_text("Easy Living", "(1937) is a film.") == "(1937) is a film."
    assert (
        normalise_passage_text("Easy Living", "Easy\nLiving (1937) is a FILM.")
        == "(1937) is a film."
    )
    # a title that is only a prefix of the first word is not stripped
    assert normalise_passage_text("Easy", "Easygoing people.") == "easygoing people."
    assert normalise_passage("A", "x") != normalise_passage("B", "x")


def test_unquote_csv_field() -> None:
    raw = '"Who wrote ""A cauliflower is nothing but a cabbage""?"'
    assert unquote_csv_field(raw) == 'Who wrote "A cauliflower is nothing but a cabbage"?'
    assert unquote_csv_field('"Hello" he said "bye"') == '"Hello" he said "bye"'
    assert unquote_csv_field("plain") == "plain"


def test_split_of_is_deterministic_and_proportional() -> None:
    keys = [f"question number {i}" for i in range(20000)]
    first = [split_of(k) for k in keys]
    assert first == [split_of(k) for k in keys]
    counts = Counter(first)
    assert abs(counts["train"] / 20000 - 0.7) < 0.02
    assert abs(counts["val"] / 20000 - 0.1) < 0.01
    assert abs(counts["test"] / 20000 - 0.2) < 0.015
    # the split of a question does not depend on how it is spelled
    assert split_of_text("Who wrote Hamlet ?") == split_of_text("who wrote hamlet")
    assert 0.0 <= hash_unit("x") < 1.0


def test_split_of_custom_ratios_and_errors() -> None:
    assert {split_of(f"q{i}", (1.0, 0.0, 0.0)) for i in range(100)} == {"train"}
    assert {split_of(f"q{i}", (0.0, 0.0, 1.0)) for i in range(100)} == {"test"}
    with pytest.raises(ConfigError, match="split ratios"):
        split_of("q", (0.5, 0.5, 0.5))
