"""The semantic-label stage: every row ranked under reference semantic labels that no fit reads."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import make_toy_instances, make_toy_study

from chunksel.errors import DataError
from chunksel.study.profiles import Profile
from chunksel.study.run import run_study

SELECTORS = ["retrieval", "random", "oracle", "lambdamart"]


def _profile(corpus) -> Profile:
    return Profile("tiny", limit=40, seeds=(0, 1), budgets=(), latency_queries=2, ablation_seeds=(),
                   overrides={"lambdamart": {"corpus": str(corpus)}})


def _evidence(inst, j: int) -> int:
    """The toy reference label: the containment positive on even questions, the candidate
    after it on odd ones (so semantic and own labels disagree on half of them)."""
    pos = int(np.argmax(inst.labels()))
    n = int(inst.question.id.rsplit(":", 1)[-1])
    want = pos if n % 2 == 0 else (pos + 1) % len(inst.candidates)
    return int(j == want)


def _write_reference(root, insts, split="test", sample="random"):
    folder = root / "semantic"
    folder.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps({"qid": i.question.id, "pid": c.id, "evidence": "Yes" if _evidence(i, j) else "No",
                         "supports_reference": "No", "sample": sample})
             for i in insts if i.split == split for j, c in enumerate(i.candidates)]
    (folder / "popqa.jsonl").write_text("\n".join(lines) + "\n")
    return folder / "popqa.jsonl"


@pytest.fixture(scope="module")
def toy(tmp_path_factory):
    """The toy study with a reference file for popqa's test questions, run once with it
    (``rep``) and once without (``bare``); the data root is set for the module."""
    tmp = tmp_path_factory.mktemp("semantic")
    data, feats, corpus = make_toy_study(tmp, n=40)
    root = tmp / "data"
    ref = _write_reference(root, data["popqa"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CHUNKSEL_DATA", str(root))
        mp.setenv("CHUNKSEL_CACHE", str(tmp / "cache"))
        rep = run_study(data, SELECTORS, _profile(corpus), feats, tmp / "rep", progress=False)
        labels_after = {src for insts in data.values() for i in insts for c in i.candidates for src in c.labels}
        text = ref.read_text()
        ref.unlink()
        bare = run_study(data, SELECTORS, _profile(corpus), feats, tmp / "bare", progress=False)
        ref.write_text(text)
        yield {"data": data, "root": root, "rep": rep, "bare": bare, "labels_after": labels_after}


def test_stage_ranks_rows_under_reference_labels_from_table1_picks(toy):
    data, out = toy["data"], toy["rep"]
    res = json.loads((out / "results.json").read_text())
    sem = res["semantic"]
    assert list(sem["datasets"]) == ["popqa"]  # msmarco has no reference file here
    test = [i for i in data["popqa"] if i.split == "test"]
    sub = sem["datasets"]["popqa"]["subsets"]["all"]
    assert sub["questions"] == len(test) and sem["datasets"]["popqa"]["labelled"]["test"] == len(test)
    # retrieval order picks the first candidate: hand-computed hit rate under both label sets
    ev = [[_evidence(i, j) for j in range(len(i.candidates))] for i in test]
    ans = [e for e in ev if any(e)]
    assert sub["answerable"]["semantic"] == len(ans)
    assert sub["rows"]["retrieval"]["semantic"]["mean"] == pytest.approx(100 * np.mean([e[0] for e in ans]))
    own = [i.labels() for i in test if i.answerable()]
    assert sub["rows"]["retrieval"]["own"]["mean"] == pytest.approx(100 * np.mean([o[0] for o in own]))
    # the oracle knows the own labels only: perfect under them, right on the even questions alone
    assert sub["rows"]["oracle"]["own"]["mean"] == 100.0
    assert sub["rows"]["oracle"]["semantic"]["mean"] < 100.0
    assert len(sub["rows"]["lambdamart"]["semantic"]["seeds"]) == 2
    # agreement per chunk: the odd questions disagree on two chunks each
    agree = sub["agreement"]["own"]
    assert agree["pairs"] == sum(len(i.candidates) for i in test)
    assert agree["rejected"] == agree["missed"] == sum(1 for i in test if int(i.question.id.rsplit(":", 1)[-1]) % 2)
    # comparisons against the validation-chosen peer carry both tests
    peer = sem["peer"]
    c = sub["vs_peer"]["semantic"]["lambdamart" if peer != "lambdamart" else "retrieval"]
    assert {"diff", "lo", "hi", "p", "significant"} <= set(c)
    assert "semantic" in sem["average"]["all"]["rows"]["retrieval"]
    assert set(sub["abstention"]) >= {"retrieval", "lambdamart"}
    assert 0.0 <= sub["abstention"]["lambdamart"]["auto"]["mean_kept"] <= 5
    report = (out / "report.md").read_text()
    assert "Under semantic evidence labels" in report and "Kendall's tau" in report
    # the per-set lists feed the stage and stay out of the reported abstention figures
    assert "per_set" not in res["abstention"]["popqa"]["lambdamart"]


def test_no_training_path_reads_the_reference_labels(toy):
    """Table 1, significance and abstention are the same with and without the reference
    file, and the stage leaves no reference label on the study's instances."""
    assert not any(src.endswith("@reference") for src in toy["labels_after"])
    with_ref = json.loads((toy["rep"] / "results.json").read_text())
    without = json.loads((toy["bare"] / "results.json").read_text())
    assert without["semantic"] == {} and with_ref["semantic"]
    for key in ("table1", "significance", "abstention", "strongest_baseline", "strongest_per_dataset"):
        a, b = with_ref[key], without[key]
        if key == "table1":  # latency columns are measured, not computed
            a = {n: r["per_dataset"] for n, r in a.items()}
            b = {n: r["per_dataset"] for n, r in b.items()}
        assert a == b, key


def test_report_section_reproduces_from_results_json(toy):
    from chunksel.study.report import render_markdown
    from chunksel.study.results import load_results
    from chunksel.study.semantic_tables import format_semantic, semantic_verdict

    out = toy["rep"]
    again = load_results(out)
    assert format_semantic(again) and format_semantic(again) in (out / "report.md").read_text()
    assert render_markdown(again, {}) == render_markdown(json.loads((out / "results.json").read_text()), {})
    sem = again.semantic
    other = "retrieval" if sem["peer"] == "lambdamart" else "lambdamart"
    v = semantic_verdict(again, other)  # the row against the validation-chosen peer, on the semantic average
    avg = sem["average"]["all"]
    assert v["peer"] == sem["peer"] and v["flagship_average"] == avg["rows"][other]["semantic"]
    assert v["diff"] == pytest.approx(avg["rows"][other]["semantic"] - avg["rows"][sem["peer"]]["semantic"])
    assert v["met"] == (v["diff"] >= 0) and v["lo"] <= v["diff"] <= v["hi"]
    assert semantic_verdict(again, sem["peer"]) is None  # the peer is not compared with itself


def test_fits_refuse_reference_labelled_instances():
    from chunksel.selectors import REGISTRY, make_selector

    data = {"popqa": make_toy_instances(n=20)}
    train = [i for i in data["popqa"] if i.split == "train"]
    for inst in train:
        inst.label_source = "semantic@reference"
    for name in ("retrieval", "lambdamart", "bm25", "ranksvm"):
        assert name in REGISTRY
        with pytest.raises(DataError, match="evaluation only"):
            make_selector(name).fit(train)
    ok = [i for i in data["popqa"] if i.split == "val"]
    with pytest.raises(DataError, match="evaluation only"):  # a reference-labelled validation split too
        make_selector("retrieval").fit([], None, train[:2] + ok)


def test_a_missing_reference_label_is_an_error_never_a_zero(toy):
    inst = next(i for i in toy["data"]["popqa"] if i.split == "train")  # not labelled
    with pytest.raises(DataError, match="no 'semantic@reference' label"):
        inst.labels("semantic@reference")


def test_the_section_names_the_pretrained_rows_and_any_dataset_they_saw(toy):
    """The note under the rank-1 table says which rows are the shipped models, and names a
    dataset where a labelled question was among their training questions."""
    import copy

    from chunksel.study.semantic_tables import format_semantic

    res = copy.deepcopy(json.loads((toy["rep"] / "results.json").read_text()))
    assert "shipped pretrained" not in format_semantic(res)
    res["semantic"]["pretrained"] = ["lambdamart-base"]
    res["semantic"]["datasets"]["popqa"]["pretrained_seen"] = 0
    assert "`lambdamart-base`: the shipped pretrained selectors" in format_semantic(res)
    assert "except on" not in format_semantic(res)
    res["semantic"]["datasets"]["popqa"]["pretrained_seen"] = 2
    assert "except on PopQA (2 seen)" in format_semantic(res)
    res["semantic"]["pretrained"] = ["anchored-base", "lambdamart-base", "lambdamart-lite"]
    assert "`anchored-base`, `lambdamart-base` and `lambdamart-lite`: the shipped" in format_semantic(res)


def test_a_rows_average_interval_does_not_depend_on_the_other_rows():
    """The average's bootstrap draws are shared by every row, so adding a row (the
    pretrained ones, say) leaves the others' intervals as they were."""
    from chunksel.study.semantic import _average

    rng = np.random.default_rng(3)
    diffs = {("popqa", "all"): {"semantic": {n: rng.integers(-1, 2, 30).astype(float) for n in ("a", "b", "c")}},
             ("nq", "all"): {"semantic": {n: rng.integers(-1, 2, 20).astype(float) for n in ("a", "b", "c")}}}
    out = {"peer": "p", "datasets": {ds: {"subsets": {"all": {"rows": {}}}} for ds in ("popqa", "nq")}}
    both = _average(out, diffs, "all", ["a", "b", "c"], seed=0, n_resamples=500)["vs_peer"]["semantic"]
    alone = _average(out, diffs, "all", ["c"], seed=0, n_resamples=500)["vs_peer"]["semantic"]
    assert alone["c"] == both["c"]
