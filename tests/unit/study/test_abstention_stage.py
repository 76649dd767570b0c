"""The abstention stage on toy sets: every test set is measured (answerable or not), the
section renders, the plots are written, and the selector's scores are those of Table 1."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.selectors.test_calibration import _instances, _splits

from chunksel.selectors.simple import OracleSelector, RetrievalSelector
from chunksel.study.abstention import (
    format_abstention,
    plot_abstention,
    run_abstention,
    targets_met,
)


def test_stage_measures_every_test_set_and_renders(tmp_path):
    train, val, test = _splits(_instances())
    assert any(not i.answerable() for i in test) and any(i.answerable() for i in test)
    makers = {"retrieval": RetrievalSelector, "oracle": OracleSelector}
    lines = []
    res = run_abstention({"toy": {"train": train, "val": val, "test": test}}, ["retrieval", "oracle"],
                         lambda n: makers[n](), say=lines.append)
    assert len(lines) == 2 and set(res["toy"]) == {"retrieval", "oracle"}
    r, o = res["toy"]["retrieval"], res["toy"]["oracle"]
    assert r["n_sets"] == len(test) and r["calibrator"]["source"] == "retrieval_score"
    assert 0.5 < r["auroc"] <= 1 and r["auroc_top_score"] > 0.5  # the planted cosine signal
    assert o["auroc"] == 1.0 and o["rank1_answerable"] == 1.0  # the labels themselves
    assert set(targets_met(o)) == {"auroc", "chunk_ece", "abstention", "auto_vs_k2"}
    md = format_abstention(res)
    assert md.count("\n| toy |") == 2 and "Abstain @80%" in md
    pytest.importorskip("matplotlib")
    files = plot_abstention(res, tmp_path)
    assert sorted(p.name for p in files) == ["abstention_reliability.png", "abstention_risk_coverage.png"]
    assert all(p.stat().st_size > 1000 for p in files)
    np.testing.assert_array_equal(RetrievalSelector().fit(train, None, val).score(test),
                                  RetrievalSelector().score(test))


def test_report_carries_the_abstention_section_and_round_trips(tmp_path):
    from chunksel.study.report import render_markdown, write_report
    from chunksel.study.results import BenchResults

    train, val, test = _splits(_instances())
    res = run_abstention({"toy": {"train": train, "val": val, "test": test}}, ["retrieval"],
                         lambda n: RetrievalSelector(), say=lambda m: None)
    results = BenchResults(datasets=["toy"], table1={}, abstention=res)
    again = BenchResults.from_dict(results.to_dict())
    assert again.abstention["toy"]["retrieval"]["auroc"] == res["toy"]["retrieval"]["auroc"]
    md = render_markdown(again)
    assert "## Abstention: calibrated probabilities on every test set" in md and "| toy |" in md
    assert "## Abstention" not in render_markdown(BenchResults(datasets=["toy"], table1={}))
    pytest.importorskip("matplotlib")
    text = write_report(results, tmp_path).read_text()
    assert "(abstention_risk_coverage.png)" in text and (tmp_path / "abstention_reliability.png").is_file()
