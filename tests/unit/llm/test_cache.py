"""The append-only response cache and map_cached: hits, misses, keys, torn lines, and a
run killed with SIGKILL midway that resumes with nothing lost or duplicated."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tests.doubles import EchoBackend

from chunksel.errors import DataError
from chunksel.llm.backends import Choice, Generation
from chunksel.llm.cache import CacheStats, ResponseCache, map_cached

HERE = Path(__file__).resolve().parent
TEMPLATE = "Repeat: {text}"


def run_map(backend, items, cache, **kw):
    kw.setdefault("template", TEMPLATE)
    return map_cached(backend, items, prompt=lambda x: TEMPLATE.format(text=x), item_id=lambda x: x,
                      cache=cache, progress=False, **kw)


def lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_hits_misses_and_accounting(tmp_path):
    b = EchoBackend()
    items = ["a", "b", "c", "a"]  # a repeated item is computed once
    first = run_map(b, items, tmp_path, batch_size=2)
    assert [r.text for r in first.results] == [f"echo: Repeat: {x}" for x in items]
    assert first.stats == CacheStats(items=4, hits=0, misses=3, calls=2, tokens_in=6, tokens_out=6)
    assert len(b.prompts_seen) == 3
    second = run_map(b, items, tmp_path)
    assert second.results == first.results and len(b.prompts_seen) == 3  # no call
    assert second.stats.hits == 3 and second.stats.misses == 0 and second.stats.calls == 0
    assert len(lines(first.cache_path)) == 3
    # the path spells the key: backend / model / task-template-settings
    rel = first.cache_path.relative_to(tmp_path)
    assert rel.parts[:3] == ("llm", "echo", "echo-1") and rel.name.startswith("generate-")
    meta = json.loads(first.cache_path.with_name(first.cache_path.stem + ".meta.json").read_text())
    assert meta["backend"] == "echo" and meta["settings"] == {"max_new_tokens": 64, "temperature": 0.0}


def test_key_changes_start_new_namespaces(tmp_path):
    base = run_map(EchoBackend(), ["a"], tmp_path).cache_path
    assert run_map(EchoBackend(), ["a"], tmp_path, template=TEMPLATE + " ").cache_path != base
    assert run_map(EchoBackend(), ["a"], tmp_path, max_new_tokens=8).cache_path != base
    assert run_map(EchoBackend(model_id="echo-2"), ["a"], tmp_path).cache_path != base
    # same namespace, same id, another prompt: a miss whose line supersedes the old one
    b = EchoBackend()
    out = map_cached(b, ["a"], prompt=lambda x: "changed " + x, item_id=lambda x: x,
                     template=TEMPLATE, cache=tmp_path, progress=False)
    assert out.cache_path == base and out.stats.misses == 1 and out.results[0].text == "echo: changed a"
    with ResponseCache(base) as cache:
        assert len(cache) == 1 and cache.get("a").text == "echo: changed a"


def test_bad_input(tmp_path):
    with pytest.raises(DataError, match="different prompts"):
        map_cached(EchoBackend(), ["a", "b"], prompt=lambda x: x, item_id=lambda x: "same",
                   template=TEMPLATE, cache=tmp_path, progress=False)
    with pytest.raises(DataError, match="non-empty string"):
        run_map(EchoBackend(), ["a"], tmp_path, template="")
    with pytest.raises(DataError, match="empty prompt"):
        map_cached(EchoBackend(), ["a"], prompt=lambda x: " ", item_id=lambda x: x,
                   template=TEMPLATE, cache=tmp_path, progress=False)
    with pytest.raises(DataError, match="options"):
        run_map(EchoBackend(), ["a"], tmp_path, options=[])


def test_choices_and_recorded_failures(tmp_path):
    items = ["Yes", "no way", "perhaps"]
    out = run_map(EchoBackend(), items, tmp_path, options=["Yes", "No"], default="No")
    assert [c.option for c in out.results] == ["Yes", "No", "No"]
    assert [c.parsed for c in out.results] == [True, True, False]
    assert out.stats.unparsed == 1
    assert out.failures == [{"id": "perhaps", "text": "Repeat: perhaps",
                             "reason": "no option among ['Yes', 'No'] in the output", "default": "No"}]
    again = run_map(EchoBackend(), items, tmp_path, options=["Yes", "No"], default="No")
    assert again.stats.hits == 3 and again.failures == out.failures  # kept across runs
    with ResponseCache(out.cache_path) as cache:
        assert [f["id"] for f in cache.failures()] == ["perhaps"]
        assert isinstance(cache.get("Yes"), Choice)


def test_torn_last_line_is_cut_and_rewritten(tmp_path):
    path = tmp_path / "c.jsonl"
    with ResponseCache(path) as cache:
        cache.put("a", "p1", Generation("A", 1, 1, 0.1))
        cache.put("b", "p2", Generation("B", 1, 1, 0.1))
    whole = path.read_bytes()
    path.write_bytes(whole + b'{"id": "c", "prompt": "p3", "kind": "gen')  # killed mid-write
    with ResponseCache(path) as cache:
        assert cache.torn > 0 and len(cache) == 2 and "c" not in cache
        assert path.read_bytes() == whole
        cache.put("c", "p3", Generation("C", 1, 1, 0.1))
    assert [r["id"] for r in lines(path)] == ["a", "b", "c"]
    with ResponseCache(path) as cache:
        assert cache.torn == 0 and cache.get("c", "p3").text == "C" and cache.get("c", "other") is None


def test_corrupt_line_is_skipped_with_a_warning(tmp_path):
    path = tmp_path / "c.jsonl"
    with ResponseCache(path) as cache:
        cache.put("a", "p1", Generation("A", 1, 1, 0.1))
    with path.open("a") as fh:
        fh.write("not json\n")
    with pytest.warns(UserWarning, match="skipped 1 unreadable"), ResponseCache(path) as cache:
        assert len(cache) == 1 and cache.corrupt == 1


def test_progress_bar_honours_tqdm_disable(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TQDM_DISABLE", "1")
    map_cached(EchoBackend(), ["a", "b"], prompt=lambda x: x, item_id=lambda x: x,
               template=TEMPLATE, cache=tmp_path, progress=True)
    assert capsys.readouterr().err == ""


def _worker(cache: Path, n: int, delay: float) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    return subprocess.Popen([sys.executable, str(HERE / "llm_cache_worker.py"), str(cache), str(n), str(delay)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def test_killed_run_resumes_without_loss_or_duplicates(tmp_path):
    n = 30
    killed = _worker(tmp_path / "killed", n, 0.05)
    path = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the cache holds a few records
        found = list((tmp_path / "killed").glob("llm/echo/echo-1/*.jsonl"))
        if found and found[0].read_bytes().count(b"\n") >= 5:
            path = found[0]
            break
        assert killed.poll() is None, killed.stderr.read()
        time.sleep(0.02)
    assert path is not None, "the worker wrote no records in time"
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert killed.returncode == -signal.SIGKILL
    before = path.read_bytes()
    kept = before.count(b"\n")
    assert 5 <= kept < n  # killed midway

    resumed = _worker(tmp_path / "killed", n, 0.0)
    out, err = resumed.communicate(timeout=60)
    assert resumed.returncode == 0, err
    resumed_out = json.loads(out)
    fresh = _worker(tmp_path / "fresh", n, 0.0)
    out, err = fresh.communicate(timeout=60)
    assert fresh.returncode == 0, err
    fresh_out = json.loads(out)

    assert resumed_out["results"] == fresh_out["results"]
    assert resumed_out["stats"]["hits"] == kept and resumed_out["stats"]["misses"] == n - kept
    records = lines(path)
    ids = [r["id"] for r in records]
    assert len(ids) == n and sorted(ids) == sorted(f"item-{i}" for i in range(n))  # no duplicate
    assert path.read_bytes().startswith(before[: before.rfind(b"\n") + 1])  # nothing rewritten


@pytest.mark.model
def test_map_cached_with_smollm2(tmp_path, smollm2):
    items = ["Is Paris in France?", "Is the sun cold?"]
    first = map_cached(smollm2, items, prompt=lambda q: q + " Answer Yes or No.", item_id=lambda q: q,
                       template="{q} Answer Yes or No.", options=["Yes", "No"], cache=tmp_path,
                       progress=False)
    assert first.stats.misses == 2 and first.stats.calls == 1 and first.stats.tokens_in > 0
    assert all(c.option in ("Yes", "No") and c.source == "logprobs" for c in first.results)
    calls = smollm2.usage.calls
    second = map_cached(smollm2, items, prompt=lambda q: q + " Answer Yes or No.", item_id=lambda q: q,
                        template="{q} Answer Yes or No.", options=["Yes", "No"], cache=tmp_path,
                        progress=False)
    assert second.results == first.results and second.stats.hits == 2
    assert smollm2.usage.calls == calls
    rel = first.cache_path.relative_to(tmp_path)
    assert rel.parts[:3] == ("llm", "local", smollm2.model_id) and rel.name.startswith("choose-")


def test_two_servers_never_share_answers(tmp_path):
    """The URL and every request setting key the namespace: same model name, other server
    (or other top_logprobs, token field, extra body) is another cache file."""
    pytest.importorskip("httpx")
    from chunksel.llm.openai_http import OpenAIBackend

    def store(url, **kw):
        b = OpenAIBackend(url, "same-model", api_key_env="", **kw)
        return ResponseCache.for_backend(b, task="choose", template="T", settings={"options": ["Yes", "No"]},
                                         cache=tmp_path, fsync=False)

    base = "http://127.0.0.1:8001/v1"
    a = store(base)
    a.put("q1", "h", Choice("Yes", 0, ("Yes", "No"), (-0.1, -2.0), "logprobs"))
    variants = [store("http://127.0.0.1:8002/v1"), store("https://api.example.com/v1"),
                store(base, top_logprobs=5), store(base, choose_max_tokens=64),
                store(base, max_tokens_field="max_completion_tokens"), store(base, extra_body={"seed": 1})]
    paths = {a.path, *(v.path for v in variants)}
    assert len(paths) == 7
    assert all(v.get("q1") is None for v in variants)
    again = store(base + "/")  # the same server spelled with a trailing slash: a hit
    assert again.path == a.path and again.get("q1", "h").option == "Yes"
    meta = json.loads(a.path.with_name(a.path.stem + ".meta.json").read_text())
    assert meta["settings"]["url"] == base + "/chat/completions"
