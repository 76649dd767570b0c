from __future__ import annotations

import unicodedata
import warnings

import pytest

from chunksel.labels.containment import ContainmentLabeler, SimpleTokenizer, has_answer


def test_simple_tokenizer_splits_alnum_runs_and_symbols() -> None:
    tok = SimpleTokenizer()
    assert tok.tokenize("The U.S. won 3-1, didn't they?") == [
        "the", "u", ".", "s", ".", "won", "3", "-", "1", ",", "didn", "'", "t", "they", "?",
    ]  # fmt: skip
    assert tok.tokenize("Ünïcode", uncased=False) == ["Ünïcode"]
    # combining marks stay inside the token (\p{M} is part of the alphanumeric class)
    nfd = unicodedata.normalize("NFD", "café au lait")
    assert tok.tokenize(nfd) == [unicodedata.normalize("NFD", "café"), "au", "lait"]


@pytest.mark.parametrize(
    ("answers", "text", "expected"),
    [
        (["Paris"], "The capital is PARIS.", True),  # case
        (["art"], "Let us party tonight.", False),  # token boundary, not substring
        (["May 18 , 2018"], "released on May 18, 2018 in cinemas", True),  # spacing of punctuation
        (["U.S."], "the U.S. army", True),
        (["U.S."], "the US army", False),
        (
            ["Wilhelm Conrad Röntgen"],
            "awarded to Wilhelm Conrad Ro\u0308ntgen of Germany",
            True,
        ),  # NFC vs NFD
        (["Montreal"], "born in Montréal, Quebec", False),  # accents matter, as in DPR
        (["New York", "NYC"], "a flight to nyc", True),  # any alias
        (["New York City"], "New York is big; the city is too", False),  # contiguous only
        (["", "   "], "anything", False),  # empty answers never match
        (["Scorpio"], "", False),
    ],
)
def test_has_answer_string(answers: list[str], text: str, expected: bool) -> None:
    assert has_answer(answers, text) is expected
    assert ContainmentLabeler(answers)(text) is expected


def test_has_answer_regex() -> None:
    assert has_answer([r"\bpari?s\b"], "Welcome to PARIS", answer_type="regex")
    assert not has_answer([r"^london$"], "London calling", answer_type="regex")
    assert has_answer([r"^london$"], "intro\nLondon\noutro", answer_type="regex")  # MULTILINE
    assert ContainmentLabeler([r"19[0-9]{2}"], "regex")("in 1987")


def test_bad_regex_is_no_match_with_one_warning() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not has_answer(["(unclosed"], "(unclosed", answer_type="regex")
        assert not has_answer(["(unclosed"], "again", answer_type="regex")
    assert len([w for w in caught if "invalid regex answer" in str(w.message)]) == 1


def test_unknown_answer_type() -> None:
    from chunksel.errors import ConfigError

    with pytest.raises(ConfigError, match="answer_type"):
        has_answer(["x"], "x", answer_type="fuzzy")
