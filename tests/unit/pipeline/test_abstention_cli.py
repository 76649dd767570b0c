"""``chunksel select --top auto / --threshold / --min-p``: the CLI prints the same
selection as the Python API, including an empty one, and refuses bad values in one line."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from tests.doubles import FakeEncoder  # noqa: E402
from tests.unit.pipeline.test_abstention_api import calibrated  # noqa: E402,F401

from chunksel.cli import main  # noqa: E402


def _run(capsys, *argv):
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def fake_encoder(monkeypatch):
    from chunksel.pipeline.chunk_selector import ChunkSelector

    enc = FakeEncoder()
    monkeypatch.setattr(ChunkSelector, "encoder", property(lambda self: enc))
    return enc


def test_top_auto_prints_what_the_api_gives_even_an_empty_selection(capsys, calibrated, fake_encoder):  # noqa: F811
    from chunksel import ChunkSelector

    cs = ChunkSelector.load(calibrated / "cal")
    # chunk sets (deterministic fake vectors per text) until one where k="auto" keeps nothing
    sets = [[f"passage {n} {j}" for j in range(3)] for n in range(40)]
    empty = next((s for s in sets if cs.select("who?", s, k="auto").abstained), None)
    kept = next((s for s in sets if cs.select("who?", s, k="auto").selected), None)
    assert empty is not None and kept is not None
    for chunks in (empty, kept):
        code, out, err = _run(capsys, "select", "--model", str(calibrated / "cal"), "--question", "who?",
                              "--top", "auto", *[a for c in chunks for a in ("--chunk", c)])
        assert code == 0, err
        got, want = json.loads(out), cs.select("who?", chunks, k="auto")
        assert got["indices"] == want.indices and got["abstained"] == want.abstained
        assert got["probabilities"] == pytest.approx(want.probabilities)
    code, out, err = _run(capsys, "select", "--model", str(calibrated / "cal"), "--question", "who?",
                          "--top", "3", "--min-p", "1.0", *[a for c in kept for a in ("--chunk", c)])
    res = json.loads(out)
    assert code == 0 and res["selected"] == [] and res["abstained"] is True


def test_bad_values_are_one_error_line(capsys, calibrated, fake_encoder):  # noqa: F811
    base = ["select", "--question", "q?", "--chunk", "a"]
    code, _, err = _run(capsys, *base, "--model", str(calibrated / "cal"), "--threshold", "2")
    assert code == 2 and "threshold must be a probability in [0, 1]" in err and len(err.strip().splitlines()) == 1
    code, _, err = _run(capsys, *base, "--model", str(calibrated / "plain"), "--top", "auto")
    assert code == 2 and "no calibrator" in err and len(err.strip().splitlines()) == 1
    with pytest.raises(SystemExit):
        main([*base, "--model", str(calibrated / "cal"), "--top", "many"])
    assert "expected a whole number or auto" in capsys.readouterr().err
