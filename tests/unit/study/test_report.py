"""The report writer on a small hand-made results dict."""

from __future__ import annotations

import json

import numpy as np
import pytest

from chunksel.eval.significance import significance_entry
from chunksel.study.format import fmt_params, metrics_to_percent, seed_cell
from chunksel.study.report import render_markdown, write_report
from chunksel.study.tables import (
    format_significance,
    format_table1,
    format_table2,
    format_table3,
    strongest_baseline,
)

DATASETS = ["triviaqa", "popqa", "msmarco"]


def _results() -> dict:
    return {
        "config": {"k": 5, "seeds": [0, 1, 2]},
        "git_commit": "abc1234",
        "data_checksums": {"triviaqa/dev.jsonl": "0123456789abcdef"},
        "datasets": DATASETS,
        "table1": {
            "retrieval": {
                "params": 0, "size_bytes": 120, "p50_ms": 0.01, "p95_ms": 0.02,
                "query_cost": "none",
                "per_dataset": {
                    "triviaqa": {"mean": 44.96, "std": 0.0, "seeds": [44.96], "n": 1000},
                    "popqa": {"mean": 61.74, "std": 0.0, "seeds": [61.74], "n": 900},
                    "msmarco": {"mean": 65.82, "std": 0.0, "seeds": [65.82], "n": 300},
                },
            },
            "prototype": {
                "params": 7_012_345, "size_bytes": 28_049_000, "p50_ms": 0.8, "p95_ms": 1.3,
                "query_cost": "warmup",
                "per_dataset": {  # mean/std computed from the seeds
                    "triviaqa": {"seeds": [49.0, 50.0, 51.0], "n": 1000, "ci": [47.9, 52.1]},
                    "popqa": {"seeds": [70.0, 71.0, 72.0], "n": 900},
                    "msmarco": {"seeds": [70.0, 70.5, 71.0], "n": 300},
                },
            },
            "knrm": {  # evaluated on two datasets only
                "params": 48_000_000, "size_bytes": 192_000_000, "p50_ms": 2.0, "p95_ms": 3.0,
                "query_cost": "none",
                "per_dataset": {
                    "triviaqa": {"mean": 47.04, "std": 0.5, "seeds": [46.54, 47.04, 47.54]},
                    "popqa": {"mean": 66.76, "std": 0.25, "seeds": [66.51, 66.76, 67.01]},
                },
            },
        },
        "table2": {
            "HS": {"triviaqa": 45.5, "popqa": 62.0, "msmarco": 66.0},
            "Chunk": {"triviaqa": 47.31, "popqa": 67.92, "msmarco": 69.28},
            "HS+RW+Chunk": {"triviaqa": 49.56, "popqa": 70.87, "msmarco": 70.43},
        },
        "table3": {
            "100": {"dims": 4992, "per_dataset": {"triviaqa": 49.56, "popqa": 70.87, "msmarco": 70.43}},
            "10": {"dims": 499, "per_dataset": {"triviaqa": 45.83, "popqa": 66.19, "msmarco": 67.42}},
            "50": {"dims": 2496, "per_dataset": {"triviaqa": 48.29, "popqa": 69.2, "msmarco": 69.58}},
        },
        "pooled": {
            "prototype": {
                "per_dataset": {"triviaqa": 50.0, "popqa": 71.0, "msmarco": 70.5},
                "pooled": {"triviaqa": 51.0, "popqa": 70.0, "msmarco": 71.5},
            }
        },
        "significance": {
            "triviaqa": {"a": "prototype", "b": "knrm", "diff": 2.96, "lo": 1.1, "hi": 4.8,
                         "p": 0.0012, "n": 1000},
            "popqa": {"a": "prototype", "b": "knrm", "diff": 4.24, "lo": 2.0, "hi": 6.5,
                      "p": 3e-6, "n": 900},
        },
        "extra_metrics": {
            "prototype": {"triviaqa": {"mrr": 65.5, "ndcg": 72.25, "recall@1": 40.0,
                                       "contested_accuracy": 30.125}},
            "retrieval": {"triviaqa": {"mrr": 60.0, "ndcg": 70.0, "recall@1": 35.0,
                                       "contested_accuracy": float("nan")}},
        },
    }


def _row(text: str, first_cell: str) -> list[str]:
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[0] == first_cell:
            return cells
    raise AssertionError(f"no row {first_cell!r} in\n{text}")


def test_table1_numbers_and_averages():
    text = format_table1(_results())
    assert text.splitlines()[0].startswith("| Method | Params | Size | p50 ms | p95 ms | Query cost |")
    assert "| TriviaQA | PopQA | MS MARCO | Avg. |" in text.splitlines()[0]
    base = _row(text, "RAG baseline (retrieval order)")
    assert base[6:10] == ["44.96", "61.74", "65.82", f"{(44.96 + 61.74 + 65.82) / 3:.2f}"]
    assert base[1] == "–"  # no trainable parameters
    proto = _row(text, "Prototype (paper)")
    assert proto[1] == "7.0M" and proto[5] == "warmup"
    # per-dataset: mean ± sample std of the seeds, best per column in bold
    assert proto[6] == "**50.00 ± 1.00**"
    assert proto[7] == "**71.00 ± 1.00**"
    assert proto[8] == "**70.50 ± 0.50**"
    # average: mean ± std of the per-seed averages (49.67, 70.5, 71.33)
    per_seed = np.mean([[49.0, 50.0, 51.0], [70.0, 71.0, 72.0], [70.0, 70.5, 71.0]], axis=0)
    assert proto[9] == f"**{per_seed.mean():.2f} ± {per_seed.std(ddof=1):.2f}**"
    # a selector missing a dataset: "–" in that cell, average over the two it has, marked
    knrm = _row(text, "KNRM")
    assert knrm[8] == "–"
    assert knrm[9].startswith(f"{(47.04 + 66.76) / 2:.2f} ± ") and knrm[9].endswith("†")
    assert "† averaged over the datasets" in text


def test_table1_text_column_and_cold_note_when_the_results_have_them():
    res = _results()
    assert "Text p50 ms" not in format_table1(res) and "cold" not in render_markdown(res)
    res["table1"]["prototype"].update(text_p50_ms=21.5, text_p95_ms=30.0)
    text = format_table1(res)
    assert text.splitlines()[0].startswith("| Method | Params | Size | p50 ms | p95 ms | Text p50 ms | Query cost |")
    proto = _row(text, "Prototype (paper)")
    assert proto[3:7] == ["0.800", "1.300", "21.500", "warmup"] and proto[7] == "**50.00 ± 1.00**"
    assert _row(text, "RAG baseline (retrieval order)")[5] == "–"  # a row without the figure
    assert "| :--- | ---: | ---: | ---: | ---: | ---: | :--- |" in text
    assert "one thread, cold (every feature computed, no memo)" in render_markdown(res)


def test_tables_2_3_and_significance():
    r = _results()
    t2 = format_table2(r)
    assert _row(t2, "Chunk")[1:] == ["47.31", "67.92", "69.28", f"{(47.31 + 67.92 + 69.28) / 3:.2f}"]
    assert _row(t2, "HS+RW+Chunk")[1] == "**49.56**"
    t3 = format_table3(r)
    budgets = [line.split("|")[1].strip() for line in t3.splitlines()[2:]]
    assert budgets == ["10%", "50%", "100%"]  # sorted numerically, not as strings
    assert _row(t3, "10%")[1:] == ["499", "45.83", "66.19", "67.42", "59.81"]
    sig = format_significance(r)
    tq = _row(sig, "TriviaQA")
    assert tq[1:4] == ["Prototype (paper)", "KNRM", "1000"]
    assert tq[4:] == ["+2.96", "[+1.10, +4.80]", "0.0012", "A better"]  # no acc columns given
    r["significance"]["popqa"]["acc_a"] = 71.0
    assert _row(format_significance(r), "PopQA")[4:7] == ["71.00", "–", "+4.24"]
    assert _row(sig, "PopQA")[-2:] == ["3.0e-06", "A better"]


def test_write_report_files_and_content(tmp_path):
    path = write_report(_results(), tmp_path / "out")
    out = tmp_path / "out"
    assert path == out / "report.md"
    for name in ("accuracy_vs_latency.png", "accuracy_vs_budget.png",
                 "accuracy_by_dataset.png", "significance.png"):
        data = (out / name).read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000, name
    text = path.read_text()
    for heading in ("Table 1", "Table 2", "Table 3", "Significance", "pooled training",
                    "Further metrics", "## Setup"):
        assert heading in text, heading
    assert "![latency](accuracy_vs_latency.png)" in text
    assert "`abc1234`" in text and "0123456789abcdef" in text
    assert '"seeds": [' in text  # config block
    delta = _row(text.split("## Per-dataset vs pooled training")[1], "Prototype (paper)")
    assert delta[1] == "per dataset"
    assert "| Prototype (paper) | Δ pooled − per dataset | +1.00 | -1.00 | +1.00 | +0.33 |" in text
    assert "| **Prototype (paper)** |" not in text
    assert "| Prototype (paper) | **65.50** | **72.25** | **40.00** | 30.12 |" in text
    saved = json.loads((out / "results.json").read_text())
    assert saved["table1"]["prototype"]["params"] == 7_012_345
    assert saved["extra_metrics"]["retrieval"]["triviaqa"]["contested_accuracy"] is None


def test_missing_pieces_are_skipped(tmp_path):
    r = _results()
    for key in ("table2", "table3", "pooled", "significance", "extra_metrics", "datasets"):
        r.pop(key)
    path = write_report(r, tmp_path)
    text = path.read_text()
    assert "Table 1" in text and "Table 2" not in text and "Table 3" not in text
    assert not (tmp_path / "accuracy_vs_budget.png").exists()
    assert not (tmp_path / "significance.png").exists()
    assert (tmp_path / "accuracy_vs_latency.png").exists()
    # without "datasets", the paper's order is used
    assert "| TriviaQA | PopQA | MS MARCO | Avg. |" in text
    assert render_markdown({"table1": {}}).startswith("# chunksel benchmark report")


def test_converters():
    from chunksel.eval.metrics import evaluate

    m = metrics_to_percent(evaluate(np.array([[0.2, 0.1], [0.1, 0.9]]), np.array([[1, 0], [1, 0]])))
    assert m["n"] == 2 and m["accuracy"] == pytest.approx(50.0) and m["mrr"] == pytest.approx(75.0)
    a = np.array([1, 1, 0, 1, 0, 1], dtype=bool)
    b = np.array([0, 1, 0, 0, 0, 1], dtype=bool)
    e = significance_entry("prototype", "knrm", a, b, n_resamples=500)
    assert e["a"] == "prototype" and e["n"] == 6
    assert e["diff"] == pytest.approx(100 * 2 / 6) and e["acc_b"] == pytest.approx(100 * 2 / 6)
    assert e["p"] == pytest.approx(0.5)  # n10 = 2, n01 = 0: 2 * 1/4
    assert fmt_params(48_000_000) == "48M" and fmt_params(7_012_345) == "7.0M"
    assert fmt_params(12_300) == "12k" and fmt_params(0) == "–"


def test_seed_cell():
    c = seed_cell([49.0, 50.0, 51.0], n=10, ci=(48.0, 52.0))
    assert c == {"mean": 50.0, "std": 1.0, "seeds": [49.0, 50.0, 51.0], "n": 10, "ci": [48.0, 52.0]}
    assert seed_cell([44.96])["std"] == 0.0


def test_oracle_never_bold_and_strongest_baseline():
    r = _results()
    r["table1"]["oracle"] = {
        "params": 0,
        "per_dataset": {d: {"mean": 100.0, "seeds": [100.0]} for d in DATASETS},
    }
    text = format_table1(r)
    assert _row(text, "Oracle")[6] == "100.00"
    assert _row(text, "Prototype (paper)")[6] == "**50.00 ± 1.00**"
    assert "Evaluated (answerable) test instances: TriviaQA 1000, PopQA 900, MS MARCO 300." in text
    assert strongest_baseline(r, "triviaqa") == "knrm"
    assert strongest_baseline(r, "msmarco") == "retrieval"  # knrm has no MS MARCO figure
    # overall: averaged over the datasets every baseline has (TriviaQA, PopQA)
    assert strongest_baseline(r) == "knrm"
    assert strongest_baseline(r, exclude=()) == "prototype"
    assert strongest_baseline({"table1": {}}) is None


def _flagship_results(profile: str) -> dict:
    """The anchored flagship vs LambdaMART and retrieval on two datasets, hand-made."""
    def cell(*seeds: float) -> dict:
        return {"seeds": list(seeds), "n": 100}

    def cmp(a: str, b: str, diff: float, lo: float, hi: float, acc_a: float, acc_b: float) -> dict:
        return {"a": a, "b": b, "diff": diff, "lo": lo, "hi": hi, "p": 0.01, "n": 100,
                "acc_a": acc_a, "acc_b": acc_b}

    return {
        "config": {"profile": {"name": profile}},
        "datasets": ["triviaqa", "nq"],
        "flagship": "anchored",
        "strongest_baseline": "lambdamart",
        "strongest_per_dataset": {"triviaqa": "lambdamart", "nq": "lambdamart"},
        "table1": {
            "retrieval": {"per_dataset": {"triviaqa": cell(60.0), "nq": cell(70.0)}},
            "lambdamart": {"per_dataset": {"triviaqa": cell(68.0, 68.0, 68.0), "nq": cell(75.0, 75.0, 75.0)}},
            "anchored": {"per_dataset": {"triviaqa": cell(71.0, 72.0, 73.0), "nq": cell(73.0, 74.0, 75.0)}},
        },
        "significance": {
            "triviaqa": [cmp("anchored", "lambdamart", 4.0, 1.5, 6.5, 72.0, 68.0),
                         cmp("anchored", "retrieval", 12.0, 9.0, 15.0, 72.0, 60.0)],
            "nq": [cmp("anchored", "lambdamart", -1.0, -3.0, -0.2, 74.0, 75.0)],
        },
        "learning_curve": {"triviaqa": {"usable_train": 900, "sizes": [500, 900], "per_selector": {
            "anchored": {"500": 70.0, "900": 72.0}, "lambdamart": {"500": 65.0, "900": 68.0}}}},
    }


def test_flagship_targets_measured_verdicts_and_shortfalls():
    from chunksel.study.targets import flagship_targets, format_flagship_targets

    t = flagship_targets(_flagship_results("large"))
    assert t["per_dataset"]["triviaqa"]["class"] == "better" and t["per_dataset"]["nq"]["class"] == "worse"
    assert t["n_better"] == 1 and t["n_worse"] == 1 and t["large"]
    assert t["margin_over_strongest"] == pytest.approx(73.0 - 71.5)  # (72 + 74) / 2 - (68 + 75) / 2
    assert t["margin_over_retrieval"] == pytest.approx(73.0 - 65.0)
    text = format_flagship_targets(_flagship_results("large"))
    assert _row(text, "Not significantly below the strongest baseline on any dataset")[1:4] == [
        "1 below (NQ)", "0 below", "not met"]
    assert _row(text, "Average above the strongest baseline (LambdaMART)")[1:5] == ["+1.50", "≥ +1.00", "met", "–"]
    assert _row(text, "Average above retrieval order")[1:4] == ["+8.00", "≥ +8.00", "met"]
    sig = _row(text, "Significantly better than the strongest baseline (large profile: ≥ 3 of 2)")
    assert sig[1:5] == ["1 of 2", "≥ 3", "not met", "2 dataset(s)"]
    # a target is missed, so the learning curve is read out: the gap grows from +5 to +4
    assert "Anchored prototype 70.00 at 500" in text and "the gap goes from +5.00 to +4.00 points" in text
    # on another profile the count is shown but not judged
    other = format_flagship_targets(_flagship_results("full"))
    assert _row(other, "Significantly better than the strongest baseline (large profile: ≥ 3 of 2)")[2:4] == [
        "(large profile)", "–"]
    # no flagship, or no comparison of it: no section
    r = _flagship_results("full")
    r["flagship"] = None
    assert format_flagship_targets(r) == "" and "flagship against" not in render_markdown(r)
    r = _flagship_results("full")
    r["significance"] = {}
    assert flagship_targets(r) is None
    assert "## The flagship against its targets" in render_markdown(_flagship_results("full"))


def test_the_stacked_row_is_judged_against_its_own_targets():
    from chunksel.study.targets import STACKED_TARGETS, flagship_targets, format_flagship_targets

    r = _flagship_results("large")
    r["table1"]["anchored-ce"] = {"per_dataset": {"triviaqa": {"seeds": [74.0], "n": 100},
                                                  "nq": {"seeds": [75.0], "n": 100}}}
    r["significance"]["triviaqa"].append({"a": "anchored-ce", "b": "lambdamart", "diff": 6.0, "lo": 3.0, "hi": 9.0,
                                          "p": 0.01, "n": 100, "acc_a": 74.0, "acc_b": 68.0})
    r["significance"]["nq"].append({"a": "anchored-ce", "b": "lambdamart", "diff": 0.0, "lo": -2.0, "hi": 2.0,
                                    "p": 1.0, "n": 100, "acc_a": 75.0, "acc_b": 75.0})
    t = flagship_targets(r, "anchored-ce")
    assert t["margin_over_strongest"] == pytest.approx(74.5 - 71.5) and t["n_better"] == 1
    text = format_flagship_targets(r, "anchored-ce")
    assert _row(text, "Average above the strongest baseline (LambdaMART)")[1:4] == [
        "+3.00", f"≥ +{STACKED_TARGETS['margin_over_strongest']:.2f}", "met"]
    sig = _row(text, "Significantly better than the strongest baseline (large profile: ≥ 2 of 2)")
    assert sig[1:4] == ["1 of 2", "≥ 2", "not met"]
    assert "Learning curves" not in text  # the curves are the flagship's, not this row's
    assert "## The stacked flagship (anchored + cross-encoder) against its targets" in render_markdown(r)


def test_a_target_missed_by_less_than_a_shown_digit_shows_the_digit():
    from chunksel.study.targets import format_flagship_targets

    r = _flagship_results("full")
    r["table1"]["retrieval"]["per_dataset"]["nq"] = {"seeds": [70.01], "n": 100}  # margin 7.995
    row = _row(format_flagship_targets(r), "Average above retrieval order")
    assert row[1:5] == ["+7.995", "≥ +8.00", "not met", "0.005 pp"]


def test_flagship_targets_use_every_dataset_even_where_retrieval_order_is_strongest():
    """On PopQA the strongest baseline (chosen on validation) is retrieval order: the
    targets still average over all three datasets (Table 1's averages), and PopQA's
    comparison with retrieval order counts among the per-dataset intervals."""
    from chunksel.study.targets import flagship_targets, format_flagship_targets

    r = _flagship_results("full")
    r["datasets"] = ["triviaqa", "nq", "popqa"]
    r["strongest_per_dataset"]["popqa"] = "retrieval"
    r["table1"]["retrieval"]["per_dataset"]["popqa"] = {"seeds": [90.0], "n": 100}
    r["table1"]["lambdamart"]["per_dataset"]["popqa"] = {"seeds": [80.0, 80.0, 80.0], "n": 100}
    r["table1"]["anchored"]["per_dataset"]["popqa"] = {"seeds": [85.0, 85.0, 85.0], "n": 100}
    r["significance"]["popqa"] = [{"a": "anchored", "b": "retrieval", "diff": -5.0, "lo": -8.0, "hi": -2.0,
                                   "p": 0.01, "n": 100, "acc_a": 85.0, "acc_b": 90.0}]
    t = flagship_targets(r)
    assert t["datasets"] == ["triviaqa", "nq", "popqa"] and set(t["per_dataset"]) == {"triviaqa", "nq", "popqa"}
    flag, lm, ret = (72 + 74 + 85) / 3, (68 + 75 + 80) / 3, (60 + 70 + 90) / 3
    assert t["margin_over_strongest"] == pytest.approx(flag - lm)
    assert t["margin_over_retrieval"] == pytest.approx(flag - ret)
    assert t["margin_over_per_dataset_best"] == pytest.approx(flag - (68 + 75 + 90) / 3)
    assert t["per_dataset"]["popqa"]["class"] == "worse" and t["n_worse"] == 2
    text = format_flagship_targets(r)
    assert _row(text, "Average above retrieval order")[1] == f"{flag - ret:+.2f}"
    assert "PopQA -5.00 [-8.00, -2.00] p=0.0100 vs RAG baseline (retrieval order)" in text


def test_headline_names_the_winner_its_margin_and_interval_at_the_top():
    from chunksel.study.headline import Z95, format_headline

    r = _flagship_results("full")  # anchored 73.0, lambdamart 71.5, retrieval 65.0 on 2 x 100 instances
    text = format_headline(r)
    assert text.startswith("**Headline.** Averaged over the 2 datasets, Anchored prototype (the flagship) has the "
                           "highest rank-1 accuracy, 73.00%: +1.50 points against the runner-up, LambdaMART (71.50%")
    var = sum(a * (1 - a) + b * (1 - b) for a, b in ((0.72, 0.68), (0.74, 0.75))) / 100
    half = 100 * Z95 * var ** 0.5 / 2
    assert f"95% interval [{1.5 - half:+.2f}, {1.5 + half:+.2f}]" in text
    md = render_markdown(r)
    assert md.split("\n\n")[1] == text  # right under the title
    # a baseline wins: the flagship's own standing against the strongest baseline follows
    r["table1"]["retrieval"]["per_dataset"] = {"triviaqa": {"seeds": [80.0], "n": 100}, "nq": {"seeds": [80.0], "n": 100}}
    text = format_headline(r)
    assert "RAG baseline (retrieval order) has the highest rank-1 accuracy, 80.00%: +7.00 points against the " \
           "runner-up, Anchored prototype" in text
    assert "The flagship, Anchored prototype, averages 73.00%: +1.50 points against the strongest baseline " \
           "chosen on validation, LambdaMART (71.50%; 95% interval" in text
    assert format_headline({"table1": {}}) == ""


def test_the_setup_states_each_datasets_split_and_its_evidence_overlap():
    res = _results()
    ov = {"before": {"val": {"questions": 10, "shared": 6, "shared_pct": 60.0},
                     "test": {"questions": 20, "shared": 19, "shared_pct": 95.0}},
          "after": {"val": {"questions": 9, "shared": 0, "shared_pct": 0.0},
                    "test": {"questions": 18, "shared": 0, "shared_pct": 0.0}}}
    res["instance_stats"] = {"triviaqa": {"split": "grouped", "evidence_overlap": ov}, "popqa": {"questions": 3}}
    text = render_markdown(res)
    assert "| TriviaQA | grouped | 19/20 (95.0%) | 0/18 (0.0%) | 0/9 |" in text
    assert "| PopQA |" not in text.split("## Setup")[1].split("Config:")[0]  # no overlap recorded: no row
    del res["instance_stats"]
    assert "Test shared, question split" not in render_markdown(res)


def test_bench_profiles_evaluate_on_grouped_splits():
    from chunksel.build import SPLIT_SCHEMES
    from chunksel.study.profiles import PROFILES

    assert all(p.split == "grouped" for p in PROFILES.values()) and "grouped" in SPLIT_SCHEMES


def test_significance_needs_the_interval_and_mcnemar_to_agree():
    """A row is significantly better (or worse) only when its interval excludes 0 and
    McNemar's p < 0.05: an interval alone (PopQA, large profile: p = 0.078) is a tie."""
    from chunksel.study.records import Comparison
    from chunksel.study.targets import flagship_targets, format_flagship_targets

    both = Comparison("a", "b", diff=2.45, lo=1.25, hi=3.67, p=0.0002, n=100)
    interval_only = Comparison("a", "b", diff=4.22, lo=0.30, hi=8.30, p=0.078, n=100)
    mcnemar_only = Comparison("a", "b", diff=1.0, lo=-0.5, hi=2.5, p=0.01, n=100)
    below = Comparison("a", "b", diff=-3.0, lo=-5.0, hi=-1.0, p=0.02, n=100)
    assert [c.verdict() for c in (both, interval_only, mcnemar_only, below)] == ["better", "tie", "tie", "worse"]
    r = _flagship_results("large")
    r["significance"]["triviaqa"][0].update(lo=0.3, hi=8.3, p=0.078)
    t = flagship_targets(r)
    assert t["per_dataset"]["triviaqa"]["class"] == "tie" and t["per_dataset"]["triviaqa"]["interval_only"]
    assert "on TriviaQA the interval alone excludes 0" in format_flagship_targets(r)


def test_better_than_the_peer_counts_only_when_better_than_lambdamart_too_and_top1_agreement_is_shown():
    """Where validation picked another peer (here LambdaMART + MaxSim on TriviaQA), a dataset
    counts as significantly better only when the flagship beats LambdaMART by both tests as
    well; the flagship's top-1 agreement with the two LambdaMART rows is read out."""
    from chunksel.study.targets import flagship_targets, format_flagship_targets

    r = _flagship_results("large")
    r["strongest_per_dataset"]["triviaqa"] = "lambdamart-late"
    r["table1"]["lambdamart-late"] = {"per_dataset": {"triviaqa": {"seeds": [69.0], "n": 100},
                                                      "nq": {"seeds": [75.0], "n": 100}}}
    peer = {"a": "anchored", "b": "lambdamart-late", "diff": 3.0, "lo": 1.0, "hi": 5.0, "p": 0.01, "n": 100,
            "acc_a": 72.0, "acc_b": 69.0}
    r["significance"]["triviaqa"][0] = {**r["significance"]["triviaqa"][0], "lo": -0.5, "p": 0.2}  # vs LambdaMART
    r["significance"]["triviaqa"].insert(0, peer)
    r["top1_agreement"] = {"triviaqa": {"n": 120, "lambdamart": 97.5, "lambdamart-late": 99.1667},
                           "nq": {"n": 80, "lambdamart": 100.0}}
    t = flagship_targets(r)
    row = t["per_dataset"]["triviaqa"]
    assert row["baseline"] == "lambdamart-late" and row["vs_lambdamart"]["p"] == 0.2
    assert row["class"] == "tie" and t["n_better"] == 0  # better than the peer, not than LambdaMART
    r["significance"]["triviaqa"][1] = {**r["significance"]["triviaqa"][1], "lo": 1.5, "p": 0.01}
    assert flagship_targets(r)["per_dataset"]["triviaqa"]["class"] == "better"
    text = format_flagship_targets(r)
    assert "+3.00 [+1.00, +5.00] p=0.0100 vs LambdaMART + MaxSim and +4.00 [+1.50, +6.50] p=0.0100 vs LambdaMART" in text
    assert ("top-1 is the same as LambdaMART's on TriviaQA 97.5%, NQ 100.0%; as LambdaMART + MaxSim's on "
            "TriviaQA 99.2% (first seeds, every test question: TriviaQA 120, NQ 80)") in text
    from chunksel.study.results import BenchResults

    again = json.loads(json.dumps(BenchResults.from_dict(r).to_dict()))  # the record round-trips
    assert again["top1_agreement"]["triviaqa"]["lambdamart"] == 97.5


def test_top1_agreement_compares_the_first_seeds_picks():
    from types import SimpleNamespace

    from chunksel.study.ablations import top1_agreement

    study = SimpleNamespace(datasets=["nq", "popqa"], picks={
        "anchored": {"nq": [0, 1, 2, 3], "popqa": [1, 1]},
        "lambdamart": {"nq": [0, 1, 0, 3], "popqa": [1, 0]},
        "lambdamart-late": {"nq": [0, 1, 2, 3]},
    })
    got = top1_agreement(study)
    assert got == {"nq": {"n": 4, "lambdamart": 75.0, "lambdamart-late": 100.0}, "popqa": {"n": 2, "lambdamart": 50.0}}
    assert top1_agreement(SimpleNamespace(datasets=["nq"], picks={})) == {}
