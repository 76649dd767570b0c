"""The backend interface's pure parts: prompt/option validation, tolerant parsing,
option scoring from top log-probabilities, result serialisation (no model, no httpx)."""

from __future__ import annotations

import importlib
import math
import sys

import pytest

from chunksel.errors import ConfigError, DataError, MissingExtraError
from chunksel.llm.backends import (
    Choice,
    Generation,
    TokenStep,
    check_options,
    choice_from_text,
    get_backend,
    normalize_prompt,
    option_logprobs_from_steps,
    parse_choice,
)


def test_normalize_prompt():
    assert normalize_prompt("hi") == [{"role": "user", "content": "hi"}]
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert normalize_prompt(msgs) == msgs and normalize_prompt(msgs) is not msgs
    for bad, match in [("  ", "empty prompt"), ([], "empty prompt"),
                       ([{"role": "user", "content": " "}], "every chat message is empty"),
                       ([{"role": "robot", "content": "x"}], "role 'robot'"),
                       ([{"content": "x"}], "'role' and 'content'"),
                       ([{"role": "user", "content": 3}], "must be a string")]:
        with pytest.raises(DataError, match=match):
            normalize_prompt(bad)


def test_check_options():
    assert check_options(["Yes", "No"]) == ("Yes", "No")
    for bad in ([], "Yes", ["Yes", ""], ["1", "1"], [None]):
        with pytest.raises(DataError):
            check_options(bad)


@pytest.mark.parametrize("text, expected", [
    ("Yes.", "Yes"), ("no, it is not", "No"), ("  YES", "Yes"), ("Answer: No", "No"),
])
def test_parse_yes_no(text, expected):
    idx, reason = parse_choice(text, ["Yes", "No"])
    assert ["Yes", "No"][idx] == expected and reason is None


def test_parse_numbers_are_whole_words():
    opts = [str(i) for i in range(1, 13)]
    assert opts[parse_choice("Passage [10] answers it", opts)[0]] == "10"
    assert opts[parse_choice("The answer is 3, then 1", opts)[0]] == "3"
    # "1" never matches inside "10" or "21"
    assert parse_choice("21 or 10", ["1", "2"], default="2") == (1, "no option among ['1', '2'] in the output")


def test_parse_failure_uses_explicit_default_and_says_why():
    idx, reason = parse_choice("I cannot tell. Nothing here.", ["Yes", "No"], default="No")
    assert idx == 1 and "no option" in reason
    idx, reason = parse_choice("", ["Yes", "No"])
    assert idx == 0 and reason == "empty output"  # default None: the first option
    with pytest.raises(DataError, match="not one of the options"):
        parse_choice("Yes", ["Yes", "No"], default="Maybe")
    c = choice_from_text(("Yes", "No"), "Notably unclear", "No")  # "No" inside "Notably": no
    assert not c.parsed and c.option == "No" and c.text == "Notably unclear" and c.logprobs is None


def test_option_logprobs_from_steps():
    steps = [TokenStep("Yes", -0.2, (("Yes", -0.2), (" yes", -3.0), ("No", -1.9))),
             TokenStep(".", -0.1, ((".", -0.1),))]
    yes, no, maybe = option_logprobs_from_steps(["Yes", "No", "Maybe"], steps)
    assert yes == pytest.approx(math.log(math.exp(-0.2) + math.exp(-3.0)))  # variants add up
    assert no == pytest.approx(-1.9) and maybe == -math.inf

    # "1" then "0" generated: "10" is read along the path, "12" from the second position,
    # and "1" pays for going on into "10" / "12"
    steps = [TokenStep("1", -0.5, (("1", -0.5), ("2", -1.5))),
             TokenStep("0", -0.3, (("0", -0.3), ("2", -2.0), ("<end>", -1.8)))]
    one, two, ten, twelve = option_logprobs_from_steps(["1", "2", "10", "12"], steps)
    assert ten == pytest.approx(-0.8) and twelve == pytest.approx(-2.5) and two == pytest.approx(-1.5)
    assert one == pytest.approx(-0.5 + math.log(1 - math.exp(-0.3) - math.exp(-2.0)))


def test_results_roundtrip():
    c = Choice(option="No", index=1, options=("Yes", "No", "Maybe"), logprobs=(-2.0, -0.5, -math.inf),
               source="logprobs", tokens_in=5)
    d = c.to_dict()
    assert d["logprobs"] == [-2.0, -0.5, None]
    assert Choice.from_dict(d) == c
    p = c.probabilities()
    assert p[2] == 0.0 and sum(p) == pytest.approx(1.0) and p[1] > p[0]
    g = Generation("hi", 3, 2, 0.1, "stop", ((("hi", -0.1),), (("<end>", -0.2),)))
    assert Generation.from_dict(g.to_dict()) == g


def test_get_backend_unknown_name():
    with pytest.raises(ConfigError, match="unknown LLM backend"):
        get_backend("nope")


def test_http_backend_without_httpx_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx", None)  # import httpx -> ImportError
    monkeypatch.delitem(sys.modules, "chunksel.llm.openai_http", raising=False)
    with pytest.raises(MissingExtraError, match=r"chunksel\[llm-http\]"):
        importlib.import_module("chunksel.llm.openai_http")
    with pytest.raises(ImportError, match="llm-http"):
        get_backend("openai", base_url="http://127.0.0.1:1/v1", model="m")


def test_strip_reasoning():
    from chunksel.llm.backends import strip_reasoning

    assert strip_reasoning("<think>No. Wait.</think>\n\nYes") == "Yes"
    assert strip_reasoning("<THINK>a</THINK> [2] > [1] <think>b</think>") == "[2] > [1]"
    assert strip_reasoning("the template opened it; No</think> Yes") == "Yes"
    assert strip_reasoning("<think>never closed, No") == ""
    assert strip_reasoning("plain [1] > [2]") == "plain [1] > [2]"
    assert strip_reasoning("") == ""


def test_logprobs_read_after_the_reasoning_block():
    from chunksel.llm.backends import TokenStep, option_logprobs_from_steps, steps_after_reasoning

    no, yes = math.log(0.3), math.log(0.7)
    steps = [TokenStep("<think>", 0.0), TokenStep("No", -0.1, (("No", -0.1),)), TokenStep("</", 0.0),
             TokenStep("think>", 0.0), TokenStep("\n\n", 0.0), TokenStep("Yes", yes, (("Yes", yes), ("No", no)))]
    after = steps_after_reasoning(steps)
    assert [s.token for s in after] == ["Yes"]
    assert option_logprobs_from_steps(["Yes", "No"], after) == pytest.approx([yes, no])
    # without the cut the thinking "No" would be read as the answer
    assert option_logprobs_from_steps(["Yes", "No"], steps)[0] == -math.inf
    assert steps_after_reasoning(steps[:2]) == []  # still thinking: no answer tokens
    assert steps_after_reasoning(steps[-1:]) == steps[-1:]
