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

    from chunksel.features.base import InMemoryFeatures
    from chunksel.pipeline.onnx_export import OnnxPrototype
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
    assert code == 2 and "needs a prototype selector" in err


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
        ("tau=-1", ("tau must be > 0",)),
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
