"""Typed benchmark results: JSON round trip, versions, bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chunksel.errors import DataError
from chunksel.study.records import GeneratorAblation, TransferRow, Variant
from chunksel.study.results import (
    RESULTS_VERSION,
    BenchResults,
    Cell,
    Comparison,
    LearningCurve,
    Table1Row,
    load_results,
)

QUICK = Path(__file__).resolve().parents[3] / "reports" / "quick" / "results.json"


def _results() -> BenchResults:
    return BenchResults(
        datasets=["nq", "popqa"],
        table1={
            "retrieval": Table1Row(per_dataset={"nq": Cell.of([60.0], n=50), "popqa": Cell.of([70.0], n=40)},
                                   params=0, p50_ms=0.01, query_cost="none", text_p50_ms=0.01, text_p95_ms=0.02),
            "anchored": Table1Row(per_dataset={"nq": Cell.of([64.0, 66.0, 65.0], n=50, val_seeds=[61.0, 62.0, 63.0])}),
        },
        significance={"nq": [Comparison("anchored", "retrieval", 5.0, 1.0, 9.0, 0.01, 50, acc_a=65.0, acc_b=60.0)]},
        learning_curve={"nq": LearningCurve(usable_train=30, sizes=[10, 30],
                                            per_selector={"anchored": {"10": 61.0, "30": 64.0}})},
        answers={"nq": {"questions": 2, "conditions": {}}},
        transfer={"lambdamart": TransferRow(held_out={"nq": 61.0, "popqa": 70.0}, ci={"nq": [50.0, 70.0], "popqa": [60.0, 80.0]},
                                            answerable={"nq": 50, "popqa": 40}),
                  "anchored": TransferRow(held_out={"nq": 63.0, "popqa": 69.0}, ci={"nq": [52.0, 72.0], "popqa": [59.0, 79.0]},
                                          answerable={"nq": 50, "popqa": 40}, vs_reference=[0.6, -2.0, 3.1],
                                          reference="lambdamart")},
        generator_ablation=GeneratorAblation(
            variants={"with h, r": Variant(blocks=["hs", "lambdamart"],
                                           per_dataset={"nq": Cell.of([65.0], val_seeds=[70.0]),
                                                        "popqa": Cell.of([80.0], val_seeds=[80.0])}),
                      "interaction term alone": Variant(blocks=["lambdamart"],
                                                        per_dataset={"nq": Cell.of([63.0], val_seeds=[72.5]),
                                                                     "popqa": Cell.of([81.0], val_seeds=[82.5])})},
            parts={"interaction term alone": {"nq": Comparison("with h, r", "interaction term alone", 2.0, -1.0,
                                                                5.0, 0.5, 50, acc_a=65.0, acc_b=63.0)}}),
    )


def test_cell_statistics():
    c = Cell.of([64.0, 66.0, 65.0])
    assert c.mean == pytest.approx(65.0) and c.std == pytest.approx(1.0)
    one = Cell.of([60.0])
    assert one.std is None and one.to_dict()["std"] == 0.0
    assert Cell.from_json(70.5).seeds == [70.5]  # a bare number is one seed
    assert Cell.from_json({"mean": 12.0}).mean == 12.0  # a mean without seeds
    assert Cell.from_json(None) is None


def test_round_trip_is_exact(tmp_path):
    res = _results()
    path = res.save(tmp_path / "results.json")
    data = json.loads(path.read_text())
    assert data["results_version"] == RESULTS_VERSION
    back = load_results(tmp_path)
    assert back.to_dict() == res.to_dict()
    assert back.table1["anchored"].per_dataset["nq"].val_seeds == [61.0, 62.0, 63.0]
    assert back.significance["nq"][0].acc_b == 60.0
    assert back.transfer["anchored"].vs_reference == [0.6, -2.0, 3.1] and back.transfer["lambdamart"].reference is None
    assert back.learning_curve["nq"].per_selector["anchored"]["30"] == 64.0
    assert back.generator_ablation.parts["interaction term alone"]["nq"].acc_b == 63.0
    assert data["table1"]["retrieval"]["text_p95_ms"] == 0.02 and "text_p50_ms" not in data["table1"]["anchored"]


def test_version_1_file_is_read():
    """A file without the version field (the layout before Table 4) reads as version 1."""
    data = json.loads(QUICK.read_text())
    data.pop("results_version", None)
    data.pop("answers", None)
    res = BenchResults.from_dict(data)
    assert res.datasets == data["datasets"]
    assert res.table1["anchored"].per_dataset["nq"].seeds == data["table1"]["anchored"]["per_dataset"]["nq"]["seeds"]
    assert res.generator_ablation is not None and set(res.generator_ablation.variants) >= {"with h, r", "without h, r"}
    assert res.answers == {}


def test_bad_results_name_the_problem(tmp_path):
    with pytest.raises(DataError, match="no results file"):
        load_results(tmp_path / "missing.json")
    (tmp_path / "results.json").write_text('{"table1": ')
    with pytest.raises(DataError, match="corrupt results file"):
        load_results(tmp_path)
    with pytest.raises(DataError, match="results version 99 is not supported"):
        BenchResults.from_dict({"results_version": 99, "table1": {}})
    with pytest.raises(DataError, match="table1.x.per_dataset.nq.seeds must be a number"):
        BenchResults.from_dict({"table1": {"x": {"per_dataset": {"nq": {"seeds": ["high"]}}}}})
    with pytest.raises(DataError, match="significance.nq has no 'b'"):
        BenchResults.from_dict({"table1": {}, "significance": {"nq": [{"a": "x"}]}})
    with pytest.raises(DataError, match="results must be an object"):
        BenchResults.from_dict([1, 2])


def test_cli_report_rerenders_from_results(tmp_path):
    pytest.importorskip("matplotlib")
    from chunksel.cli import main
    from chunksel.study.report import write_report

    write_report(_results(), tmp_path / "a")
    first = (tmp_path / "a" / "report.md").read_text()
    assert main(["report", str(tmp_path / "a"), "--out", str(tmp_path / "b")]) == 0
    assert (tmp_path / "b" / "report.md").read_text() == first
    assert "| Anchored prototype |" in first and "65.00 ± 1.00" in first


def test_table5_renders_llm_rows_and_cost():
    from chunksel.study.generation_tables import format_llm

    res = _results()
    res.llm = {"nq": {
        "questions": 4, "answerable": 3, "question_ids": ["a", "b", "c", "d"],
        "rows": {"retrieval": {"accuracy": 66.7, "ci": [0.0, 100.0], "n": 3},
                 "utility": {"accuracy": 33.3, "ci": [0.0, 100.0], "n": 3,
                             "empty_selection": {"unanswerable": 1, "answerable": 3, "unanswerable_abstained": 1.0,
                                                 "answerable_kept": 0.6667}}},
        "cost": {"utility": {"calls_per_query": 7.0, "prompt_tokens_per_query": 2100.0,
                             "output_tokens_per_query": 40.0, "seconds_per_query": 12.5, "repairs": 4,
                             "empty": 1, "fallbacks": 2, "k_distribution": {"0": 1, "2": 3}, "read": "logprobs"}},
    }}
    text = format_llm(BenchResults.from_dict(res.to_dict()))
    assert "**NQ** (4 test questions, 3 with a positive candidate)" in text
    assert "| RAG baseline (retrieval order) | **66.70 [0.0, 100.0]** |" in text
    assert text.index("Utility") < text.index("RAG baseline")  # LLM rows first
    assert "| 7.0 | 2100 | 40 | 12.50 | 4 | 1 | 2 | 0: 1, 2: 3 | logprobs |" in text
    assert "fell back to retrieval order" in text  # the fallbacks are said, not only counted
    assert "selected nothing on 100% of the 1 questions without a positive candidate and kept a chunk on 67%" in text


def test_table4_renders_the_i_dont_know_rows():
    from chunksel.study.generation_tables import format_answers

    res = _results()
    iv = {"mean": 0.5, "lo": 0.25, "hi": 0.75}
    res.answers = {"nq": {
        "questions": 4, "generator": "g", "max_new_tokens": 32,
        "conditions": {"anchored": {"em": iv, "f1": iv, "acc": iv, "prefill_tokens": 200.0}},
        "abstention": {"anchored": {"questions": 4, "answered": 3, "coverage": 0.75, "em": iv,
                                    "f1": {"mean": 0.6, "lo": 0.3, "hi": 0.9}, "acc": iv,
                                    "f1_all": {"mean": 0.45, "lo": 0.2, "hi": 0.7}, "abstained_answerable": 0,
                                    "abstained_unanswerable": 1, "abstained_correct": 0, "prefill_tokens": 150.0,
                                    "prefill_saved_pct": 25.0}},
    }}
    text = format_answers(BenchResults.from_dict(res.to_dict()))
    assert "pipeline answers \"I don't know\"" in text
    assert "| 75.0 | 60.0 [30.0, 90.0] | 45.0 [20.0, 70.0] | 50.0 [25.0, 75.0] | 0 / 1 | 0 | 150.0 | 25.0 |" in text
    # no peak-RSS column: the growth read 0.0 for every answer (memory the warm-up made resident)
    assert "| Context | EM | F1 | F1 (answerable) | Prefill tokens | TTFT ms |" in text and "RSS" not in text


def test_the_parts_ablation_is_rendered_with_its_interval():
    from chunksel.study.tables import format_generator_ablation

    text = format_generator_ablation(_results())
    assert "| interaction term alone |" in text  # its accuracy row
    assert "| with h, r | interaction term alone | 50 | 65.00 | 63.00 | +2.00 | [-1.00, +5.00] |" in text
    assert "Validation rank-1, averaged over the datasets" in text and "interaction term alone 77.50" in text


def test_transfer_table_leads_with_the_winner_and_its_interval():
    from chunksel.study.tables import format_transfer

    text = format_transfer(_results())
    head, table = text.split("\n\n", 1)
    assert "leads on average (66.00)" in head and "+0.60 points [-2.00, +3.10]" in head
    assert "(reference)" in table and "61.00 [50.0, 70.0]" in table and "+0.60 [-2.00, +3.10]" in table
    assert format_transfer(BenchResults(datasets=["nq"], table1={})) == ""
