"""Shard manifests (no Ray): plans, done markers, the event log, refusing another job."""

from __future__ import annotations

import sys

import pytest

from chunksel.bulk.manifest import ShardManifest, is_done, log_event, mark_done
from chunksel.errors import ConfigError, DataError, MissingExtraError


def test_plan_is_kept_and_progress_read_from_markers(tmp_path):
    ident = {"model": "m", "shard_rows": 2}
    man = ShardManifest.open(tmp_path / "job", "encode", ident, plan=[{"lo": 0, "hi": 2}, {"lo": 2, "hi": 3}])
    assert len(man) == 2 and man.pending() == [0, 1] and man.done() == []
    mark_done(man.folder, 1, {"rows": 1})
    log_event(man.folder, "done", 1, rows=1)
    # a re-run keeps the stored plan, whatever plan it brings
    again = ShardManifest.open(tmp_path / "job", "encode", ident, plan=[{"lo": 0, "hi": 3}])
    assert again.shards == man.shards and again.pending() == [0] and again.done() == [1]
    assert is_done(again.folder, 1) and again.computed_counts() == {0: 0, 1: 1}
    assert again.key == ShardManifest.job_key("encode", ident)


def test_another_job_or_setting_is_refused(tmp_path):
    ShardManifest.open(tmp_path, "encode", {"shard_rows": 2}, plan=[])
    with pytest.raises(ConfigError, match="shard_rows"):
        ShardManifest.open(tmp_path, "encode", {"shard_rows": 4}, plan=[])
    with pytest.raises(ConfigError, match="kind 'encode'"):
        ShardManifest.open(tmp_path, "features", {"shard_rows": 2}, plan=[])
    with pytest.raises(DataError, match="no shard manifest"):
        ShardManifest.open(tmp_path / "other", "encode", {"shard_rows": 2})


def test_torn_log_line_is_skipped(tmp_path):
    man = ShardManifest.open(tmp_path, "judge", {}, plan=[{"ids": ["a"]}])
    log_event(tmp_path, "done", 0)
    with open(tmp_path / "log.jsonl", "a") as fh:
        fh.write('{"event": "done", "sha')  # a writer killed mid-line
    assert man.computed_counts() == {0: 1}


def test_missing_ray_names_the_extra(monkeypatch):
    from chunksel.bulk.engine import require_ray

    monkeypatch.setitem(sys.modules, "ray", None)
    with pytest.raises(MissingExtraError, match=r"chunksel\[ray\]"):
        require_ray()


def test_cli_takes_the_ray_options():
    from chunksel.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["features", "--dataset", "nq", "--ray", "--workers", "3"])
    assert args.ray and args.workers == 3 and args.ray_address is None
    args = parser.parse_args(["label", "--dataset", "nq", "--judge", "local", "--ray-address", "auto"])
    assert args.ray_address == "auto"
    args = parser.parse_args(["embed", "--corpus", "x.tsv", "--index", "ivfpq", "--shard-rows", "100"])
    assert not args.ray and args.shard_rows == 100


def test_cli_refuses_zero_workers(capsys):
    from chunksel.cli import main

    assert main(["embed", "--corpus", "x.tsv", "--ray", "--workers", "0"]) == 2
    assert "--workers must be >= 1" in capsys.readouterr().err


def test_wait_for_shards_in_flight(tmp_path):
    """A started shard has ended once logged done/fail, or once its process is gone."""
    import json
    import os
    import socket
    import time

    from chunksel.bulk.jobs import wait_for_shards_in_flight

    now = time.time()
    dead = 2**22 + 12345  # above the default pid_max: no such process
    events = [("start", 0, os.getpid()), ("done", 0, os.getpid()), ("start", 1, os.getpid()),
              ("fail", 1, os.getpid()), ("start", 2, dead)]
    with open(tmp_path / "log.jsonl", "w") as fh:
        for ev, shard, pid in events:
            fh.write(json.dumps({"event": ev, "shard": shard, "pid": pid, "host": socket.gethostname(),
                                 "time": now}) + "\n")
    t0 = time.monotonic()
    assert wait_for_shards_in_flight(tmp_path, now - 1, timeout=5) == []
    assert time.monotonic() - t0 < 1
    # a live worker still on shard 3 is waited for, up to the timeout
    log_event(tmp_path, "start", 3)
    assert wait_for_shards_in_flight(tmp_path, now - 1, timeout=0.3) == [3]


def test_a_worker_of_an_ended_run_abandons_its_shard(tmp_path):
    """A straggler of a failed run (its token no longer current) computes nothing; the
    current run's worker computes and marks the shard; both ends show in the log."""
    from chunksel.bulk.jobs import wait_for_shards_in_flight
    from chunksel.bulk.manifest import current_run, new_run, read_log
    from chunksel.bulk.workers import ShardWorker

    class Doubler(ShardWorker):
        kind = "test"
        computed: list[int] = []

        def compute(self, shard, payload):
            Doubler.computed.append(shard)
            return 2 * payload["x"]

        def write(self, shard, payload, results):
            return {"rows": 1, "value": results}

    assert current_run(tmp_path) is None
    old = new_run(tmp_path)
    straggler = Doubler(str(tmp_path), run=old)
    new = new_run(tmp_path)  # the failed run ended its token; a re-run holds a new one
    assert new != old and current_run(tmp_path) == new
    out = straggler.run(3, {"x": 5})
    assert out == {"shard": 3, "skipped": True, "abandoned": True}
    assert Doubler.computed == [] and not is_done(tmp_path, 3)
    assert wait_for_shards_in_flight(tmp_path, 0.0, timeout=2.0) == []  # abandon ends the start
    out = Doubler(str(tmp_path), run=new).run(3, {"x": 5})
    assert out["value"] == 10 and not out["skipped"] and is_done(tmp_path, 3)
    assert Doubler.computed == [3]
    events = [(e["event"], e["shard"]) for e in read_log(tmp_path) if e["shard"] >= 0]
    assert events == [("start", 3), ("abandon", 3), ("start", 3), ("done", 3)]
    # without a token (single-process use) there is no check
    assert Doubler(str(tmp_path)).run(4, {"x": 1})["value"] == 2


def test_shard_inputs_travel_as_files(tmp_path):
    from chunksel.bulk.manifest import load_input, stage_input
    from chunksel.errors import DataError

    kept = stage_input(tmp_path, 3, {"ids": ["a", "b"], "texts": ["long text a", "long text b"]}, keep=("ids",))
    assert kept == {"ids": ["a", "b"], "input": "inputs/00003.json"}  # the driver keeps no text
    assert load_input(tmp_path, kept) == {"ids": ["a", "b"], "texts": ["long text a", "long text b"],
                                          "input": "inputs/00003.json"}
    assert load_input(tmp_path, {"lo": 0}) == {"lo": 0}
    (tmp_path / "inputs" / "00003.json").unlink()
    with pytest.raises(DataError, match="shard input .* is missing"):
        load_input(tmp_path, kept)


def test_utility_shard_caches_merge_into_the_driver_cache(tmp_path):
    from chunksel.bulk.label_jobs import _merge_cache
    from chunksel.llm.backends import Choice, Generation
    from chunksel.llm.cache import ResponseCache

    shard = tmp_path / "job" / "cache-00000"
    f = shard / "llm" / "local" / "m" / "generate-abc-def.jsonl"
    with ResponseCache(f, fsync=False) as rc:
        rc.put("q1", "h1", Generation("Answer: x\nMy selection: [[1]]", 10, 5, 0.5))
        rc.put("q2", "h2", Generation("Answer: y", 10, 5, 0.5))
    g = shard / "llm" / "local" / "m" / "choose-abc-def.jsonl"
    with ResponseCache(g, fsync=False) as rc:
        rc.put("k1", "h3", Choice("Yes", 0, ("Yes", "No"), (-0.1, -2.3), "logprobs"))
    root = tmp_path / "root"
    with ResponseCache(root / "llm" / "local" / "m" / "generate-abc-def.jsonl") as rc:
        rc.put("q2", "h2", Generation("Answer: y", 10, 5, 0.5))  # already there: kept once
    assert _merge_cache(shard, root) == 2
    with ResponseCache(root / "llm" / "local" / "m" / "generate-abc-def.jsonl") as rc:
        assert rc.get("q1", "h1").text.endswith("[[1]]") and len(rc) == 2
    with ResponseCache(root / "llm" / "local" / "m" / "choose-abc-def.jsonl") as rc:
        assert rc.get("k1", "h3").option == "Yes"
    assert _merge_cache(shard, root) == 0  # idempotent
