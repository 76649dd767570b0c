"""Late-interaction columns (MaxSim over the real all-MiniLM-L6-v2 token vectors) in the
LETOR rankers: their values, the score cache they resume from, and saved models."""

from __future__ import annotations

import numpy as np
import pytest

from chunksel.errors import DataError
from chunksel.selectors import load_selector, make_selector
from chunksel.selectors.late_features import LATE_NAMES, late_features, maxsim_scores
from chunksel.selectors.letor import FEATURE_NAMES
from chunksel.types import Candidate, Instance, Question

pytestmark = pytest.mark.model

FACTS = [
    ("Who wrote Hamlet?", "Hamlet is a tragedy written by William Shakespeare.", "The Globe Theatre was built in 1599."),
    ("What is the capital of Australia?", "Canberra is the capital city of Australia.", "Sydney hosts a famous opera house."),
    ("Which is the largest planet?", "Jupiter is the largest planet in the Solar System.", "Mars is called the red planet."),
    ("Who discovered radioactivity?", "Henri Becquerel discovered radioactivity in 1896.", "Radios receive broadcast signals."),
    ("What does insulin regulate?", "Insulin regulates the level of glucose in the blood.", "The pancreas sits in the abdomen."),
    ("Where is the Danube?", "The Danube flows through central and eastern Europe.", "Rivers carry water to the sea."),
    ("Who painted the Mona Lisa?", "The Mona Lisa was painted by Leonardo da Vinci.", "The Louvre is a museum in Paris."),
    ("What is the boiling point of water?", "Water boils at 100 degrees Celsius at sea level.", "Ice is frozen water."),
]


def _instances(prefix: str, flip: bool = False, split: str = "train") -> list[Instance]:
    out = []
    for n, (q, good, other) in enumerate(FACTS):
        texts = [other, good] if (n % 2 == 0) ^ flip else [good, other]
        cands = [Candidate(f"{prefix}{n}-{j}", t, rank=j, labels={"given": int(t == good)}) for j, t in enumerate(texts)]
        out.append(Instance(Question(f"toy:{prefix}{n}", q, dataset="toy"), cands, label_source="given", split=split))
    return out


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "c.tsv"
    texts = [t for _, a, b in FACTS for t in (a, b)]
    path.write_text("id\ttext\ttitle\n" + "".join(f"d{i}\t{t}\t\n" for i, t in enumerate(texts)))
    return str(path)


def test_late_columns_are_maxsim_its_gap_and_its_rank(tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    batch = _instances("a")[:3]
    batch[2].candidates.append(Candidate("extra", "Jupiter has many moons.", rank=2))
    x = late_features(batch)
    ref = make_selector("maxsim").score(batch)
    assert x.shape == (3, 3, len(LATE_NAMES))
    for b, inst in enumerate(batch):
        n = len(inst.candidates)
        np.testing.assert_allclose(x[b, :n, 0], ref[b, :n], atol=1e-6)
        assert x[b, :n, 1].max() == 0.0 and x[b, :n, 2].max() == 1.0
        assert x[b, int(np.argmax(ref[b, :n])), 2] == 1.0 and sorted(x[b, :n, 2]) == sorted(1 / (1 + np.arange(n)))
    assert not x[0, 2].any()  # padding


def test_scores_resume_from_the_cache(tmp_path, monkeypatch):
    from chunksel.selectors import late_features as lf

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    batch = _instances("b")
    first = maxsim_scores(batch[:5])
    sel = lf.scorer(None)
    before = sel.encoder().n_encoded
    both = maxsim_scores(batch)  # the first five come from the cache
    assert sel.encoder().n_encoded - before == 3 * 3  # three new questions and their two chunks
    np.testing.assert_array_equal(both[:5], first)
    assert (tmp_path / "cache" / "maxsim" / "scores.sqlite").is_file()


@pytest.mark.parametrize("name", ["lambdamart", "ranksvm"])
def test_rankers_read_fifteen_columns_and_keep_them_when_saved(name, corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    extra = {"min_child_samples": 1, "n_estimators": 20} if name == "lambdamart" else {}
    sel = make_selector(name, corpus=corpus, late=True, progress=False, **extra)
    x, mask = sel._features(_instances("c"))
    assert x.shape == (len(FACTS), 2, len(FEATURE_NAMES) + 3) and mask.all()
    assert sel.feature_names()[-3:] == LATE_NAMES
    sel.fit(_instances("c"), None, _instances("d", flip=True, split="val"))
    test = _instances("e", flip=True, split="test")
    scores = sel.score(test)
    sel.save(tmp_path / "m")
    again = load_selector(tmp_path / "m")
    assert again.late and np.array_equal(again.score(test), scores)
    # a model saved with the late columns is refused by a build without them
    cfg = (tmp_path / "m" / "config.json").read_text().replace('"late": true', '"late": false')
    (tmp_path / "m" / "config.json").write_text(cfg)
    with pytest.raises(DataError, match="different feature set"):
        load_selector(tmp_path / "m")


def test_the_flagship_reads_the_late_columns_in_its_letor_block_and_its_lambdamart(corpus, tmp_path, monkeypatch):
    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    from chunksel.selectors.anchored_ltr import letor_block

    batch = _instances("f")
    lf = letor_block(batch, corpus, 1.5, 0.75, 2, late=True)
    assert lf.shape == (len(FACTS), 2, len(FEATURE_NAMES) + 3)
    np.testing.assert_array_equal(lf[:, :, len(FEATURE_NAMES):], late_features(batch))
    np.testing.assert_array_equal(lf[:, :, : len(FEATURE_NAMES)], letor_block(batch, corpus, 1.5, 0.75, 2))
    from chunksel.retrieval.encoder import Encoder

    enc = Encoder()

    def embedded(insts):
        for inst in insts:
            vecs = enc.encode([inst.question.text] + [c.text for c in inst.candidates], progress=False)
            inst.question.embedding = vecs[0]
            for c, v in zip(inst.candidates, vecs[1:], strict=True):
                c.embedding = v
        return insts

    sel = make_selector("anchored", blocks="q+chunk+letor+lambdamart", k=2, corpus=corpus, late=True, members=1,
                        max_epochs=2, ltr_folds=2, progress=False)
    sel.fit(embedded(_instances("c") + _instances("g", flip=True)), None,
            embedded(_instances("d", flip=True, split="val")))
    assert sel.ltr_.num_feature() == len(FEATURE_NAMES) + 3
    assert sel.ltr_.feature_name()[-3:] == list(LATE_NAMES)
    test = embedded(_instances("e", flip=True, split="test"))
    sel.save(tmp_path / "a")
    again = load_selector(tmp_path / "a")
    assert again.late and np.array_equal(again.score(test), sel.score(test))
    # the ONNX graph takes the wider interaction features as they come
    pytest.importorskip("onnxruntime")
    again.engine = "onnxruntime"
    np.testing.assert_allclose(again.score(test), sel.score(test), atol=1e-4)


def test_a_cost_measurement_never_reads_the_score_cache(tmp_path, monkeypatch):
    from chunksel.selectors import late_features as lf
    from chunksel.selectors.letor import memo_off

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    batch = _instances("h")[:2]
    cached = maxsim_scores(batch)
    sel = lf.scorer(None)
    before = sel.encoder().n_encoded
    with memo_off():
        np.testing.assert_allclose(maxsim_scores(batch), cached, atol=1e-6)
    assert sel.encoder().n_encoded - before == 2 * 3  # computed again: two questions and their chunks
    np.testing.assert_array_equal(maxsim_scores(batch), cached)
    assert sel.encoder().n_encoded - before == 2 * 3  # and the cache still answers outside it
