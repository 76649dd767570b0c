"""The abstention stage on toy sets: every test set is measured (answerable or not), the
section renders, the plots are written, and the selector's scores are those of Table 1."""

from __future__ import annotations

import numpy as np
import pytest
from tests.unit.selectors.test_calibration import _instances, _splits

from chunksel.eval.abstention import format_abstention, plot_abstention, run_abstention, targets_met
from chunksel.selectors.simple import OracleSelector, RetrievalSelector


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
    assert sorted(p.name for p in files) == ["abstention_toy_reliability.png", "abstention_toy_risk_coverage.png"]
    assert all(p.stat().st_size > 1000 for p in files)
    np.testing.assert_array_equal(RetrievalSelector().fit(train, None, val).score(test),
                                  RetrievalSelector().score(test))
