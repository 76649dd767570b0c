"""The LLM judge's semantic labels: the paper's prompt verbatim, labelling through any
backend (a fake, the real SmolLM2, the loopback HTTP server), recorded unparsed outputs,
resumption after SIGKILL, and the sidecar labels that load_instances / --label read."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from pathlib import Path

import pytest
from llm_judge_worker import KeywordJudge, toy_instances

from chunksel.build import Built, _with_label
from chunksel.data.instances import load_instances, save_instances
from chunksel.errors import ConfigError, DataError
from chunksel.labels.judge import (
    JUDGE_PROMPT,
    attach_sidecar_labels,
    judge_prompt,
    label_instances,
    write_sidecar,
)

HERE = Path(__file__).resolve().parent

EXPECTED = (
    "Can you find the evidence in the context to answer the question?\n"
    "Answer only with Yes/No. Don’t use any external tool. Don’t search\n"
    "on web. Only based on context, don’t infer.\n"
    "Question: Who wrote Hamlet?\n"
    "Context: Hamlet is a tragedy written by William Shakespeare."
)


def test_prompt_is_the_papers_verbatim():
    assert judge_prompt(" Who wrote Hamlet? ", "Hamlet is a tragedy written by William Shakespeare.\n") == EXPECTED
    assert JUDGE_PROMPT.count("\u2019") == 3 and JUDGE_PROMPT.endswith("Context: {context}")
    with pytest.raises(DataError, match="empty question"):
        judge_prompt("  ", "x")


def test_fake_judge_labels_records_unparsed_and_hits_the_cache(tmp_path):
    insts = toy_instances(6)
    judge = KeywordJudge()
    res = label_instances(insts, judge, batch_size=4, cache=tmp_path, progress=False)
    assert len(res.rows) == 30 and res.stats["misses"] == 30 and res.judge == "keyword/kw-1"
    for inst in insts:
        for c in inst.candidates:
            want = int(c.labels["containment"] == 1 and "garbled" not in c.text)
            assert c.labels["semantic"] == want == c.labels["semantic@keyword-kw-1"]
            assert c.meta["semantic_judge"] == "keyword/kw-1"
    garbled = insts[0].candidates[-1]
    # the unparseable output is kept: label 0, reason on the candidate, in failures and the row
    assert garbled.labels["semantic"] == 0 and garbled.meta["semantic_p_yes"] is None
    assert "no option" in garbled.meta["semantic_unparsed"]
    assert [f["id"] for f in res.failures] == ["toy:q:0::p0-4"] and res.failures[0]["text"] == "I cannot tell."
    row = res.rows[4]
    assert (row.parsed, row.label, row.text) == (False, 0, "I cannot tell.")
    assert insts[0].candidates[0].meta["semantic_p_yes"] == pytest.approx(0.9)
    assert insts[1].candidates[0].meta["semantic_p_yes"] == pytest.approx(0.2)
    # a second run is served by the response cache: no backend call
    again = label_instances(toy_instances(6), judge, cache=tmp_path, progress=False)
    assert again.stats["hits"] == 30 and again.stats["misses"] == 0 and len(judge.seen) == 30
    assert [r.to_dict() for r in again.rows] == [r.to_dict() for r in res.rows]


def test_sidecar_attaches_on_load_and_label_spec(tmp_path):
    store = tmp_path / "instances" / "toy" / "abc"
    save_instances(store, toy_instances(6))
    insts = load_instances(store)
    assert "semantic" not in insts[0].candidates[0].labels  # nothing judged yet
    res = label_instances(insts[:4], KeywordJudge(), cache=tmp_path, progress=False)
    path = write_sidecar(store, res)
    assert path.parent == store.parent / "labels" and path.name == "semantic@keyword-kw-1.jsonl"
    meta = json.loads(path.with_name("semantic@keyword-kw-1.meta.json").read_text())
    assert meta["pairs"] == 20 and meta["unparsed"] == 1 and meta["judge"] == "keyword/kw-1"
    # a second store of the same dataset sees the same sidecar
    other = tmp_path / "instances" / "toy" / "def"
    save_instances(other, toy_instances(6))
    for loaded in (load_instances(store), load_instances(other)):
        got = [c.labels.get("semantic") for i in loaded[:4] for c in i.candidates]
        assert got == [c.labels["semantic"] for i in insts[:4] for c in i.candidates]
        assert loaded[0].candidates[0].meta["semantic_p_yes"] == pytest.approx(0.9)
        assert all("semantic" not in c.labels for i in loaded[4:] for c in i.candidates)
    # --label: only when every instance was judged; a source nobody carries is an error
    built = Built("toy", store, load_instances(store)[:4])
    out = _with_label(built, "semantic")
    assert out.config["label"] == "semantic" and all(i.label_source == "semantic" for i in out.instances)
    assert out.instances[1].labels().tolist() == [0, 1, 0, 0, 0]
    with pytest.raises(DataError, match="2 of 6 toy instances"):
        _with_label(Built("toy", store, load_instances(store)), "semantic")
    with pytest.raises(ConfigError, match="chunksel label judges benchmark datasets only"):  # toy is not one
        _with_label(Built("toy", other, toy_instances(2)), "semantic|containment")
    # a second judge: both kept apart, the plain source from the latest (with a warning)
    time.sleep(0.01)
    write_sidecar(store, label_instances(toy_instances(6)[:4], KeywordJudge(model_id="kw-2"),
                                         cache=tmp_path, progress=False))
    insts2 = toy_instances(6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        keys = attach_sidecar_labels(insts2, store)
    assert keys == ["keyword-kw-1", "keyword-kw-2"] and any("2 judges" in str(w.message) for w in caught)
    c = insts2[0].candidates[0]
    assert c.meta["semantic_judge"] == "keyword/kw-2" and {"semantic@keyword-kw-1", "semantic@keyword-kw-2"} <= set(c.labels)
    assert attach_sidecar_labels(toy_instances(6), store, judge="keyword-kw-1")[-1] == "keyword-kw-1"
    with pytest.raises(DataError, match="no labels of judge"):
        attach_sidecar_labels(toy_instances(6), store, judge="nobody")


def _worker(cache: Path, n: int, delay: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, str(HERE / "llm_judge_worker.py"), str(cache), str(n), str(delay)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_killed_labelling_resumes_with_identical_results(tmp_path):
    n = 6  # 30 pairs
    killed = _worker(tmp_path / "killed", n, 0.05)
    path = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = list((tmp_path / "killed").glob("llm/keyword/kw-1/choose-*.jsonl"))
        if found and found[0].read_bytes().count(b"\n") >= 5:
            path = found[0]
            break
        assert killed.poll() is None, killed.stderr.read()
        time.sleep(0.02)
    assert path is not None, "the worker judged nothing in time"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    kept = path.read_bytes().count(b"\n")
    assert 5 <= kept < 5 * n
    resumed = _worker(tmp_path / "killed", n, 0.0)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    fresh = _worker(tmp_path / "fresh", n, 0.0)
    out2, err2 = fresh.communicate(timeout=60)
    assert fresh.returncode == 0, err2
    a, b = json.loads(out), json.loads(out2)
    assert a["rows"] == b["rows"]
    assert a["stats"]["hits"] == kept and a["stats"]["misses"] == 5 * n - kept
    assert path.read_bytes().count(b"\n") == 5 * n  # nothing judged twice


PAIRS = [  # (question, chunk): one supporting chunk, one unrelated
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    ("Who wrote Hamlet?", "The Danube flows through ten countries before reaching the Black Sea."),
]


def _pair_instances():
    from chunksel.types import Candidate, Instance, Question

    q = Question(id="t:q:0", text=PAIRS[0][0], answers=["William Shakespeare"])
    return [Instance(q, [Candidate(id=f"c{j}", text=t, rank=j) for j, (_, t) in enumerate(PAIRS)])]


@pytest.mark.model
def test_smollm2_judge_two_pairs(tmp_path, smollm2):
    insts = _pair_instances()
    res = label_instances(insts, smollm2, cache=tmp_path, progress=False)
    direct = [smollm2.choose(judge_prompt(q, t), ["Yes", "No"]) for q, t in PAIRS]
    for c, row, ch in zip(insts[0].candidates, res.rows, direct, strict=True):
        assert row.parsed and row.label == int(ch.option == "Yes") == c.labels["semantic"]
        assert 0.0 < row.p_yes < 1.0 and row.label == int(row.p_yes > 0.5)
        assert row.p_yes == pytest.approx(ch.probabilities()[0], abs=1e-4)
    assert res.stats["misses"] == 2 and res.stats["tokens_in"] > 100


@pytest.mark.model
def test_http_judge_matches_local_and_records_unparsed(tmp_path, smollm2, server):
    from chunksel.llm.openai_http import OpenAIBackend

    local = label_instances(_pair_instances(), smollm2, cache=tmp_path, progress=False)
    with OpenAIBackend(server.url, "smollm2", timeout=120.0, max_retries=0, top_logprobs=5) as b:
        remote = label_instances(_pair_instances(), b, cache=tmp_path, progress=False)
    assert [r.label for r in remote.rows] == [r.label for r in local.rows]
    assert [r.p_yes for r in remote.rows] == pytest.approx([r.p_yes for r in local.rows], abs=1e-3)
    assert remote.judge == "openai/smollm2" and remote.cache_path != local.cache_path
    # a server without log-probabilities whose text names no option: recorded, label 0
    server.script("say:Yes, the context says so.", "say:Hard to tell from this.")
    insts = _pair_instances()
    # one request in flight: the scripted replies go out in request order
    with OpenAIBackend(server.url, "smollm2-text", timeout=30.0, max_retries=0, top_logprobs=0,
                       max_concurrency=1) as b:
        text = label_instances(insts, b, batch_size=1, cache=tmp_path, progress=False)
    assert [(r.label, r.parsed) for r in text.rows] == [(1, True), (0, False)]
    assert text.rows[1].text == "Hard to tell from this." and text.rows[1].p_yes is None
    assert len(text.failures) == 1 and "semantic_unparsed" in insts[0].candidates[1].meta


@pytest.mark.parametrize("argv, needle", [
    (["--judge", "ftp://host"], "--judge must be 'local' or an http(s):// base URL"),
    (["--judge", "http://127.0.0.1:9/v1"], "--judge URL needs --model NAME"),
    (["--judge", "local", "--limit", "0"], "--limit must be >= 1"),
])
def test_cli_label_refuses_bad_judges_before_any_work(capsys, argv, needle):
    from chunksel.cli import main

    assert main(["label", "--dataset", "triviaqa", *argv]) == 2
    assert needle in capsys.readouterr().err
