"""LLM selectors on 100-candidate lists (window arithmetic against a hand computation),
failing open to retrieval order, questions sent concurrently, and the command line's
backend options (chunksel.llm.cli_options)."""

from __future__ import annotations

import argparse
import threading
import time

import pytest
from tests.doubles import ScriptedBackend

from chunksel.errors import ConfigError
from chunksel.llm.backends import BackendError, Generation, normalize_prompt
from chunksel.llm.listwise import ListwiseLLM, rank_windows


def _texts(n):
    return [f"passage number {i} about tag{i:03d}" for i in range(n)], [f"p{i}" for i in range(n)]


def _desc(hi, lo):
    return list(range(hi, lo - 1, -1))


# ------------------------------------------------------------------ 100 candidates
def test_rankgpt_windows_slide_over_100_candidates(tmp_path):
    assert rank_windows(100) == [(80, 100), (70, 90), (60, 80), (50, 70), (40, 60), (30, 50),
                                 (20, 40), (10, 30), (0, 20)]
    texts, ids = _texts(100)
    run = ListwiseLLM(ScriptedBackend(), cache=tmp_path, fsync=False).rank("q", "which tag?", texts, ids)
    # By hand: the script reverses every window. Window (80,100) puts 99..80 at 80..99;
    # (70,90) sees 70..79 then 99..90 and puts 90..99 at 70..79, 79..70 at 80..89; each
    # next window carries the block 90..99 ten places forward, reversing it, and leaves
    # the ten passages it overtook reversed behind it; (0,20) ends with 99..90 first.
    expected = (_desc(99, 90) + _desc(9, 0) + _desc(19, 10) + _desc(29, 20) + _desc(39, 30)
                + _desc(49, 40) + _desc(59, 50) + _desc(69, 60) + _desc(79, 70) + _desc(89, 80))
    assert run.order == expected
    assert run.calls == 9 and len(run.windows) == 9 and run.fallback is None
    assert run.windows[0] == list(range(80, 100))
    assert run.windows[1] == list(range(70, 80)) + _desc(99, 90)  # what the 2nd call saw
    assert run.windows[-1] == list(range(10)) + list(range(90, 100))


def test_utility_windows_slide_over_100_candidates(tmp_path):
    texts, ids = _texts(100)
    run = ListwiseLLM(ScriptedBackend(), cache=tmp_path, read="text", fsync=False).select(
        "q", "which tag?", texts, ids)
    # By hand: the script selects each window's first passage. Window 1 is 0..19 and
    # selects 0; every later window carries the queue [0] and takes 19 unseen passages
    # (20..38, 39..57, 58..76, 77..95), the last one the 4 left (96..99): 6 calls.
    assert run.windows == [list(range(20)), [0, *range(20, 39)], [0, *range(39, 58)],
                           [0, *range(58, 77)], [0, *range(77, 96)], [0, *range(96, 100)]]
    assert run.order == [0] and run.k == 1 and run.calls == 6 and run.fallback is None


# ------------------------------------------------------------------ fail open
class Flaky(ScriptedBackend):
    """Fails for questions naming 'fail'; writes no ranking for questions naming 'mute'."""

    def generate(self, prompts, max_new_tokens=64, *, temperature=0.0, top_logprobs=0):
        text = "\n".join(m["content"] for m in normalize_prompt(prompts[0]))
        if "fail" in text:
            raise BackendError("POST http://127.0.0.1:9/v1/chat/completions failed after 6 attempts")
        if "mute" in text:
            return [Generation("I cannot help with ranking these passages.", 10, 8, 0.0, "stop")]
        return super().generate(prompts, max_new_tokens, temperature=temperature, top_logprobs=top_logprobs)


@pytest.mark.parametrize("question, why", [("please fail", "backend failed"), ("mute one", "no readable")])
def test_rank_and_select_fail_open_to_retrieval_order(tmp_path, question, why):
    texts, ids = _texts(30)
    llm = ListwiseLLM(Flaky(), cache=tmp_path, read="text", fsync=False)
    ranked, selected = llm.rank("q", question, texts, ids), llm.select("q", question, texts, ids)
    for run in (ranked, selected):
        assert run.order == list(range(30)) and run.k == 30 and not run.empty
        assert run.fallback is not None and why in run.fallback
    fine = llm.rank("q2", "which tag?", texts, ids)
    assert fine.fallback is None and fine.order != list(range(30))


def test_selectors_flag_failed_questions_and_keep_the_others(toy_instances):
    """A real HTTP backend with nothing listening: every question fails open, flagged."""
    pytest.importorskip("httpx")
    from chunksel.selectors import make_selector

    batch = toy_instances[:3]
    for name in ("rankgpt", "utility"):
        sel = make_selector(name, backend="openai", base_url="http://127.0.0.1:9/v1", model="m", progress=False,
                            backend_options={"max_retries": 0, "timeout": 2.0, "api_key_env": ""})
        picked = sel.select(batch, k=3)
        assert [p.indices for p in picked] == [[0, 1, 2]] * 3  # retrieval order, no ties
        flags = sel.fallbacks()
        assert sorted(flags) == sorted(i.id for i in batch)
        assert all("connection error" in why for why in flags.values())
    with pytest.raises(ConfigError, match="backend_options"):
        make_selector("rankgpt", backend="local", backend_options={"timeout": 3}).llm()


def test_utility_teacher_marks_fallback_rows(tmp_path, toy_instances):
    from chunksel.labels.utility import label_instances

    insts = toy_instances[:2]
    insts[1].question.text = "please fail " + insts[1].question.text
    res = label_instances(insts, Flaky(), read="text", cache=tmp_path, progress=False)
    assert res.summary()["fallbacks"] == 1
    failed = [r for r in res.rows if r.question_id == insts[1].id]
    assert failed and all(not r.parsed and r.label == 0 and "backend failed" in r.reason for r in failed)
    assert all(r.parsed for r in res.rows if r.question_id == insts[0].id)


# ------------------------------------------------------------------ concurrency
class Slow(ScriptedBackend):
    def __init__(self, max_concurrency):
        super().__init__()
        self.max_concurrency = max_concurrency
        self.now = self.most = 0
        self.lock = threading.Lock()

    def generate(self, prompts, max_new_tokens=64, *, temperature=0.0, top_logprobs=0):
        with self.lock:
            self.now += 1
            self.most = max(self.most, self.now)
        time.sleep(0.05)
        try:
            return super().generate(prompts, max_new_tokens, temperature=temperature, top_logprobs=top_logprobs)
        finally:
            with self.lock:
                self.now -= 1


@pytest.mark.parametrize("limit", [1, 3])
def test_questions_run_concurrently_up_to_the_backend_limit(tmp_path, limit):
    texts, ids = _texts(25)
    backend = Slow(limit)
    llm = ListwiseLLM(backend, cache=tmp_path, fsync=False)
    qs = [(f"q{i}", f"which tag {i}?", texts, ids, None) for i in range(6)]
    done = []
    runs = llm.run_many("rankgpt", qs, progress=done.append)
    assert [r.question_id for r in runs] == [q[0] for q in qs] and len(done) == 6
    assert backend.most == limit and backend.usage.calls == 12  # 2 windows each
    with pytest.raises(ConfigError, match="method"):
        llm.run_many("pointwise", qs)


# ------------------------------------------------------------------ command line
def _parse(*argv):
    from chunksel.llm.cli_options import add_llm_arguments

    p = argparse.ArgumentParser()
    add_llm_arguments(p)
    return p.parse_args(list(argv))


def test_cli_options_build_the_http_backend():
    pytest.importorskip("httpx")
    from chunksel.llm.cli_options import backend_from_args, backend_settings

    args = _parse("--llm-concurrency", "8", "--llm-timeout", "12.5", "--llm-extra",
                  '{"chat_template_kwargs": {"enable_thinking": false}}', "--llm-token-field", "max_completion_tokens")
    b = backend_from_args(args, "http://127.0.0.1:8000/v1", "qwen3")
    assert (b.max_concurrency, b.timeout, b.max_tokens_field) == (8, 12.5, "max_completion_tokens")
    assert b.extra_body == {"chat_template_kwargs": {"enable_thinking": False}}
    b.close()
    assert backend_settings(_parse(), "local", None) == {"backend": "local", "model": None}


@pytest.mark.parametrize("argv, target, model, match", [
    (["--llm-extra", "{seed: 1}"], "http://h/v1", "m", "not valid JSON"),
    (["--llm-extra", "[1]"], "http://h/v1", "m", "must be a JSON object"),
    (["--llm-concurrency", "0"], "http://h/v1", "m", "--llm-concurrency must be >= 1"),
    (["--llm-timeout", "0"], "http://h/v1", "m", "--llm-timeout must be > 0"),
    (["--llm-retries", "-1"], "http://h/v1", "m", "--llm-retries must be >= 0"),
    (["--llm-timeout", "5"], "local", None, "--llm-timeout set"),
    ([], "http://h/v1", None, "needs --llm-model"),
    ([], "ftp://h", "m", "must be 'local' or an http"),
])
def test_cli_options_refuse_bad_values(argv, target, model, match):
    from chunksel.llm.cli_options import backend_settings

    with pytest.raises(ConfigError, match=match):
        backend_settings(_parse(*argv), target, model)


def test_cli_select_fails_open_when_the_server_is_down(capsys):
    pytest.importorskip("httpx")
    import json

    from chunksel.cli import main

    argv = ["select", "--selector", "rankgpt", "--llm", "http://127.0.0.1:9/v1", "--llm-model", "m",
            "--llm-retries", "0", "--llm-timeout", "2", "--llm-concurrency", "2", "--llm-extra", '{"seed": 0}',
            "--question", "capital of France?", "--chunk", "Berlin is in Germany.", "--chunk", "Paris is in France.",
            "--top", "2"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["indices"] == [0, 1] and "connection error" in out["fallback"]
    assert main(["select", "--selector", "rankgpt", "--llm", "local", "--llm-extra", "{}",
                 "--question", "q?", "--chunk", "a"]) == 2
    assert "--llm-extra set(s) an HTTP server's client" in capsys.readouterr().err
