"""LocalBackend on the real SmolLM2-135M-Instruct (loaded once per session)."""

from __future__ import annotations

import math

import pytest

from chunksel.errors import ConfigError, DataError

pytestmark = pytest.mark.model

QUESTION = "Is Paris the capital of France? Answer Yes or No."
PASSAGES = ("Which passage says where the Eiffel Tower is?\n[1] Bananas are yellow.\n"
            "[2] The Eiffel Tower is in Paris.\nAnswer with the passage number.")


def test_generate_batch_matches_single_prompts(smollm2):
    prompts = [QUESTION, [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]]
    before = smollm2.usage.calls
    batch = smollm2.generate(prompts, max_new_tokens=4)
    assert len(batch) == 2 and smollm2.usage.calls == before + 2
    for p, g in zip(prompts, batch):
        assert g.text.strip() and 1 <= g.tokens_out <= 4 and g.seconds > 0
        assert g.tokens_in == len(smollm2.encode(p)) and g.finish_reason in ("stop", "length")
        # left padding: the shorter prompt decodes greedily exactly as on its own
        assert smollm2.generate([p], max_new_tokens=4)[0].text == g.text


def test_generate_top_logprobs(smollm2):
    g = smollm2.generate([QUESTION], max_new_tokens=2, top_logprobs=3)[0]
    assert len(g.top_logprobs) == g.tokens_out
    for pos in g.top_logprobs:
        lps = [lp for _, lp in pos]
        assert len(pos) == 3 and lps == sorted(lps, reverse=True) and all(lp <= 0 for lp in lps)
    assert g.text.startswith(g.top_logprobs[0][0][0].strip())  # greedy: the top token


def test_choose_yes_no(smollm2):
    c = smollm2.choose(QUESTION, ["Yes", "No"])
    assert c.option in ("Yes", "No") and c.options[c.index] == c.option and c.source == "logprobs"
    assert len(c.logprobs) == 2 and all(math.isfinite(lp) and lp < 0 for lp in c.logprobs)
    assert c.logprobs[c.index] == max(c.logprobs) and c.parsed and c.tokens_in > 0
    # the one-pass fast path (single-token options) equals scoring prompt + option
    slow = smollm2.option_logprobs([QUESTION], ["Yes", "No"], single_token_fast_path=False)[0]
    assert slow == pytest.approx(list(c.logprobs), abs=1e-4)


def test_choose_multi_token_options(smollm2):
    opts = ["1", "2", "10"]  # "10" is two tokens, "1" + "0"
    assert [len(t) for t in smollm2.option_ids(opts)] == [1, 1, 2]
    c = smollm2.choose(PASSAGES, opts)
    assert c.option in opts and all(math.isfinite(lp) for lp in c.logprobs)
    # "1" pays for going on into "10": below the plain first-token log-probability
    first = smollm2.option_logprobs([PASSAGES], ["1", "2"])[0]
    assert c.logprobs[0] < first[0] and c.logprobs[1] == pytest.approx(first[1], abs=1e-4)
    many = smollm2.choose_many([PASSAGES, QUESTION], opts)
    assert many[0].logprobs == pytest.approx(c.logprobs, abs=1e-4)


def test_bad_input(smollm2):
    with pytest.raises(DataError, match="empty prompt"):
        smollm2.generate(["  "], max_new_tokens=2)
    with pytest.raises(DataError, match="non-empty list of prompts"):
        smollm2.generate([], max_new_tokens=2)
    with pytest.raises(DataError, match="max_new_tokens"):
        smollm2.generate([QUESTION], max_new_tokens=0)
    with pytest.raises(DataError, match="non-empty list of options"):
        smollm2.choose(QUESTION, [])
    with pytest.raises(DataError, match="distinct"):
        smollm2.choose(QUESTION, ["Yes", "Yes"])
    with pytest.raises(DataError, match="not one of the options"):
        smollm2.choose(QUESTION, ["Yes", "No"], default="Maybe")


def test_constructor_checks():
    from chunksel.llm.local import LocalBackend

    with pytest.raises(ConfigError, match="tokenizer"):
        LocalBackend(model=object())
    with pytest.raises(ConfigError, match="batch_size"):
        LocalBackend(batch_size=0)
    with pytest.raises(ConfigError, match="not a local path"):
        _ = LocalBackend("no/such/model").model_id  # loading is lazy: it fails on first use
