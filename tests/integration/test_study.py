"""The benchmark harness end to end on a tiny fixture: two datasets, real selectors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import make_toy_instances, make_toy_study

from chunksel.features.base import InMemoryFeatures
from chunksel.study.profiles import Profile
from chunksel.study.run import run_study


def test_harness_end_to_end(tmp_path):
    data, feats, corpus = make_toy_study(tmp_path, n=40)
    prof = Profile(
        "tiny", limit=40, seeds=(0, 1), budgets=(50, 100), latency_queries=3,
        curve_datasets=("popqa",), curve_sizes=(4, None), answer_datasets=("popqa",), answer_sample=2,
        llm_datasets=("popqa",), llm_sample=2,
        overrides={"prototype": {"hidden": 16, "max_epochs": 5, "patience": 2, "batch_size": 8},
                   "anchored": {"hidden": 8, "phi_hidden": 8, "max_epochs": 3, "batch_size": 8,
                                "corpus": str(corpus)}},
    )
    out = run_study(data, ["retrieval", "oracle", "prototype", "anchored"], prof, feats, tmp_path / "rep",
                    progress=False)

    results = json.loads((out / "results.json").read_text())
    assert results["datasets"] == ["popqa", "msmarco"]
    from chunksel.study.memo import code_fingerprint

    assert results["config"]["study_code"] == code_fingerprint()
    assert f"study code: `{code_fingerprint()}`" in (out / "report.md").read_text()
    t1 = results["table1"]
    assert set(t1) == {"retrieval", "oracle", "prototype", "anchored"}
    assert len(t1["anchored"]["per_dataset"]["popqa"]["val_seeds"]) == 2
    ga = results["generator_ablation"]
    assert set(ga["variants"]) == {"with h, r", "without h, r", "interaction term alone"}
    assert set(ga["delta"]) == {"popqa", "msmarco"} and set(ga["parts"]["interaction term alone"]) == {"popqa", "msmarco"}
    assert ga["variants"]["interaction term alone"]["blocks"] == ["letor", "lambdamart"]
    # the with-h,r variant is Table 1's anchored row, seed for seed
    assert ga["variants"]["with h, r"]["per_dataset"]["popqa"]["seeds"] == t1["anchored"]["per_dataset"]["popqa"]["seeds"]
    curve = results["learning_curve"]["popqa"]
    assert set(curve["per_selector"]) == {"prototype", "anchored"} and curve["sizes"][0] == 4
    # the oracle is perfect on answerable instances; retrieval order is not
    assert t1["oracle"]["per_dataset"]["popqa"]["seeds"] == [100.0]
    assert len(t1["prototype"]["per_dataset"]["msmarco"]["seeds"]) == 2
    assert t1["prototype"]["params"] > 0 and t1["prototype"]["p50_ms"] > 0
    assert set(results["table2"]) >= {"HS", "Chunk", "HS+RW+Chunk"}
    assert set(results["table3"]) == {"50", "100"}
    assert results["strongest_baseline"] == "retrieval"
    assert set(results["significance"]) == {"popqa", "msmarco"}
    pairs = [(e["a"], e["b"]) for e in results["significance"]["popqa"]]
    assert pairs == [("anchored", "retrieval"), ("prototype", "retrieval")]
    assert {"prototype", "anchored"} <= set(results["pooled"])
    # Table 4: the real generator answers from each selector's pick on a 2-question sample
    answers = results["answers"]["popqa"]
    assert answers["questions"] == 2 and results["results_version"] == 2
    assert {"no_context", "top5", "retrieval", "oracle", "prototype", "anchored"} <= set(answers["conditions"])
    assert answers["conditions"]["top5"]["chunks"] == 5.0 and answers["conditions"]["anchored"]["chunks"] == 1.0
    assert answers["conditions"]["no_context"]["prefill_tokens"] == 1.0
    # picks that coincide share one generation: at most no-context + top-5 + 5 single chunks per question
    assert answers["cache"]["pairs"] <= 2 * 8
    # Table 5: the LLM selectors (real SmolLM2) on the same 2 questions, beside Table 1's picks
    llm = results["llm"]["popqa"]
    assert llm["questions"] == 2 and {"rankgpt", "utility", "retrieval", "anchored"} <= set(llm["rows"])
    assert set(llm["cost"]) == {"rankgpt", "utility"} and llm["cost"]["rankgpt"]["calls_per_query"] >= 1
    assert sum(llm["cost"]["utility"]["k_distribution"].values()) == 2
    assert {"rankgpt", "utility"} <= set(answers["conditions"])  # Table 4 covers their picks too
    report = (out / "report.md").read_text()
    assert "Table 5: LLM selectors" in report
    assert "Table 1" in report and "PopQA" in report and "Anchored prototype" in report
    assert "Learning curves" in report and "What the flagship's parts add" in report
    assert "Table 4: answers generated" in report and "![answers](answer_f1_vs_prefill.png)" in report
    assert any(p.suffix == ".png" for p in out.iterdir())
    # the abstention stage: every non-LLM selector's calibrated probabilities on every test set
    ab = results["abstention"]["popqa"]
    assert set(ab) == {"retrieval", "oracle", "prototype", "anchored"}
    assert ab["anchored"]["n_sets"] == len([i for i in data["popqa"] if i.split == "test"])
    assert "## Abstention: calibrated probabilities" in report
    assert "![abstention_reliability](abstention_reliability.png)" in report
    # the report re-renders from results.json alone (typed results round trip)
    from chunksel.study.format import PLOT_FILES
    from chunksel.study.report import render_markdown
    from chunksel.study.results import load_results

    plots = {k: v for k, v in PLOT_FILES.items() if (out / v).exists()}
    assert render_markdown(load_results(out), plots) == report


def test_warm_rerun_reuses_memoised_results(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    data = {"popqa": make_toy_instances(n=30, seed=3)}
    ids = [i.question.id for i in data["popqa"]]
    rng = np.random.default_rng(0)
    feats = InMemoryFeatures(ids, h=rng.normal(size=(len(ids), 6)), r=rng.random((len(ids), 4)))
    prof = Profile(
        "tiny", limit=30, seeds=(0,), budgets=(50, 100), latency_queries=2,
        overrides={"prototype": {"hidden": 16, "max_epochs": 3, "patience": 2, "batch_size": 8}},
    )
    sels = ["retrieval", "prototype"]
    first = json.loads((run_study(data, sels, prof, feats, tmp_path / "a", progress=False, reuse=True)
                        / "results.json").read_text())
    second = json.loads((run_study(data, sels, prof, feats, tmp_path / "b", progress=False, reuse=True)
                         / "results.json").read_text())
    assert first["reused_results"] == 0
    # Table 1 (2 selectors), 7 ablations, the budget curve: all reused
    assert second["reused_results"] == 2 + 7 + 1
    for table in ("table1", "table2", "table3", "significance"):
        assert second[table] == first[table]
    # a changed label is a different experiment: everything on that dataset retrains
    data["popqa"][0].candidates[0].labels["containment"] = 1 - data["popqa"][0].candidates[0].labels.get(
        "containment", 0)
    third = json.loads((run_study(data, sels, prof, feats, tmp_path / "c", progress=False, reuse=True)
                        / "results.json").read_text())
    assert third["reused_results"] == 0
    # reuse off never reads the memo
    off = json.loads((run_study(data, sels, prof, feats, tmp_path / "d", progress=False, reuse=False)
                      / "results.json").read_text())
    assert off["reused_results"] == 0


def test_memo_is_per_dataset(tmp_path, monkeypatch):
    """A study over two datasets reuses a one-dataset study's results for that dataset (so
    the full profile can run as two processes and then as a whole), and a changed feature
    of one dataset retrains that dataset only."""
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    data = {"popqa": make_toy_instances(n=30, seed=3), "msmarco": make_toy_instances(n=30, seed=4)}
    for ds, insts in data.items():
        for inst in insts:
            inst.question.id = f"{ds}:{inst.question.id}"
    ids = [i.question.id for insts in data.values() for i in insts]
    rng = np.random.default_rng(0)
    h, r = rng.normal(size=(len(ids), 6)), rng.random((len(ids), 4))
    prof = Profile("tiny", limit=30, seeds=(0,), budgets=(), ablation_seeds=(), latency_queries=2,
                   overrides={"prototype": {"hidden": 16, "max_epochs": 3, "patience": 2, "batch_size": 8}})
    sels = ["retrieval", "prototype"]

    def run(datasets, feats, name):
        return json.loads((run_study({ds: data[ds] for ds in datasets}, sels, prof, feats, tmp_path / name,
                                     progress=False, reuse=True) / "results.json").read_text())

    only = run(["popqa"], InMemoryFeatures(ids[:30], h=h[:30], r=r[:30]), "one")
    both = run(["popqa", "msmarco"], InMemoryFeatures(ids, h=h, r=r), "two")
    assert only["reused_results"] == 0
    assert both["reused_results"] == 2  # popqa's Table 1 rows; msmarco and pooled are new
    assert both["table1"]["prototype"]["per_dataset"]["popqa"] == only["table1"]["prototype"]["per_dataset"]["popqa"]
    h2 = h.copy()
    h2[40] += 1.0  # one msmarco question's feature changes
    again = run(["popqa", "msmarco"], InMemoryFeatures(ids, h=h2, r=r), "three")
    assert again["reused_results"] == 2  # popqa's rows again; msmarco's retrain


def test_worker_parts_skip_pooling_and_failures_name_their_log(tmp_path, monkeypatch):
    """A worker of ``bench --jobs N`` runs the per-dataset stages only (the parent pools);
    a failing worker stops the bench with an error naming its log."""
    import pytest

    from chunksel.errors import ChunkselError
    from chunksel.study.run import _run_parts

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    data = {"popqa": make_toy_instances(n=24, seed=5), "msmarco": make_toy_instances(n=24, seed=6)}
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("id\ttext\ttitle\tsource\n" + "".join(
        f"{c.id}\t{c.text}\t{c.title}\ttoy\n" for insts in data.values() for i in insts for c in i.candidates))
    prof = Profile("tiny", limit=24, seeds=(0, 1), budgets=(), ablation_seeds=(), latency_queries=2,
                   overrides={"lambdamart": {"corpus": str(corpus)}})
    sels = ["retrieval", "lambdamart"]
    whole = json.loads((run_study(data, sels, prof, None, tmp_path / "w", progress=False, reuse=True)
                        / "results.json").read_text())
    assert "lambdamart" in whole["pooled"]
    # a worker over msmarco alone, in a study whose first dataset is popqa: its memo keys
    # are the whole study's (the cost columns belong to popqa), so it reuses every fit
    part = json.loads((run_study({"msmarco": data["msmarco"]}, sels, prof, None, tmp_path / "p", progress=False,
                                 reuse=True, part_of="popqa") / "results.json").read_text())
    assert part["pooled"] == {} and part["reused_results"] == 3  # retrieval (1 seed), lambdamart (2 seeds)
    for name in sels:
        assert part["table1"][name]["per_dataset"]["msmarco"] == whole["table1"][name]["per_dataset"]["msmarco"]
    with pytest.raises(ChunkselError, match=r"part 0 \(see .*part-0\.log\), part 1 \(see .*part-1\.log\)"):
        _run_parts("quick", ["no-such-a", "no-such-b"], ["retrieval"], tmp_path / "out", 0, 2, 1)
    assert "no-such-b" in (tmp_path / "out" / "parts" / "part-1.log").read_text()


def test_leave_one_dataset_out_never_trains_on_the_held_out_dataset(tmp_path, monkeypatch):
    """The transfer stage fits each row on the other datasets' training and validation
    splits only, tests on the held-out one's test split, and reports it."""
    from chunksel.selectors.ltr import LambdaMARTSelector
    from chunksel.study.transfer import lodo_pools

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    names = ("popqa", "msmarco", "nq")
    data = {ds: make_toy_instances(n=30, seed=10 + j) for j, ds in enumerate(names)}
    for ds, insts in data.items():
        for inst in insts:
            inst.question.id = f"{ds}:{inst.question.id}"
            inst.question.dataset = ds
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("id\ttext\ttitle\tsource\n" + "".join(
        f"{c.id}\t{c.text}\t{c.title}\ttoy\n" for insts in data.values() for i in insts for c in i.candidates))
    seen: list[tuple[frozenset, frozenset]] = []
    real_fit = LambdaMARTSelector.fit

    def recording_fit(self, train, features=None, val=None):
        seen.append((frozenset(i.id.split(":")[0] for i in train), frozenset(i.id.split(":")[0] for i in val or [])))
        return real_fit(self, train, features, val)

    monkeypatch.setattr(LambdaMARTSelector, "fit", recording_fit)
    prof = Profile("tiny", limit=30, seeds=(0,), budgets=(), ablation_seeds=(), latency_queries=2,
                   overrides={"lambdamart": {"corpus": str(corpus)}}, transfer=True)
    wiki = make_toy_instances(n=20, seed=20)
    for inst in wiki:
        inst.question.id = f"wikiqa:{inst.question.id}"
        inst.question.dataset = "wikiqa"
    out = run_study(data, ["retrieval", "lambdamart"], prof, None, tmp_path / "t", progress=False, reuse=True,
                    never_trained={"wikiqa": wiki})
    results = json.loads((out / "results.json").read_text())

    lodo = [(tr, va) for tr, va in seen if len(tr) == 2]  # Table 1 fits see one dataset, pooled all three
    assert sorted(tuple(sorted(set(names) - tr)) for tr, _ in lodo) == [("msmarco",), ("nq",), ("popqa",)]
    assert all(va == tr for tr, va in lodo)
    assert not any("wikiqa" in tr or "wikiqa" in va for tr, va in seen)  # never trained on, never validated on
    assert sum(tr == set(names) for tr, _ in seen) == 2  # the pooled stage and WikiQA's transfer fit
    tr = results["transfer"]
    assert set(tr) == {"retrieval", "lambdamart"} and set(tr["lambdamart"]["held_out"]) == {*names, "wikiqa"}
    assert tr["lambdamart"]["never_trained"] == ["wikiqa"] and set(tr["retrieval"]["diff"]) == {*names, "wikiqa"}
    assert tr["lambdamart"]["vs_reference"] is None and tr["retrieval"]["reference"] == "lambdamart"
    # retrieval order needs no training: held out, it scores as in Table 1
    for ds in names:
        assert tr["retrieval"]["held_out"][ds] == results["table1"]["retrieval"]["per_dataset"][ds]["mean"]
        lo, hi = tr["lambdamart"]["ci"][ds]
        assert lo <= tr["lambdamart"]["held_out"][ds] <= hi
    report = (out / "report.md").read_text()
    assert "## Transfer: leave one dataset out" in report and "(never trained on)" in report
    splits = {ds: {sp: [i for i in data[ds] if i.split == sp] for sp in ("train", "val", "test")} for ds in names}
    train, val = lodo_pools(splits, "nq")
    assert train and not any(i.id.startswith("nq:") for i in train + val)


def test_given_candidates_are_ranked_as_a_retriever_hands_them_over():
    from chunksel.study.transfer import retriever_ranked

    insts = make_toy_instances(n=6, k=5, seed=3)
    ranked = retriever_ranked(insts, k=3)
    for before, after in zip(insts, ranked, strict=True):
        q = before.question.embedding
        cos = sorted((float(q @ c.embedding) for c in before.candidates), reverse=True)[:3]
        assert [c.score for c in after.candidates] == pytest.approx(cos)
        assert [c.rank for c in after.candidates] == [0, 1, 2]
        assert {c.id for c in after.candidates} <= {c.id for c in before.candidates}
        assert after.split == before.split and after.label_source == before.label_source
    assert len(insts[0].candidates) == 5  # the input is left as it was


_IMPORTS_SCRIPT = r'''
import json, sys
from pathlib import Path
from tests.conftest import make_toy_study
import chunksel.cli  # a bench worker's command line (python -m chunksel.cli bench --part)
from chunksel.study.profiles import Profile
from chunksel.study.run import run_study

tmp = Path(sys.argv[1])
data, feats, corpus = make_toy_study(tmp, n=15)
prof = Profile("tiny", limit=15, seeds=(0,), budgets=(), ablation_seeds=(), latency_queries=2,
               overrides={"lambdamart": {"corpus": str(corpus)}, "bm25": {"corpus": str(corpus)},
                          "crossencoder": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4},
                          "prototype": {"hidden": 16, "max_epochs": 2, "batch_size": 8},
                          "anchored": {"hidden": 8, "phi_hidden": 8, "max_epochs": 2, "batch_size": 8,
                                       "corpus": str(corpus), "engine": "onnxruntime"}})
run_study(data, ["retrieval", "bm25", "lambdamart", "crossencoder", "prototype", "anchored", "anchored-ce"],
          prof, feats, tmp / "rep", progress=False, reuse=True)
print(json.dumps(sorted(m for m in sys.modules if m == "chunksel" or m.startswith("chunksel."))))
'''


def test_a_study_imports_none_of_the_code_its_memo_fingerprint_leaves_out(tmp_path):
    """The memo's code fingerprint leaves out the serving and bulk-job modules: a study with
    every kind of trained row (per-dataset, pooled, stacked, exported to ONNX Runtime) and a
    bench worker's command line import none of them, and each left-out entry names a file."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    import chunksel
    from chunksel.study.memo import NOT_STUDY, code_fingerprint, study_sources

    root = Path(chunksel.__file__).parent
    every = [f.relative_to(root).as_posix() for f in root.rglob("*.py")]
    assert all(any(f.startswith(prefix) for f in every) for prefix in NOT_STUDY)
    assert len(study_sources()) == sum(not f.startswith(NOT_STUDY) for f in every) and code_fingerprint()
    env = {**os.environ, "CHUNKSEL_CACHE": str(tmp_path / "cache"), "PYTHONPATH": str(Path.cwd())}
    done = subprocess.run([sys.executable, "-c", _IMPORTS_SCRIPT, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=600, cwd=Path.cwd())
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert "chunksel.study.memo" in loaded and "chunksel.selectors.crossencoder" in loaded
    paths = []
    for mod in loaded:
        rel = mod.split(".", 1)[1].replace(".", "/") if "." in mod else ""
        paths.append(rel + "/__init__.py" if (root / rel).is_dir() else rel + ".py")
    assert not [p for p in paths if p.startswith(NOT_STUDY)]
