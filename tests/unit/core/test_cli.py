from __future__ import annotations

import pytest

from chunksel.cli import main


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_unknown_dataset_is_one_error_line(capsys, data_root):
    code, _, err = _run(capsys, "build", "--dataset", "nope", "--data-root", str(data_root), "--quiet")
    assert code == 2
    assert err.strip().splitlines() == [err.strip()]
    assert err.startswith("error: unknown dataset 'nope'") and "triviaqa" in err


def test_missing_data_root_is_one_error_line(capsys, tmp_path):
    code, _, err = _run(capsys, "build", "--dataset", "popqa", "--data-root", str(tmp_path / "absent"))
    assert code == 2 and "does not exist" in err and "Traceback" not in err


def test_bad_k_and_unknown_selector(capsys, data_root):
    code, _, err = _run(capsys, "build", "--dataset", "popqa", "--k", "0", "--data-root", str(data_root))
    assert code == 2 and "--k must be >= 1" in err
    code, _, err = _run(capsys, "bench", "--selectors", "nope", "--data-root", str(data_root))
    assert code == 2 and "unknown selector 'nope'" in err


def test_select_rejects_an_empty_question(capsys, tmp_path, toy_instances):
    pytest.importorskip("torch")
    import numpy as np

    from chunksel.features.base import InMemoryFeatures
    from chunksel.selectors import make_selector

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = make_selector("prototype", hidden=8, max_epochs=2, patience=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"], feats)
    sel.save(tmp_path / "m")
    code, _, err = _run(capsys, "select", "--model", str(tmp_path / "m"), "--question", "  ", "--chunk", "x")
    assert code == 2 and "empty question" in err


def test_export_writes_a_runnable_onnx_graph(capsys, tmp_path, toy_instances):
    pytest.importorskip("onnxruntime")
    import numpy as np

    from chunksel.export.prototype import OnnxPrototype
    from chunksel.features.base import InMemoryFeatures
    from chunksel.selectors import make_selector

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = make_selector("prototype", blocks="chunk", hidden=8, max_epochs=2, patience=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"], feats)
    sel.save(tmp_path / "m")
    code, out, _ = _run(capsys, "export", "--model", str(tmp_path / "m"), "--out", str(tmp_path / "m.onnx"))
    assert code == 0 and "inputs: e" in out
    runner = OnnxPrototype(tmp_path / "m.onnx")
    e = np.stack([[c.embedding for c in i.candidates[:5]] for i in toy_instances[:2]])
    np.testing.assert_allclose(runner(None, None, e)[0], sel.score(toy_instances[:2], feats), rtol=1e-4, atol=1e-5)
    ret = make_selector("retrieval")
    ret.fit([], None)
    ret.save(tmp_path / "r")
    code, _, err = _run(capsys, "export", "--model", str(tmp_path / "r"), "--out", str(tmp_path / "r.onnx"))
    assert code == 2 and "export needs a prototype" in err


@pytest.fixture
def no_loading(monkeypatch):
    """Any model load or instance build fails the test: settings errors must come first."""

    def refuse(*_a, **_k):
        raise AssertionError("a model was loaded (or instances built) before the settings were checked")

    import chunksel.build
    import chunksel.llm.models
    import chunksel.pipeline.chunk_selector
    import chunksel.selectors
    import chunksel.selectors.base

    monkeypatch.setattr(chunksel.llm.models, "load_generator", refuse)
    monkeypatch.setattr(chunksel.build, "build_instances", refuse)
    monkeypatch.setattr(chunksel.pipeline.chunk_selector.ChunkSelector, "load", classmethod(refuse))
    monkeypatch.setattr(chunksel.selectors.base.Selector, "load", classmethod(refuse))
    monkeypatch.setattr(chunksel.selectors.base, "load_selector", refuse)
    monkeypatch.setattr(chunksel.selectors, "load_selector", refuse)


def _one_line(code, err, *needles):
    assert code == 2, err
    assert "Traceback" not in err and err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    for needle in needles:
        assert needle in err, err


def test_select_chunks_file_missing_or_not_utf8(capsys, tmp_path, no_loading):
    code, _, err = _run(capsys, "select", "--model", str(tmp_path), "--question", "q?",
                        "--chunks-file", str(tmp_path / "absent.txt"))
    _one_line(code, err, "absent.txt", "not found")
    (tmp_path / "c.txt").write_bytes(b"one\ntwo caf\xe9\n")
    code, _, err = _run(capsys, "select", "--model", str(tmp_path), "--question", "q?",
                        "--chunks-file", str(tmp_path / "c.txt"))
    _one_line(code, err, "c.txt:2", "not UTF-8")


def test_build_input_not_utf8_names_file_and_line(capsys, tmp_path):
    (tmp_path / "in.jsonl").write_bytes(b'{"id": "a", "question": "caf\xe9?", "ctxs": []}\n')
    code, _, err = _run(capsys, "build", "--dataset", "mine", "--input", str(tmp_path / "in.jsonl"), "--quiet")
    _one_line(code, err, "in.jsonl:1", "not UTF-8")


@pytest.mark.parametrize(
    ("param", "needles"),
    [
        ("bogus=1", ("--param: unknown parameter 'bogus' for selector 'prototype'", "known: k,")),
        ("max_epochs=lots", ("parameter 'max_epochs'", "expects an integer, got 'lots'")),
        ("tau=-1", ("'tau' of selector 'prototype' must be a finite number > 0, got -1",)),
        ("max_epochs=-5", ("'max_epochs' of selector 'prototype' must be a whole number >= 1, got -5",)),
        ("lr=nan", ("'lr' of selector 'prototype' must be a finite number > 0, got nan",)),
        ("batch_size=0", ("'batch_size'", ">= 1, got 0")),
        ("dropout=2", ("'dropout'", "in [0, 1), got 2")),
        ("blocks=hs+nope", ("blocks must be a non-empty subset",)),
        ("noequals", ("--param expects KEY=VALUE",)),
    ],
)
def test_train_checks_params_before_building_or_loading(capsys, tmp_path, no_loading, param, needles):
    code, _, err = _run(capsys, "train", "--dataset", "popqa", "--selector", "prototype",
                        "--out", str(tmp_path / "m"), "--param", param)
    _one_line(code, err, *needles)


def test_train_refuses_a_file_as_out(capsys, tmp_path, no_loading):
    (tmp_path / "f").write_text("x")
    code, _, err = _run(capsys, "train", "--dataset", "popqa", "--selector", "random", "--out", str(tmp_path / "f"))
    _one_line(code, err, "is a file")


@pytest.mark.parametrize(
    ("argv", "needles"),
    [
        (["build", "--dataset", "popqa", "--threads", "-2"], ("--threads must be >= 1, got -2",)),
        (["build", "--dataset", "popqa", "--threads", "0"], ("--threads must be >= 1, got 0", "no limit")),
        (["build", "--dataset", "popqa", "--limit", "0"], ("--limit must be >= 1, got 0",)),
        (["bench", "--jobs", "0"], ("--jobs must be >= 1, got 0",)),
        (["features", "--dataset", "popqa", "--batch-size", "0"], ("--batch-size must be >= 1",)),
        (["build", "--dataset", "popqa", "--seed", "-1"], ("--seed must be in [0, 2**32 - 1], got -1",)),
        (["select", "--model", "m", "--question", "q?", "--chunk", "a", "--top", "0"], ("--top must be >= 1, got 0",)),
        (["select", "--model", "m", "--question", "q?", "--chunk", "a", "--top", "-3"], ("--top must be >= 1",)),
        (["select", "--model", "m", "--question", "q?"], ("no candidate chunks", "--chunks-file")),
        (["select", "--model", "m", "--question", " ", "--chunk", "a"], ("empty question",)),
        (["select", "--model", "/nowhere/model", "--question", "q?", "--chunk", "a"],
         ("/nowhere/model is not a saved selector: the directory does not exist",)),
        (["select", "--model", "anchored-bass", "--question", "q?", "--chunk", "a"],
         ("anchored-bass is not a saved selector", "did you mean the pretrained 'anchored-base'?",
          "(shipped pretrained selectors: anchored-base, lambdamart-base, anchored-lite, lambdamart-lite)")),
    ],
)
def test_impossible_settings_fail_before_any_model_loads(capsys, no_loading, argv, needles):
    code, _, err = _run(capsys, *argv)
    _one_line(code, err, *needles)


def test_select_refuses_prototype_options_for_another_selector_before_loading(capsys, tmp_path, no_loading):
    from chunksel.selectors.simple import RandomSelector

    RandomSelector().save(tmp_path / "r")
    code, _, err = _run(capsys, "select", "--model", str(tmp_path / "r"), "--question", "q?", "--chunk", "a",
                        "--quantize", "int8")
    _one_line(code, err, "holds a 'random' selector", "apply to a prototype selector")


def test_select_works_with_any_saved_selector(capsys, tmp_path):
    """select is no longer prototype-only: a saved retrieval selector picks the first chunks."""
    import json as _json

    from chunksel.selectors.simple import RetrievalSelector

    RetrievalSelector().save(tmp_path / "r")
    code, out, err = _run(capsys, "select", "--model", str(tmp_path / "r"), "--question", "q?",
                          "--chunk", "a", "--chunk", "b", "--chunk", "c", "--top", "5")
    assert code == 0, err
    res = _json.loads(out)
    assert res["indices"] == [0, 1, 2] and res["selector"] == "retrieval"
    assert [c["rank"] for c in res["selected"]] == [1, 2, 3]


@pytest.mark.parametrize(
    ("model", "needles"),
    [
        ("{tmp}/missing", ("--model '{tmp}/missing': the directory does not exist",)),
        ("./gone", ("the directory does not exist",)),
        ("nope", ("neither a saved selector directory", "a pretrained selector (anchored-base, lambdamart-base, anchored-lite, lambdamart-lite)",
                  "known: anchored, anchored-ce, bm25")),
        ("knrm", ("selector 'knrm' must be trained first", "chunksel train --selector knrm")),
        ("{tmp}", ("is not a saved selector (no config.json)",)),
    ],
)
def test_eval_model_that_is_not_a_saved_selector(capsys, tmp_path, monkeypatch, model, needles):
    import chunksel.build

    def refuse(*_a, **_k):
        raise AssertionError("instances were built before --model was checked")

    monkeypatch.setattr(chunksel.build, "build_instances", refuse)
    code, _, err = _run(capsys, "eval", "--dataset", "popqa", "--model", model.format(tmp=tmp_path))
    _one_line(code, err, *(n.format(tmp=tmp_path) for n in needles))


def test_select_prints_valid_json_when_top_exceeds_k(capsys, tmp_path, monkeypatch, toy_instances):
    """--top larger than the model's K: chunks past K get null scores and a warning line."""
    pytest.importorskip("torch")
    import json as _json

    import numpy as np
    from tests.doubles import FakeEncoder  # 8-dim unit vectors, like the toy instances' embeddings

    from chunksel.features.base import InMemoryFeatures
    from chunksel.pipeline.chunk_selector import ChunkSelector
    from chunksel.selectors import make_selector

    ids = [i.id for i in toy_instances]
    feats = InMemoryFeatures(ids, h=np.ones((len(ids), 3)), r=np.ones((len(ids), 2)))
    sel = make_selector("prototype", k=3, hidden=8, max_epochs=2, patience=1, progress=False)
    sel.fit([i for i in toy_instances if i.split == "train"], feats)
    sel.save(tmp_path / "m")

    class FakeWarmUp:
        h, r = np.ones(3, dtype=np.float32), np.ones(2, dtype=np.float32)

    monkeypatch.setattr(ChunkSelector, "encoder", property(lambda self: FakeEncoder()))
    monkeypatch.setattr(ChunkSelector, "generator", lambda self: (None, None, ""))
    monkeypatch.setattr(ChunkSelector, "warm_up", lambda self, q: FakeWarmUp())
    chunks = [f"chunk {i}" for i in range(5)]
    argv = ["select", "--model", str(tmp_path / "m"), "--question", "q?", "--top", "4"]
    code, out, err = _run(capsys, *argv, *sum((["--chunk", c] for c in chunks), []))
    assert code == 0, err
    assert "-Infinity" not in out and "NaN" not in out
    res = _json.loads(out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert res["all_scores"][3:] == [None, None] and all(isinstance(s, float) for s in res["all_scores"][:3])
    assert sorted(res["indices"]) == [0, 1, 2] and len(res["scores"]) == 3  # only scored chunks are picked
    assert err.strip() == ("warning: only the first 3 of 5 chunks were scored (the model's K=3); "
                           "the rest have null scores and cannot be selected")


def test_select_reads_chunks_from_a_pipe(capsys):
    """``--chunks-file <(...)``: the shell passes /dev/fd/N, a pipe, not a regular file; with
    a selector that needs no training named by ``--model`` (nothing loads)."""
    import json
    import os

    read_end, write_end = os.pipe()
    os.write(write_end, b"first chunk\nsecond chunk\n")
    os.close(write_end)
    try:
        code, out, err = _run(capsys, "select", "--model", "retrieval", "--question", "q?",
                              "--chunks-file", f"/dev/fd/{read_end}", "--top", "2")
    finally:
        os.close(read_end)
    assert code == 0, err
    got = json.loads(out)
    assert [c["text"] for c in got["selected"]] == ["first chunk", "second chunk"]
