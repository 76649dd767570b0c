"""The judge, ``rankgpt`` and ``utility`` through ``--llm URL`` against third-party
OpenAI-compatible servers serving SmolLM2-135M-Instruct, checked against the local
backend on the same prompts: decisions from log-probabilities where the server returns
them, else the greedy text and what is read from it. Also probes streaming, logprobs and
concurrent requests; with ``CHUNKSEL_SERVERS_REPORT=<file>`` the observations are
written there as JSON (docs/llm-servers.md is made from them)."""

from __future__ import annotations

import json
import math
import os
import time

import pytest

from chunksel.types import Candidate, Instance, Question

QUESTION = "What is the capital of Australia?"
CHUNKS = ["Canberra is the capital city of Australia.", "Sydney is the largest city in Australia.",
          "The Danube is the second-longest river in Europe.", "Tokyo is the capital of Japan.",
          "Australia's parliament sits in Canberra."]
REPORT: dict[str, dict] = {}


def _note(server, key, value):
    REPORT.setdefault(server.name, {})[key] = value
    path = os.environ.get("CHUNKSEL_SERVERS_REPORT")
    if path:
        with open(path, "w", encoding="utf-8") as fh:
            json.dump(REPORT, fh, indent=1)


def _client(server, **kw):
    from chunksel.llm.openai_http import OpenAIBackend

    return OpenAIBackend(server.url, server.model, api_key_env="", timeout=600.0, max_retries=1, **kw)


def _instances():
    cands = [Candidate(id=f"c{j}", text=t, rank=j) for j, t in enumerate(CHUNKS)]
    return [Instance(Question(id="srv:q0", text=QUESTION), cands)]


def test_judge_decisions_match_the_local_backend(server, smollm2_local, tmp_path):
    from chunksel.labels.judge import JUDGE_OPTIONS, judge_prompt, label_instances
    from chunksel.llm.backends import choice_from_text

    local = smollm2_local[0]
    with _client(server, top_logprobs=5, max_concurrency=2) as backend:
        res = label_instances(_instances(), backend, cache=tmp_path, progress=False)
        refusals = backend.usage.logprob_refusals
    prompts = [judge_prompt(QUESTION, c) for c in CHUNKS]
    got = [r.label for r in res.rows]
    sources = {r.p_yes is not None for r in res.rows}
    if sources == {True}:  # the server returned log-probabilities: compare them
        ref = local.choose_many(prompts, list(JUDGE_OPTIONS))
        assert got == [int(c.option == "Yes") for c in ref]
        # llama.cpp's quantised arithmetic moves P(yes) by a few points (0.043 measured)
        tol = 0.02 if server.same_numerics else 0.06
        for row, c in zip(res.rows, ref, strict=True):
            assert row.p_yes == pytest.approx(c.probabilities()[0], abs=tol)
        _note(server, "judge", f"logprobs; {len(got)}/{len(got)} decisions as local")
    else:  # text decisions: the same greedy text, read the same way
        gens = local.generate(prompts, max_new_tokens=backend.choose_max_tokens)
        ref = [choice_from_text(tuple(JUDGE_OPTIONS), g.text, "No") for g in gens]
        assert got == [int(c.option == "Yes") for c in ref]
        _note(server, "judge", f"text (logprobs not returned; {refusals} refusals); "
                               f"{len(got)}/{len(got)} decisions as local")


@pytest.mark.parametrize("selector", ["rankgpt", "utility"])
def test_llm_selectors_through_llm_url_match_local(server, smollm2_local, selector, capsys, tmp_path):
    from chunksel.cli import main
    from chunksel.llm.listwise import ListwiseLLM

    argv = ["select", "--selector", selector, "--llm", server.url, "--llm-model", server.model,
            "--llm-timeout", "600", "--llm-concurrency", "2", "--question", QUESTION, "--top", "5"]
    for c in CHUNKS:
        argv += ["--chunk", c]
    t0 = time.perf_counter()
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    seconds = time.perf_counter() - t0
    llm = ListwiseLLM(smollm2_local[0], read="text", cache=tmp_path)
    ids = [f"chunk{j}" for j in range(len(CHUNKS))]
    ref = (llm.rank if selector == "rankgpt" else llm.select)("cli", QUESTION, CHUNKS, ids)
    assert out["read"] == "text" and out["fallback"] == ref.fallback
    if selector == "rankgpt":
        assert out["order"] == ref.order
    else:
        assert out["indices"] == ref.order
        if server.same_numerics:  # free text is only the same where the arithmetic is
            assert out["pseudo_answers"] == ref.answers
        else:
            assert len(out["pseudo_answers"]) == len(ref.answers) and all(a.strip() for a in out["pseudo_answers"])
    _note(server, selector, f"{out['calls']} call(s), {seconds:.1f}s, same {'order' if selector == 'rankgpt' else 'selection'} "
                            f"as local{'; fell back: ' + out['fallback'] if out['fallback'] else ''}")


def test_server_features(server, smollm2_local):
    import httpx

    body = {"model": server.model, "messages": [{"role": "user", "content": "Is Paris in France? Yes or No."}],
            "max_tokens": 4, "temperature": 0}
    r = httpx.post(server.url + "/chat/completions", json={**body, "logprobs": True, "top_logprobs": 5}, timeout=600)
    content = (r.json().get("choices") or [{}])[0].get("logprobs") if r.status_code == 200 else None
    logprobs = bool(content and content.get("content"))
    _note(server, "logprobs", "returned" if logprobs else f"not returned (status {r.status_code})")
    if logprobs:
        step = content["content"][0]
        assert math.isfinite(step["logprob"]) and step.get("top_logprobs")
    chunks = []
    with httpx.stream("POST", server.url + "/chat/completions", json={**body, "stream": True}, timeout=600) as s:
        assert s.status_code == 200
        chunks = [line for line in s.iter_lines() if line.startswith("data:")]
    _note(server, "streaming", f"{len(chunks)} SSE events")
    assert len(chunks) >= 2
    prompts = [f"Name a colour. ({i})" for i in range(4)]
    with _client(server, max_concurrency=1) as one:
        t0 = time.perf_counter()
        seq = one.generate(prompts, 8)
        t_seq = time.perf_counter() - t0
    with _client(server, max_concurrency=4) as four:
        t0 = time.perf_counter()
        par = four.generate(prompts, 8)
        t_par = time.perf_counter() - t0
    assert [g.text for g in par] == [g.text for g in seq]
    _note(server, "concurrent_requests", f"4 requests: {t_seq:.1f}s one at a time, {t_par:.1f}s four at once")
