"""The zero-shot run's pieces: a row's figures, the comparisons (both tests must agree),
the zero-shot average and the report rendered from results.json."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import TINY_PROTOTYPE, make_toy_instances

from chunksel.selectors import make_selector
from chunksel.study import zeroshot
from chunksel.study.zeroshot_parts import backfill_parts
from chunksel.study.zeroshot_report import write_report


def _row(hits, **extra):
    h = np.asarray(hits, dtype=int)
    return {"hits": h.tolist(), "rank1": 100.0 * h.mean(), "n": len(h), "n_all": len(h), **extra}


def test_evaluate_row_counts_answerable_questions_and_pads_short_lists():
    inst = make_toy_instances(n=10, seed=5)
    r = zeroshot.evaluate_row(make_selector("retrieval"), inst, graded=False)
    labels = [i.labels() for i in inst]
    answerable = [lab for lab in labels if lab.any()]
    assert r["n"] == len(answerable) and r["n_all"] == len(inst)
    assert r["hits"] == [int(lab[0]) for lab in answerable]  # retrieval order's pick is the first
    assert r["rank1"] == pytest.approx(100.0 * np.mean(r["hits"]))


def test_comparisons_need_both_tests_and_name_the_strongest():
    rng = np.random.default_rng(0)
    base = rng.random(400) < 0.5
    better = base.copy()
    better[np.flatnonzero(~base)[:60]] = True  # 60 more hits, no loss: both tests agree
    slight = base.copy()
    slight[np.flatnonzero(~base)[:3]] = True
    rows = {"retrieval": _row(base), "a": _row(better), "b": _row(slight)}
    got = zeroshot._finish(rows)
    assert got["strongest"] == "a"
    assert got["vs_retrieval"]["a"]["significant"] and not got["vs_retrieval"]["b"]["significant"]
    assert got["vs_strongest"]["retrieval"]["diff"] == pytest.approx(-15.0)
    assert got["vs_strongest"]["retrieval"]["n01"] == 60 and got["vs_strongest"]["retrieval"]["n10"] == 0


def test_zero_shot_average_pools_collections_and_held_out_datasets(tmp_path):
    def coll(a, b):
        return {"rows": {"retrieval": _row([1, 0, 0, 1]), "bm25": _row([0, 0, 0, 1]),
                         "lambdamart-base": _row(b), "anchored-base": _row(a)}}

    results = {"collections": {"wikiqa": zeroshot._finish(coll([1, 1, 0, 1], [1, 0, 0, 1])["rows"])},
               "lodo": {"minilm": {"nq": zeroshot._finish({
                   "retrieval": _row([1, 0]), "bm25": _row([0, 0]), "lambdamart (LODO)": _row([1, 0]),
                   "anchored (LODO)": _row([1, 1])})}}}
    nq = results["lodo"]["minilm"]["nq"]
    nq["anchored_vs_lambdamart"] = zeroshot.compare_rows(
        {k: nq["rows"][k] for k in ("anchored (LODO)", "lambdamart (LODO)")}, "lambdamart (LODO)")["anchored (LODO)"]
    avg = zeroshot.zero_shot_average(results)
    assert avg["collections"] == 2
    assert avg["rank1"]["anchored-base"] == pytest.approx((75.0 + 100.0) / 2)
    assert avg["rank1"]["lambdamart-base"] == pytest.approx((50.0 + 50.0) / 2)
    assert avg["anchored_minus_lambdamart_pooled"]["n"] == 6
    assert avg["anchored_minus_lambdamart_pooled"]["diff"] == pytest.approx(100 * 2 / 6)
    results["average"] = avg
    path = write_report(json.loads(json.dumps(results)), tmp_path)
    text = path.read_text()
    assert "## Zero-shot average" in text and "## Each benchmark dataset held out, MiniLM" in text
    assert "| `anchored-base` | 87.50 |" in text
    assert "| nq (n = 2) | 50.00 | 0.00 | 50.00 | 100.00 | +50.00 [" in text


def test_the_wheel_row_reads_the_measured_size(tmp_path):
    import json

    from chunksel.study.zeroshot_report import wheel_row

    assert "not measured" in wheel_row(tmp_path / "absent.json")
    path = tmp_path / "wheel_size.json"
    path.write_text(json.dumps({"mb": 5.36, "bound_mb": 30.0, "commit": "abc1234"}))
    assert wheel_row(path) == ("| the wheel with its pretrained models <= 30 MB | 5.36 MB at abc1234 "
                               "(`benchmarks/wheel_size.py`) | yes |")
    path.write_text(json.dumps({"mb": 31.0, "bound_mb": 30.0, "commit": "abc1234"}))
    assert wheel_row(path).endswith("| no |")


def test_the_generator_flagship_is_a_row_where_its_features_exist(tmp_path):
    """With generator rows (WikiQA and a held-out dataset), the held-out table gains its column
    and its comparison with LambdaMART, and a section pools it against the lean models over
    exactly those collections; without them, neither appears."""
    wq = {"retrieval": _row([1, 0, 0, 1]), "bm25": _row([0, 0, 0, 1]), "lambdamart-base": _row([1, 0, 0, 1]),
          "anchored-base": _row([1, 1, 0, 1]), "anchored, generator": _row([1, 1, 1, 1])}
    held = {"retrieval": _row([1, 0]), "bm25": _row([0, 0]), "lambdamart (LODO)": _row([1, 0]),
            "anchored (LODO)": _row([1, 1]), "anchored, generator (LODO)": _row([0, 0])}
    results = {"collections": {"wikiqa": zeroshot._finish(wq)}, "lodo": {"minilm": {"nq": zeroshot._finish(held)}}}
    text = write_report(json.loads(json.dumps(results)), tmp_path).read_text()
    assert "| nq (n = 2) | 50.00 | 0.00 | 50.00 | 100.00 | 0.00 |" in text
    assert "generator flagship vs LambdaMART |" in text and "| -50.00 [" in text
    assert "## The generator-coupled flagship" in text and "(2 collections" in text
    # pooled over WikiQA's 4 and nq's 2 questions: generator 4 hits, anchored 5, LambdaMART 3
    assert "generator flagship 50.00, `anchored-base` (or its recipe without the dataset) 87.50" in text
    assert "minus `anchored-base` over the 6 pooled questions: -16.67" in text
    assert "minus `lambdamart-base` over the 6 pooled questions: +16.67" in text
    del wq["anchored, generator"], held["anchored, generator (LODO)"]
    results = {"collections": {"wikiqa": zeroshot._finish(wq)}, "lodo": {"minilm": {"nq": zeroshot._finish(held)}}}
    text = write_report(json.loads(json.dumps(results)), tmp_path).read_text()
    assert "## The generator-coupled flagship" not in text and "generator flagship vs LambdaMART" not in text
    assert "with generator features" not in text


def test_the_generator_flagships_cost_comes_from_the_large_reports_table1(tmp_path):
    from chunksel.study.zeroshot_report import generator_cost

    assert "no cost measured here" in generator_cost(tmp_path / "absent.json")
    path = tmp_path / "results.json"
    path.write_text(json.dumps({"git_commit": "abcdef123", "table1": {"anchored": {"p50_ms": 1.2925, "text_p50_ms": 516.5}}}))
    line = generator_cost(path)
    assert "at abcdef1" in line and "p50 1.29 ms with the SmolLM2 warm-up features given" in line
    assert "516 ms from raw text" in line or "517 ms from raw text" in line


def test_an_updated_run_names_the_parts_still_on_earlier_models(tmp_path):
    """``--update`` keeps an earlier run's parts: each keeps the pretrained commit it was
    measured with, and the report names those parts and marks what pools them with newer
    ones (the zero-shot average) as provisional; once every part is re-run, neither shows."""
    def coll():
        return zeroshot._finish({"retrieval": _row([1, 0, 0, 1]), "bm25": _row([0, 0, 0, 1]),
                                 "lambdamart-base": _row([1, 0, 0, 1]), "anchored-base": _row([1, 1, 0, 1])})

    earlier = {"pretrained_commit": "aaaaaaaaaaaa1111", "collections": {"wikiqa": coll(), "arguana/minilm": coll()},
               "lodo": {}}
    backfill_parts(earlier)
    assert earlier["parts"] == {"wikiqa": {"pretrained_commit": "aaaaaaaaaaaa1111", "commit": None},
                                "arguana/minilm": {"pretrained_commit": "aaaaaaaaaaaa1111", "commit": None}}
    # arguana re-run on newer models; wikiqa kept
    earlier["pretrained_commit"] = "bbbbbbbbbbbb2222"
    earlier["parts"]["arguana/minilm"] = {"pretrained_commit": "bbbbbbbbbbbb2222", "commit": "c0ffee"}
    earlier["average"] = zeroshot.zero_shot_average(earlier)
    from chunksel.study.zeroshot_parts import stale_parts

    assert stale_parts(earlier) == {"wikiqa": "aaaaaaaaaaaa1111"}
    text = write_report(json.loads(json.dumps(earlier)), tmp_path).read_text()
    assert "in every part but 1, which still show an earlier run's models (WikiQA" in text
    assert "Not yet re-run: the pretrained models of commit aaaaaaaaaaaa." in text
    assert text.count("Not yet re-run") == 1  # ArguAna's table carries no such line
    assert "**Provisional:** this average pools parts measured on the pretrained models of commit aaaaaaaaaaaa" in text
    assert "(provisional: mixed models)" in text
    earlier["parts"]["wikiqa"] = {"pretrained_commit": "bbbbbbbbbbbb2222", "commit": "c0ffee"}
    text = write_report(json.loads(json.dumps(earlier)), tmp_path).read_text()
    assert "Provisional" not in text and "provisional" not in text and "Not yet re-run" not in text
    assert "Pretrained models of commit bbbbbbbbbbbb (`make pretrained`), computed by" in text


def test_stale_runs_only_the_parts_not_yet_on_the_current_models():
    """``--stale`` resumes: the parts already on the current pretrained models are skipped,
    the rest (an earlier run's, and those an interrupted run never reached) run."""
    from chunksel.study.zeroshot_parts import parts_to_rerun

    rows = zeroshot._finish({"retrieval": _row([1, 0]), "bm25": _row([0, 0])})
    results = {"collections": {"wikiqa": rows, "trec-dl-2019/bm25": rows, "arguana/minilm": rows},
               "lodo": {"minilm": {}, "bm25": {}},
               "parts": {"wikiqa": {"pretrained_commit": "old"}, "trec-dl-2019/bm25": {"pretrained_commit": "new"},
                         "arguana/minilm": {"pretrained_commit": "new"}, "lodo/minilm": {"pretrained_commit": "new"},
                         "lodo/bm25": {"pretrained_commit": "old"}}}
    keys = ["wikiqa", "trec-dl-2019/bm25", "nfcorpus/minilm", "arguana/minilm"]
    assert parts_to_rerun(results, "new", keys, ["minilm", "bm25"]) == (["wikiqa", "nfcorpus/minilm"], ["bm25"])
    assert parts_to_rerun(results, "old", keys, ["minilm"]) == (["trec-dl-2019/bm25", "nfcorpus/minilm",
                                                                 "arguana/minilm"], ["minilm"])
    assert parts_to_rerun({}, "new", keys, ["minilm"]) == (keys, ["minilm"])


def test_scoring_in_chunks_gives_the_whole_batchs_scores(monkeypatch):
    """The zero-shot rows score in chunks of SCORE_CHUNK questions (a progress bar's step):
    the scores, their padding and so every figure are those of one call over all."""
    inst = make_toy_instances(n=23, seed=3)  # the last one has 3 of 5 candidates: padded
    sel = make_selector("prototype", k=5, blocks=("chunk",), **TINY_PROTOTYPE)  # reads chunk embeddings only
    sel.fit([i for i in inst if i.split == "train"], None)
    whole = zeroshot._scores(sel, inst)
    monkeypatch.setattr(zeroshot, "SCORE_CHUNK", 5)
    chunked = zeroshot._scores(sel, inst, progress=True, name="prototype")
    np.testing.assert_allclose(chunked, whole, rtol=1e-6, atol=1e-7)
    assert np.isneginf(whole[-1, 3:]).all() and np.isfinite(whole[:-1]).all()


@pytest.mark.parametrize("argv, message", [
    (["--stale"], "--stale keeps the parts already re-run, so it needs --update"),
    (["--only", "arguana/minilmm"], "unknown collection(s) arguana/minilmm; known: wikiqa,"),
])
def test_the_run_refuses_bad_options_in_one_line(argv, message, capsys):
    with pytest.raises(SystemExit):
        zeroshot.main(argv)
    assert message in capsys.readouterr().err
