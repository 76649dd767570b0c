"""The stacked flagship (``anchored-ce``): z(anchored) + w z(cross-encoder), w chosen on
validation; pre-fitted members and handed-over scores (a study scores nothing twice); with
w = 0 the cross-encoder is never run; save/load; bad settings; the study's stacked row."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("datasets")
pytest.importorskip("sentence_transformers")

from chunksel.errors import ConfigError, DataError  # noqa: E402
from chunksel.selectors import load_selector, make_selector  # noqa: E402
from chunksel.selectors.crossencoder import rank1, standardised  # noqa: E402
from chunksel.selectors.stacked import STACK_WEIGHTS, stacked_scores  # noqa: E402

pytestmark = pytest.mark.model

ANCHORED = {"blocks": "q+chunk+letor+lambdamart", "hidden": 16, "phi_hidden": 8, "max_epochs": 2, "batch_size": 8, "progress": False}
CE = {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4, "progress": False}


def _corpus(instances, path: Path) -> str:
    lines = ["id\ttext\ttitle\tsource"] + [f"{c.id}\t{c.text}\t{c.title}\ttoy" for i in instances
                                           for c in i.candidates]
    path.write_text("\n".join(lines + ["x:1\tsome other passage\t\ttoy"]) + "\n", encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def members(tmp_path_factory):
    from tests.conftest import make_toy_instances

    insts = make_toy_instances(n=30, seed=3)
    corpus = _corpus(insts, tmp_path_factory.mktemp("stack") / "corpus.tsv")
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    base = make_selector("anchored", corpus=corpus, **ANCHORED).fit(train, val=val)
    member = make_selector("crossencoder", **CE).fit(train, val=val)
    return base, member, insts, corpus


def test_stacked_scores_are_the_base_at_zero_and_a_z_sum_otherwise(members):
    base, member, insts, _ = members
    b, m = base.score(insts), member.score(insts)
    np.testing.assert_array_equal(stacked_scores(b, m, insts, 0.0), b)
    got = stacked_scores(b, m, insts, 1.5)
    np.testing.assert_allclose(got, standardised(b, insts) + 1.5 * standardised(m, insts))
    assert np.isneginf(got[~np.isfinite(b)]).all()


def test_weight_is_chosen_on_validation_from_handed_over_scores(members):
    base, member, insts, _ = members
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    b, m = base.score(insts), member.score(insts)
    by_id = lambda sc: {i.id: row[: len(i.candidates)] for i, row in zip(insts, sc, strict=True)}  # noqa: E731
    sel = make_selector("anchored-ce", seed=0).with_members(base, member).given_scores(by_id(b), by_id(m))
    calls = {"n": 0}
    real = type(member).score

    def counting(self, *a, **k):
        calls["n"] += 1
        return real(self, *a, **k)

    type(member).score = counting
    try:
        sel.fit(train, val=val)
        scores = sel.score(insts)
    finally:
        type(member).score = real
    assert calls["n"] == 0  # every score was handed over
    ans = [j for j, i in enumerate(val) if i.answerable()]
    vb, vm = b[[insts.index(val[j]) for j in ans]], m[[insts.index(val[j]) for j in ans]]
    av = [val[j] for j in ans]
    by_w = {w: rank1(stacked_scores(vb, vm, av, w), av) for w in STACK_WEIGHTS}
    best = max(STACK_WEIGHTS, key=lambda w: (by_w[w], -w))
    assert sel.weight_ == best and sel.weight_val_ == {str(w): round(v, 4) for w, v in by_w.items()}
    np.testing.assert_allclose(scores, stacked_scores(b, m, insts, best))
    # forgotten scores: the members score again, with the same result
    sel.forget_scores()
    np.testing.assert_allclose(sel.score(insts), scores, rtol=1e-6)


def test_weight_zero_never_runs_the_cross_encoder(members, monkeypatch):
    base, member, insts, _ = members
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    sel = make_selector("anchored-ce", weight=0).with_members(base, member).fit(train, val=val)

    def refuse(*a, **k):
        raise AssertionError("the cross-encoder ran")

    monkeypatch.setattr(type(member), "score", refuse)
    np.testing.assert_array_equal(sel.score(insts), base.score(insts))
    assert "retrieval_score" in sel.required_inputs() and sel.n_parameters() == base.n_parameters()


def test_save_load_gives_the_same_scores_and_damage_is_named(members, tmp_path):
    base, member, insts, corpus = members
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    sel = make_selector("anchored-ce", weight=1.0).with_members(base, member).fit(train, val=val)
    sel.save(tmp_path / "s")
    again = load_selector(tmp_path / "s")
    assert again.weight_ == 1.0 and again.base_.name == "anchored" and again.member_.name == "crossencoder"
    np.testing.assert_allclose(again.score(insts), sel.score(insts), rtol=1e-6)
    np.testing.assert_array_equal(again.probabilities(insts)[1], sel.probabilities(insts)[1])
    shutil.rmtree(tmp_path / "s" / "member")
    with pytest.raises(DataError, match="member"):
        load_selector(tmp_path / "s")


def test_bad_settings_and_members_are_named(members):
    base, member, insts, _ = members
    for bad in (-1, "abc", float("nan"), True):
        with pytest.raises(ConfigError, match="weight"):
            make_selector("anchored-ce", weight=bad)
    with pytest.raises(ConfigError, match="base_params"):
        make_selector("anchored-ce", base_params=[1, 2])
    with pytest.raises(ConfigError, match="unknown parameter 'hiden'.*did you mean 'hidden'"):
        make_selector("anchored-ce", base_params={"hiden": 1})
    with pytest.raises(ConfigError, match="'layers' of selector 'crossencoder'"):
        make_selector("anchored-ce", member_params={"layers": 9})
    with pytest.raises(ConfigError, match="the base must be a fitted 'anchored'"):
        make_selector("anchored-ce").with_members(member, member)
    with pytest.raises(ConfigError, match="the member must be a fitted 'crossencoder'"):
        make_selector("anchored-ce").with_members(base, make_selector("crossencoder"))
    train = [i for i in insts if i.split == "train"]
    with pytest.raises(DataError, match="validation"):
        make_selector("anchored-ce").with_members(base, member).fit(train)


def test_study_stacks_table1_members_without_training_them_again(tmp_path, monkeypatch):
    """The stacked row reads Table 1's anchored fit per dataset and the pooled cross-encoder:
    neither is trained again for it; after a code change (the result memo cleared) the
    anchored fits are redone, as for their own row, and the pooled cross-encoder is read
    back; its weight per dataset is reported."""
    from tests.conftest import make_toy_instances

    from chunksel.selectors.anchored import AnchoredPrototypeSelector
    from chunksel.selectors.crossencoder import CrossEncoderSelector
    from chunksel.study.profiles import Profile
    from chunksel.study.run import run_study

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    data = {"popqa": make_toy_instances(n=15, seed=1), "msmarco": make_toy_instances(n=15, seed=2)}
    for ds, insts in data.items():
        for inst in insts:
            inst.question.id = f"{ds}:{inst.question.id}"
    corpus = _corpus([i for v in data.values() for i in v], tmp_path / "corpus.tsv")
    fits = {"anchored": 0, "crossencoder": 0}
    for cls in (AnchoredPrototypeSelector, CrossEncoderSelector):
        real = cls.fit

        def counting(self, *a, _real=real, **k):
            fits[self.name] += 1
            return _real(self, *a, **k)

        monkeypatch.setattr(cls, "fit", counting)
    prof = Profile("tiny", limit=15, seeds=(0,), budgets=(), ablation_seeds=(), latency_queries=2,
                   overrides={"crossencoder": {k: v for k, v in CE.items() if k != "progress"},
                              "anchored": {**{k: v for k, v in ANCHORED.items() if k != "progress"},
                                           "corpus": corpus}})
    names = ["retrieval", "crossencoder", "anchored-ce"]  # no anchored row: no ablation or pooled fits of it
    out = run_study(data, names, prof, None, tmp_path / "a", progress=False, reuse=True)
    res = json.loads((out / "results.json").read_text())
    assert fits == {"anchored": 2, "crossencoder": 1}
    row = res["table1"]["anchored-ce"]
    assert set(row["stack_weights"]) == {"popqa", "msmarco"} and row["p50_ms"] > 0
    assert all(len(w) == 1 and w[0] in STACK_WEIGHTS for w in row["stack_weights"].values())
    assert "§" in (out / "report.md").read_text()
    shutil.rmtree(tmp_path / "cache" / "bench")
    again = json.loads((run_study(data, ["anchored-ce"], prof, None, tmp_path / "b", progress=False,
                                  reuse=True) / "results.json").read_text())
    assert fits == {"anchored": 4, "crossencoder": 1}
    assert again["table1"]["anchored-ce"]["per_dataset"] == row["per_dataset"]
