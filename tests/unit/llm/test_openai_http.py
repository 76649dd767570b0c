"""OpenAIBackend against a loopback chat-completions server backed by the real SmolLM2,
with faults injected through the same server (see llm_stub_server.py)."""

from __future__ import annotations

import math
import time

import pytest

from chunksel.errors import ConfigError, DataError

pytestmark = pytest.mark.model
httpx = pytest.importorskip("httpx")

from chunksel.llm.backends import BackendError, choice_from_text  # noqa: E402
from chunksel.llm.openai_http import OpenAIBackend, parse_retry_after  # noqa: E402

QUESTION = "Is Paris the capital of France? Answer Yes or No."
MAX_NEW = 4


def client(server, **kw):
    """A backend with fast backoff; a generous timeout unless the test sets one."""
    settings = dict(timeout=30.0, max_retries=3, backoff=0.02, max_backoff=0.1, seed=0,
                    api_key_env="CHUNKSEL_TEST_NO_SUCH_KEY")
    settings.update(kw)
    return OpenAIBackend(server.url, "smollm2", **settings)


@pytest.fixture(scope="module")
def expected(smollm2, chat_server):
    """The right answer from the local backend, and the server's memo warmed with it."""
    local = smollm2.generate([QUESTION], max_new_tokens=MAX_NEW)[0]
    with OpenAIBackend(chat_server.url, "smollm2", timeout=120.0, max_retries=0) as b:
        assert b.generate([QUESTION], MAX_NEW)[0].text == local.text
    chat_server.reset()
    return local


def test_generate_matches_local_model(server, expected):
    with client(server) as b:
        g = b.generate([QUESTION, QUESTION], MAX_NEW)
    assert [x.text for x in g] == [expected.text] * 2
    assert g[0].tokens_in == expected.tokens_in and g[0].tokens_out == expected.tokens_out
    assert g[0].finish_reason == expected.finish_reason and b.usage.calls == 2 and b.usage.retries == 0
    body = server.requests[0]["body"]
    assert body["model"] == "smollm2" and body["temperature"] == 0.0 and body["max_tokens"] == MAX_NEW
    assert body["messages"] == [{"role": "user", "content": QUESTION}] and "logprobs" not in body


def test_choose_from_server_logprobs_matches_local(server, smollm2):
    local = smollm2.choose(QUESTION, ["Yes", "No"])
    with client(server, top_logprobs=5, timeout=120.0) as b:
        c = b.choose(QUESTION, ["Yes", "No"])
    assert c.source == "logprobs" and c.option == local.option
    assert all(math.isfinite(lp) for lp in c.logprobs)
    assert c.logprobs == pytest.approx(local.logprobs, abs=1e-3)
    assert server.requests[-1]["body"]["logprobs"] is True


def test_choose_without_logprobs_parses_text(server):
    server.script("say:Yes, it is.", "say:I would rather not say.")
    with client(server, top_logprobs=0) as b:
        ok = b.choose(QUESTION, ["Yes", "No"])
        bad = b.choose(QUESTION, ["Yes", "No"], default="No")
    assert ok.option == "Yes" and ok.source == "text" and ok.parsed and ok.logprobs is None
    # an unparseable answer is kept with its raw text and reason, never dropped
    assert bad.option == "No" and not bad.parsed and "no option" in bad.reason
    assert b.usage.unparsed == 1 and len(b.parse_failures) == 1
    f = b.parse_failures[0]
    assert f.text == "I would rather not say." and f.default == "No" and f.options == ("Yes", "No")


@pytest.mark.parametrize("faults", [
    ("500", "503"), ("malformed",), ("nochoices",), ("truncated",), ("502", "truncated", "malformed"),
])
def test_retries_then_right_answer(server, expected, faults):
    server.script(*faults)
    with client(server) as b:
        g = b.generate([QUESTION], MAX_NEW)[0]
    assert g.text == expected.text
    assert [r["fault"] for r in server.requests] == [*faults, "ok"]
    assert b.usage.retries == len(faults) and b.usage.calls == 1


def test_timeout_is_retried(server, expected):
    server.script("sleep:2.5")
    t0 = time.monotonic()
    with client(server, timeout=1.0) as b:
        g = b.generate([QUESTION], MAX_NEW)[0]
    assert g.text == expected.text and b.usage.retries == 1
    assert [r["fault"] for r in server.requests] == ["sleep:2.5", "ok"]
    assert time.monotonic() - t0 >= 0.9  # waited for the client timeout


def test_retry_after_is_honoured(server, expected):
    server.script("429:1")
    with client(server, backoff=0.01) as b:
        g = b.generate([QUESTION], MAX_NEW)[0]
    assert g.text == expected.text and b.usage.retries == 1
    first, second = server.requests
    assert second["t"] - first["t"] >= 0.9  # backoff alone would wait ~0.01 s


@pytest.mark.parametrize("fault, says", [("500", "last: status 500"),
                                         ("malformed", "status 200 with a malformed body")])
def test_failing_every_retry_names_url_and_status(server, expected, fault, says):
    server.script(*[fault] * 3)
    with client(server, max_retries=2) as b, pytest.raises(BackendError) as err:
        b.generate([QUESTION], MAX_NEW)
    msg = str(err.value)
    assert b.url in msg and says in msg and "3 attempts" in msg
    assert len(server.requests) == 3 and b.usage.retries == 2 and b.usage.calls == 0


def test_client_errors_are_not_retried(server, monkeypatch):
    monkeypatch.setenv("CHUNKSEL_TEST_KEY", "sk-secret-123")
    server.script("400")
    with client(server, api_key_env="CHUNKSEL_TEST_KEY") as b, pytest.raises(BackendError) as err:
        b.generate([QUESTION], MAX_NEW)
    assert "status 400" in str(err.value) and "not retried" in str(err.value)
    assert len(server.requests) == 1
    # the key is sent as a bearer token and shown nowhere
    assert server.requests[0]["auth"] == "Bearer sk-secret-123"
    assert "sk-secret" not in str(err.value) and "sk-secret" not in repr(b)


def test_unreachable_server_fails_clearly():
    b = OpenAIBackend("http://127.0.0.1:9/v1", "m", max_retries=1, backoff=0.01, timeout=2.0)
    with b, pytest.raises(BackendError, match=r"127\.0\.0\.1:9/v1/chat/completions.*connection error"):
        b.generate(["hi"], 2)


def test_bounded_concurrency(server, expected):
    server.script(*["slow:0.3"] * 6)
    with client(server, max_concurrency=2) as b:
        out = b.generate([QUESTION] * 6, MAX_NEW)
    assert [g.text for g in out] == [expected.text] * 6
    assert server.max_overlap() == 2


def test_requests_per_second(server, expected):
    with client(server, requests_per_second=5, max_concurrency=4) as b:
        out = b.generate([QUESTION] * 4, MAX_NEW)
    assert [g.text for g in out] == [expected.text] * 4
    starts = sorted(r["t"] for r in server.requests)
    assert starts[-1] - starts[0] >= 0.55  # 4 starts at most 5 per second: >= 0.6 s apart


def test_bad_input_and_settings(server):
    with client(server) as b:
        with pytest.raises(DataError, match="empty prompt"):
            b.generate([""], 2)
        with pytest.raises(DataError, match="non-empty list of options"):
            b.choose(QUESTION, [])
        with pytest.raises(DataError, match="not one of the options"):
            b.choose(QUESTION, ["Yes", "No"], default="Maybe")
    assert server.requests == []
    with pytest.raises(ConfigError, match="model name"):
        OpenAIBackend(server.url, "")
    with pytest.raises(ConfigError, match="requests_per_second"):
        OpenAIBackend(server.url, "m", requests_per_second=0)


def test_parse_retry_after():
    assert parse_retry_after("2") == 2.0 and parse_retry_after("0.5") == 0.5
    assert parse_retry_after(None) is None and parse_retry_after("soon") is None
    when = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= parse_retry_after(when) <= 31


def test_server_refusing_logprobs_falls_back_to_text_decisions(server, smollm2):
    """A 400 naming logprobs is answered by asking again without them, once, counted."""
    server.refuse_logprobs = True
    with client(server, top_logprobs=5, timeout=120.0) as b:
        first = b.choose(QUESTION, ["Yes", "No"])
        second = b.choose(QUESTION, ["Yes", "No"])
    local_text = smollm2.generate([QUESTION], max_new_tokens=8)[0].text
    expected = choice_from_text(("Yes", "No"), local_text)
    for c in (first, second):
        assert c.source == "text" and c.logprobs is None and c.option == expected.option
    assert b.logprobs_refused and b.usage.logprob_refusals == 1 and b.usage.retries == 0
    asked = [r["body"].get("logprobs") for r in server.requests]
    assert asked == [True, None, None]  # refused, sent again without, then never asked
    assert server.requests[0]["fault"] == "ok"


def test_other_client_errors_still_fail(server):
    server.script("400")  # "injected 400": does not name logprobs
    with client(server, top_logprobs=5) as b, pytest.raises(BackendError, match="status 400"):
        b.choose(QUESTION, ["Yes", "No"])
    assert b.usage.logprob_refusals == 0 and len(server.requests) == 1


def test_reasoning_blocks_are_stripped_before_parsing(server):
    server.script("say:<think>It could be No... but Paris is the capital.</think>\n\nYes",
                  "say:<think>No, no, no</think>Yes.", "say:<think>No idea, still thinking")
    with client(server, top_logprobs=0) as b:
        c = b.choose(QUESTION, ["Yes", "No"], default="No")
        g = b.generate([QUESTION], MAX_NEW)[0]
        open_block = b.choose(QUESTION, ["Yes", "No"], default="No")
    assert c.option == "Yes" and c.parsed and c.text == "Yes"
    assert g.text == "Yes."
    # an unfinished block leaves no answer: the default, recorded as unparsed
    assert open_block.option == "No" and not open_block.parsed and open_block.reason == "empty output"


def test_max_completion_tokens_and_extra_body_reach_the_server(server, expected):
    extra = {"chat_template_kwargs": {"enable_thinking": False}, "seed": 3}
    with client(server, max_tokens_field="max_completion_tokens", extra_body=extra) as b:
        g = b.generate([QUESTION], MAX_NEW)[0]
    body = server.requests[0]["body"]
    assert body["max_completion_tokens"] == MAX_NEW and "max_tokens" not in body
    assert body["chat_template_kwargs"] == {"enable_thinking": False} and body["seed"] == 3
    assert g.text == expected.text
    with pytest.raises(ConfigError, match="max_tokens_field"):
        OpenAIBackend(server.url, "m", max_tokens_field="tokens")
    with pytest.raises(ConfigError, match="extra_body must be a JSON object"):
        OpenAIBackend(server.url, "m", extra_body=["seed"])
