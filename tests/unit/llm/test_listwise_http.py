"""rankgpt and utility over the OpenAI-compatible HTTP backend, against the loopback server
backed by the real SmolLM2 (llm_stub_server.py): one real window each, and scripted
malformed outputs whose repairs are counted."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.model
httpx = pytest.importorskip("httpx")

from chunksel.llm.listwise import ListwiseLLM, rank_prompt, utility_prompt  # noqa: E402
from chunksel.llm.openai_http import OpenAIBackend  # noqa: E402

QUESTION = "What is the capital of France?"
PASSAGES = ["Paris is the capital of France.", "Berlin is a city in Germany.", "Cats sleep a lot."]
IDS = ["p0", "p1", "p2"]


def client(server) -> OpenAIBackend:
    return OpenAIBackend(server.url, "smollm2", timeout=120.0, max_retries=1, backoff=0.02,
                         api_key_env="CHUNKSEL_TEST_NO_SUCH_KEY", top_logprobs=0)


def test_real_windows_through_the_server(server, tmp_path):
    with client(server) as backend:
        llm = ListwiseLLM(backend, max_new_tokens=24, cache=tmp_path)
        assert llm.read == "text"  # an HTTP server: the paper's text read
        rank = llm.rank("http:q1", QUESTION, PASSAGES, IDS)
        util = llm.select("http:q1", QUESTION, PASSAGES, IDS)
        llm.close()
    assert sorted(rank.order) == [0, 1, 2] and rank.calls == 1 and rank.prompt_tokens > 0
    assert 0 <= util.k <= 3 and len(set(util.order)) == util.k and util.calls == 1
    # whatever SmolLM2 wrote, every repair it needed is counted
    if util.k == 0 and util.repairs.unparsed:
        assert util.empty
    bodies = [r["body"] for r in server.requests]
    assert bodies[0]["messages"] == rank_prompt(QUESTION, PASSAGES) and bodies[0]["max_tokens"] == 24
    assert bodies[1]["messages"] == utility_prompt(QUESTION, PASSAGES) and bodies[1]["temperature"] == 0.0


def test_malformed_server_outputs_are_repaired_and_counted(server, tmp_path):
    server.script("say:[2] > [2] > [7]", "say:Answer: Paris\nMy selection: [[1],[9],[1]]", "say:No idea.")
    with client(server) as backend:
        llm = ListwiseLLM(backend, cache=tmp_path)
        rank = llm.rank("http:q2", QUESTION, PASSAGES, IDS)
        util = llm.select("http:q2", QUESTION, PASSAGES, IDS)
        none = llm.select("http:q3", QUESTION, PASSAGES, IDS)
        llm.close()
    assert rank.order == [1, 0, 2]
    assert (rank.repairs.duplicates, rank.repairs.out_of_range, rank.repairs.missing) == (1, 1, 2)
    assert util.order == [0] and util.answers == ["Paris"] and util.k == 1
    assert (util.repairs.out_of_range, util.repairs.duplicates) == (1, 1)
    # no "My selection" at all: not an empty selection but a failure, so retrieval order
    assert (none.repairs.unparsed, none.repairs.no_answer) == (1, 1)
    assert none.order == [0, 1, 2] and not none.empty and "no readable selection" in none.fallback
    assert rank.fallback is None and util.fallback is None


def test_the_selector_runs_on_the_openai_backend(server):
    from chunksel.selectors import make_selector
    from chunksel.types import Candidate, Instance, Question

    server.script("say:Answer: Paris\nMy selection: [[1]]")
    sel = make_selector("utility", backend="openai", base_url=server.url, model="smollm2", progress=False)
    sel.use_backend(client(server))
    inst = Instance(Question(id="http:q4", text=QUESTION),
                    [Candidate(id=i, text=t, rank=j) for j, (i, t) in enumerate(zip(IDS, PASSAGES, strict=True))])
    got = sel.select_dynamic([inst])[0]
    assert got.indices == [0] and got.candidate_ids == ["p0"]
