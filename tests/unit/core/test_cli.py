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
