"""The figures check between two results files: every Table 1 seed value, significance,
Tables 4 and 5 are compared; latency, timings and cache counters are not."""

from __future__ import annotations

import copy
import json

from chunksel.study.compare import compare_results, main
from chunksel.study.records import Cell, Comparison, Table1Row
from chunksel.study.results import BenchResults


def _results() -> dict:
    res = BenchResults(
        datasets=["nq", "popqa"],
        table1={
            "retrieval": Table1Row(per_dataset={"nq": Cell.of([60.0], n=50), "popqa": Cell.of([70.0], n=40)},
                                   params=0, p50_ms=0.01, query_cost="none"),
            "anchored": Table1Row(per_dataset={"nq": Cell.of([64.0, 66.0, 65.0], n=50, val_seeds=[61.0, 62.0, 63.0]),
                                               "popqa": Cell.of([71.0, 72.0, 73.0], n=40)}, p50_ms=1.5),
        },
        significance={"nq": [Comparison(a="anchored", b="retrieval", diff=5.0, lo=1.0, hi=9.0, p=0.01, n=50)]},
        answers={"nq": {"questions": 2, "cache": {"generated": 2, "cached": 0},
                        "conditions": {"anchored": {"f1": {"mean": 0.5, "lo": 0.2, "hi": 0.8}, "ttft_ms": 40.0}}}},
        llm={"nq": {"rows": {"rankgpt": {"accuracy": 50.0, "ci": [0.0, 100.0], "n": 2}},
                    "cost": {"rankgpt": {"calls_per_query": 1.0, "seconds_per_query": 12.0}}}},
        timings_s={"total": 100.0},
    )
    return res.to_dict()


def test_identical_results_have_no_difference():
    a = _results()
    diffs, compared = compare_results(a, copy.deepcopy(a))
    assert diffs == [] and compared > 20


def test_every_figure_counts_and_machine_measurements_do_not():
    a, b = _results(), _results()
    b["table1"]["anchored"]["per_dataset"]["nq"]["seeds"][1] = 66.5  # one seed of three
    b["table1"]["anchored"]["per_dataset"]["nq"]["val_seeds"][2] = 63.5
    b["significance"]["nq"][0]["p"] = 0.02
    b["answers"]["nq"]["conditions"]["anchored"]["f1"]["lo"] = 0.25
    b["llm"]["nq"]["rows"]["rankgpt"]["accuracy"] = 100.0
    # not figures: latency, time to first token, seconds per query, cache counters, timings
    b["table1"]["anchored"]["p50_ms"] = 9.0
    b["answers"]["nq"]["conditions"]["anchored"]["ttft_ms"] = 80.0
    b["answers"]["nq"]["cache"]["generated"] = 0
    b["llm"]["nq"]["cost"]["rankgpt"]["seconds_per_query"] = 1.0
    b["timings_s"]["total"] = 5.0
    diffs, _ = compare_results(a, b)
    paths = sorted(d.split(":")[0] for d in diffs)
    assert paths == sorted([
        "table1.anchored.per_dataset.nq.seeds[1]", "table1.anchored.per_dataset.nq.mean",
        "table1.anchored.per_dataset.nq.std", "table1.anchored.per_dataset.nq.val_seeds[2]",
        "significance.nq[0].p", "answers.nq.conditions.anchored.f1.lo", "llm.nq.rows.rankgpt.accuracy",
    ])


def test_missing_rows_and_tolerance():
    a, b = _results(), _results()
    del b["table1"]["retrieval"]
    b["table1"]["anchored"]["per_dataset"]["popqa"]["seeds"][0] += 1e-12
    diffs, _ = compare_results(a, b)
    assert diffs == ["table1.retrieval: only in A"]
    assert compare_results(a, b, tol=0.0)[0][-1].startswith("table1.anchored.per_dataset.popqa")


def test_command_line_exit_status(tmp_path, capsys):
    a, b = _results(), _results()
    b["table1"]["retrieval"]["per_dataset"]["nq"]["seeds"] = [61.0]
    for name, doc in (("a", a), ("b", b), ("c", _results())):
        (tmp_path / name).mkdir()
        (tmp_path / name / "results.json").write_text(json.dumps(doc))
    assert main([str(tmp_path / "a"), str(tmp_path / "c" / "results.json")]) == 0
    assert "identical" in capsys.readouterr().out
    assert main([str(tmp_path / "a"), str(tmp_path / "b")]) == 1
    out = capsys.readouterr().out
    assert "table1.retrieval.per_dataset.nq.seeds[0]: 60.0 != 61.0" in out and "difference(s)" in out
    assert main([str(tmp_path / "a"), str(tmp_path / "missing")]) == 2
