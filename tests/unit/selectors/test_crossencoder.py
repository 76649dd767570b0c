"""The cross-encoder peer: training picks its epoch on validation, save/load and the ONNX
graph give the torch scores, bad settings and damaged checkpoints are clear errors."""

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
from chunksel.selectors.crossencoder import rank1  # noqa: E402

pytestmark = pytest.mark.model

SMALL = dict(layers=1, max_length=32, batch_size=4, progress=False)
#: the checkpoint tests count the steps of the listwise recipe over every candidate
LISTWISE = dict(SMALL, loss="listwise", negatives=None, max_questions=None)


@pytest.fixture(scope="module")
def fitted(toy_instances_module):
    insts = toy_instances_module
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    return make_selector("crossencoder", epochs=2, **SMALL).fit(train, val=val), insts


@pytest.fixture(scope="module")
def toy_instances_module():
    from tests.conftest import make_toy_instances

    return make_toy_instances(n=24)


def test_epoch_is_chosen_on_validation(fitted):
    sel, insts = fitted
    assert [h["epoch"] for h in sel.history_] == [1, 2]
    best = max(sel.history_, key=lambda h: h["val_rank1"])
    assert sel.best_epoch_ == best["epoch"]
    val = [i for i in insts if i.split == "val" and i.answerable()]
    assert rank1(sel.score(val), val) == pytest.approx(best["val_rank1"], abs=1e-3)


def test_save_load_and_onnx_give_the_torch_scores(fitted, tmp_path):
    sel, insts = fitted
    ref = sel.score(insts)
    sel.save(tmp_path / "ce")
    again = load_selector(tmp_path / "ce")
    np.testing.assert_allclose(again.score(insts), ref, rtol=1e-5, atol=1e-5)
    onnx = load_selector(tmp_path / "ce")
    onnx.engine = "onnxruntime"
    got = onnx.score(insts)
    mask = np.isfinite(ref)
    np.testing.assert_allclose(got[mask], ref[mask], atol=1e-4)
    assert np.isneginf(got[~mask]).all()
    int8 = load_selector(tmp_path / "ce")
    int8.engine, int8.quantize = "onnxruntime", True
    q = int8.score(insts)
    # int8 weights: close to the fp32 logits (a barely trained head scores near 0, so
    # the check is on the absolute error, not on the ranking)
    assert np.isfinite(q[mask]).all() and np.abs(q[mask] - ref[mask]).max() < 0.25


def test_pointwise_loss_trains(toy_instances_module):
    train = [i for i in toy_instances_module if i.split == "train"]
    sel = make_selector("crossencoder", loss="pointwise", epochs=1, **SMALL).fit(train)
    assert sel.best_epoch_ == 1 and sel.history_ == []
    assert np.isfinite(sel.score(train[:3])[:, :3]).all()


@pytest.mark.parametrize("bad", [dict(loss="pairwise"), dict(layers=0), dict(layers=7), dict(epochs=0),
                                 dict(lr=float("nan")), dict(engine="tensorrt")])
def test_bad_settings_fail_at_construction(bad):
    with pytest.raises(ConfigError):
        make_selector("crossencoder", **bad)


def test_damaged_checkpoint_is_named(fitted, tmp_path):
    sel, _ = fitted
    sel.save(tmp_path / "ce")
    shutil.rmtree(tmp_path / "ce" / "crossencoder")
    cfg = json.loads((tmp_path / "ce" / "config.json").read_text())
    cfg.pop("checksums")
    (tmp_path / "ce" / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(DataError, match="crossencoder/config.json is missing"):
        load_selector(Path(tmp_path / "ce"))


def test_recipe_trims_to_positives_and_top_negatives(toy_instances_module):
    """``negatives`` keeps answerable questions with their positives and top-ranked
    negatives; ``max_questions`` samples deterministically by seed."""
    insts = toy_instances_module
    sets = make_selector("crossencoder", negatives=1, **SMALL)._training_sets(insts)
    assert len(sets) == sum(i.answerable() for i in insts)
    for got in sets:
        orig = next(i for i in insts if i.id == got.id)
        labels = orig.labels()
        first_neg = next(c.id for c, y in zip(orig.candidates, labels, strict=True) if not y)
        assert [c.id for c in got.candidates] == [orig.candidates[int(np.argmax(labels))].id, first_neg]
    a = make_selector("crossencoder", max_questions=5, seed=3, negatives=None, **SMALL)._training_sets(insts)
    b = make_selector("crossencoder", max_questions=5, seed=3, negatives=None, **SMALL)._training_sets(insts)
    assert [i.id for i in a] == [i.id for i in b] and len(a) == 5
    assert all(len(i.candidates) == len(next(o for o in insts if o.id == i.id).candidates) for i in a)
    with pytest.raises(ConfigError, match="negatives"):
        make_selector("crossencoder", negatives=-1)
    with pytest.raises(ConfigError, match="max_questions"):
        make_selector("crossencoder", max_questions=0)


def test_study_trains_one_pooled_model_per_seed_and_keeps_it(tmp_path, monkeypatch):
    """Table 1's cross-encoder row is one model per seed fitted on the pooled training
    splits (never on a test instance) and evaluated on each dataset; a re-run after a code
    change (the result memo missed) loads that model instead of training again."""
    from tests.conftest import make_toy_instances

    from chunksel.selectors.crossencoder import CrossEncoderSelector
    from chunksel.study.profiles import Profile
    from chunksel.study.run import run_study

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    data = {"popqa": make_toy_instances(n=15, seed=1), "msmarco": make_toy_instances(n=15, seed=2)}
    for ds, insts in data.items():
        for inst in insts:
            inst.question.id = f"{ds}:{inst.question.id}"
    fits: list[set[str]] = []
    real_fit = CrossEncoderSelector.fit

    def recording_fit(self, train, features=None, val=None):
        fits.append({i.id for i in train} | {i.id for i in val or []})
        return real_fit(self, train, features, val)

    monkeypatch.setattr(CrossEncoderSelector, "fit", recording_fit)
    prof = Profile("tiny", limit=15, seeds=(0,), budgets=(), ablation_seeds=(), latency_queries=2,
                   overrides={"crossencoder": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4,
                                                  "loss": "listwise", "negatives": None, "max_questions": None}})
    out = run_study(data, ["retrieval", "crossencoder"], prof, None, tmp_path / "a", progress=False, reuse=True)
    res = json.loads((out / "results.json").read_text())
    assert len(fits) == 1
    test_ids = {i.id for insts in data.values() for i in insts if i.split == "test"}
    assert fits[0] and not fits[0] & test_ids
    assert {i.split("-")[0].split(":")[0] for i in fits[0]} == {"popqa", "msmarco"}
    row = res["table1"]["crossencoder"]
    assert row["pooled"] is True and set(row["per_dataset"]) == {"popqa", "msmarco"}
    assert row["p50_ms"] > 0
    assert "‡" in (out / "report.md").read_text()
    # the result memo is keyed by the code: clear it, as a code change would; the model stays
    shutil.rmtree(tmp_path / "cache" / "bench")
    again = json.loads((run_study(data, ["retrieval", "crossencoder"], prof, None, tmp_path / "b", progress=False,
                                  reuse=True) / "results.json").read_text())
    assert len(fits) == 1
    assert again["table1"]["crossencoder"]["per_dataset"] == row["per_dataset"]


def test_retrieval_prior_is_chosen_on_validation_and_saved(fitted, tmp_path):
    """``prior="auto"`` picks the weight of z(network) + w z(retrieval score) on validation
    rank-1; a fixed weight combines the two z-scores; with w > 0 the retrieval scores are
    read (and their absence is a clear error); a reload keeps the weight."""
    from dataclasses import replace

    from chunksel.selectors.crossencoder import PRIOR_WEIGHTS, standardised, with_prior

    sel, insts = fitted
    val = [i for i in insts if i.split == "val" and i.answerable()]
    assert sel.prior_weight_ in PRIOR_WEIGHTS
    by_w = {float(w): v for w, v in sel.prior_val_.items()}
    assert by_w[sel.prior_weight_] == max(by_w.values())
    assert all(by_w[w] < by_w[sel.prior_weight_] for w in by_w if w < sel.prior_weight_)
    test = [i for i in insts if i.split == "test"]
    raw = sel._network_scores(test)
    chosen = sel.prior_weight_
    sel.prior_weight_ = 2.0
    cos = np.array([[c.score for c in i.candidates] + [0.0] * (raw.shape[1] - len(i.candidates)) for i in test])
    want = standardised(raw, test) + 2.0 * np.where(np.isfinite(raw), standardised(cos, test), 0)
    np.testing.assert_allclose(sel.score(test), want)
    np.testing.assert_allclose(with_prior(raw, test, 2.0), want)
    assert sel.required_inputs() == frozenset({"retrieval_score"})
    blind = [replace(test[0], candidates=[replace(c, score=float("nan")) for c in test[0].candidates])]
    with pytest.raises(DataError, match="retrieval scores"):
        sel.score(blind)
    sel.save(tmp_path / "p")
    again = load_selector(tmp_path / "p")
    assert again.prior_weight_ == 2.0
    np.testing.assert_allclose(again.score(test), want, rtol=1e-5, atol=1e-5)
    sel.prior_weight_ = 0.0
    assert sel.required_inputs() == frozenset()
    np.testing.assert_allclose(sel.score(test), raw)
    sel.prior_weight_ = chosen  # the module's fixture, as fitted
    assert len(val) > 0
    with pytest.raises(ConfigError, match="prior"):
        make_selector("crossencoder", prior=-1)
    with pytest.raises(ConfigError, match="prior"):
        make_selector("crossencoder", prior="retrieval")


def test_one_epoch_scores_validation_once_and_a_cost_measurement_scores_afresh(toy_instances_module, monkeypatch,
                                                                              tmp_path):
    """With one epoch the validation split is scored once: the prior, the calibrator and a
    later evaluation of the same sets read those scores. Inside ``memo_off`` (the cost
    stage, the application path), on other sets, and after a load the network runs."""
    from chunksel.selectors.letor import memo_off

    insts = toy_instances_module
    train = [i for i in insts if i.split == "train"]
    val = [i for i in insts if i.split == "val"]
    test = [i for i in insts if i.split == "test"]
    sel = make_selector("crossencoder", epochs=1, **SMALL)
    calls: list[int] = []
    real = type(sel)._torch_scores

    def counting(self, batch):
        calls.append(len(batch))
        return real(self, batch)

    monkeypatch.setattr(type(sel), "_torch_scores", counting)
    sel.fit(train, val=val)
    assert calls == [len(val)]
    assert sel.calibrator_ is not None and len(sel.history_) == 1
    kept = sel.score(val)
    assert calls == [len(val)]  # the evaluation of the validation sets read the fit's scores
    with memo_off():
        np.testing.assert_allclose(sel.score(val), kept, rtol=1e-6)
    assert calls == [len(val), len(val)]  # a cost measurement pays for the network
    sel.score(test[:2])
    assert calls[-1] == 2
    sel.save(tmp_path / "ce")
    again = load_selector(tmp_path / "ce")
    assert again._fit_scores == {}


def test_onnx_sessions_follow_the_thread_budget_and_the_graph_is_removed(fitted, tmp_path):
    """Bulk scoring uses the threads the block may use; a one-thread block (the cost
    stage) gets a one-thread session; the exported graph's folder goes with the selector."""
    import gc

    from chunksel.threads import limit_threads

    sel, insts = fitted
    sel.save(tmp_path / "ce")
    onnx = load_selector(tmp_path / "ce")
    onnx.engine = "onnxruntime"
    with limit_threads(2):
        two = onnx.score(insts)
    with limit_threads(1):
        one = onnx.score(insts)
    assert sorted(onnx._runners) == [1, 2]
    assert [r.session.get_session_options().intra_op_num_threads for _, r in sorted(onnx._runners.items())] == [1, 2]
    mask = np.isfinite(one)
    np.testing.assert_allclose(two[mask], one[mask], atol=1e-5)
    folder = Path(onnx._onnx_graph).parent
    assert folder.is_dir()
    del onnx
    gc.collect()
    assert not folder.exists()


def test_pooled_seeds_train_one_model_for_every_seed_and_features_do_not_key_it(tmp_path, monkeypatch):
    """A profile with ``pooled_seeds`` trains the cross-encoder once (its first seed) while
    the other rows run every seed, and says so; the pooled model's cache key ignores the
    generator features it never reads, so a run without them trains the model a whole study
    (with them) reuses."""
    from tests.conftest import make_toy_study

    from chunksel.selectors.crossencoder import CrossEncoderSelector
    from chunksel.study.profiles import Profile
    from chunksel.study.run import run_study

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    data, feats, corpus = make_toy_study(tmp_path, n=15)
    fits: list[int] = []
    real_fit = CrossEncoderSelector.fit

    def recording_fit(self, train, features=None, val=None):
        fits.append(self.seed)
        return real_fit(self, train, features, val)

    monkeypatch.setattr(CrossEncoderSelector, "fit", recording_fit)
    prof = Profile("tiny", limit=15, seeds=(0, 1), pooled_seeds=(0,), budgets=(), ablation_seeds=(),
                   latency_queries=2,
                   overrides={"crossencoder": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4},
                              "lambdamart": {"corpus": str(corpus)}})
    sels = ["retrieval", "lambdamart", "crossencoder"]
    out = run_study(data, sels, prof, None, tmp_path / "a", progress=False, reuse=True)
    res = json.loads((out / "results.json").read_text())
    assert fits == [0]
    assert all(len(c["seeds"]) == 1 for c in res["table1"]["crossencoder"]["per_dataset"].values())
    assert all(len(c["seeds"]) == 2 for c in res["table1"]["lambdamart"]["per_dataset"].values())
    assert "‡ one model (its first seed" in (out / "report.md").read_text()
    run_study(data, sels, prof, feats, tmp_path / "b", progress=False, reuse=True)
    assert fits == [0]  # the model trained without the features is read back


class _Killed(Exception):
    """Stands in for the process being killed mid-training."""


def _kill_at_step(monkeypatch, n=None):
    """Count the training steps run; with ``n``, be killed at the n-th."""
    from sentence_transformers.cross_encoder import CrossEncoderTrainer

    real, calls = CrossEncoderTrainer.training_step, {"n": 0}

    def step(self, *args, **kwargs):
        calls["n"] += 1
        if calls["n"] == n:
            raise _Killed
        return real(self, *args, **kwargs)

    monkeypatch.setattr(CrossEncoderTrainer, "training_step", step)
    return calls


def test_interrupted_fit_resumes_to_the_uninterrupted_weights(toy_instances_module, tmp_path, monkeypatch):
    import chunksel.selectors.crossencoder_checkpoints as ce

    monkeypatch.setattr(ce, "CHECKPOINT_STEPS", 2)
    train = [i for i in toy_instances_module if i.split == "train"]
    val = [i for i in toy_instances_module if i.split == "val"]
    whole = make_selector("crossencoder", epochs=2, **LISTWISE).fit(train, val=val)
    folder = tmp_path / "ckpt"
    with monkeypatch.context() as m:
        _kill_at_step(m, 6)  # 4 steps an epoch: killed in the second, after the first's record
        with pytest.raises(_Killed):
            make_selector("crossencoder", epochs=2, **LISTWISE).fit(train, val=val, checkpoint_dir=folder)
    assert (folder / "checkpoint-4" / "trainer_state.json").is_file()
    assert json.loads((folder / "chunksel-epochs.json").read_text())["history"][0]["epoch"] == 1
    with monkeypatch.context() as m:
        steps = _kill_at_step(m)
        resumed = make_selector("crossencoder", epochs=2, **LISTWISE).fit(train, val=val, checkpoint_dir=folder)
    assert steps["n"] == 4  # the second epoch only: the first was read from checkpoint-4
    assert resumed.history_ == whole.history_ and resumed.best_epoch_ == whole.best_epoch_
    np.testing.assert_allclose(resumed.score(toy_instances_module), whole.score(toy_instances_module),
                               rtol=1e-5, atol=1e-5)
    assert not folder.exists()  # a finished fit leaves no checkpoints


def test_torn_newest_checkpoint_falls_back_to_the_one_before(toy_instances_module, tmp_path, monkeypatch):
    import chunksel.selectors.crossencoder_checkpoints as ce

    monkeypatch.setattr(ce, "CHECKPOINT_STEPS", 2)
    train = [i for i in toy_instances_module if i.split == "train"]
    whole = make_selector("crossencoder", epochs=2, **LISTWISE).fit(train)
    folder = tmp_path / "ckpt"
    with monkeypatch.context() as m:
        _kill_at_step(m, 7)  # 8 steps in all: checkpoints 4 and 6 kept
        with pytest.raises(_Killed):
            make_selector("crossencoder", epochs=2, **LISTWISE).fit(train, checkpoint_dir=folder)
    assert sorted(p.name for p in folder.glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    (folder / "checkpoint-6" / "trainer_state.json").write_text('{"global_st')  # killed while saving
    sel = make_selector("crossencoder", epochs=2, **LISTWISE)
    assert ce.FitCheckpoints(folder, sel, sel._dataset(train)).latest() == str(folder / "checkpoint-4")
    with monkeypatch.context() as m:
        steps = _kill_at_step(m)
        resumed = sel.fit(train, checkpoint_dir=folder)
    assert steps["n"] == 4  # from checkpoint-4
    np.testing.assert_allclose(resumed.score(train), whole.score(train), rtol=1e-5, atol=1e-5)


def test_checkpoints_of_other_settings_are_deleted_and_foreign_folders_refused(toy_instances_module, tmp_path,
                                                                              monkeypatch):
    import chunksel.selectors.crossencoder_checkpoints as ce

    monkeypatch.setattr(ce, "CHECKPOINT_STEPS", 2)
    train = [i for i in toy_instances_module if i.split == "train"]
    folder = tmp_path / "ckpt"
    with monkeypatch.context() as m:
        _kill_at_step(m, 4)
        with pytest.raises(_Killed):
            make_selector("crossencoder", epochs=1, lr=1e-4, **SMALL).fit(train, checkpoint_dir=folder)
    assert (folder / "checkpoint-2").is_dir()
    with pytest.warns(UserWarning, match="other settings or training rows: deleted"):
        sel = make_selector("crossencoder", epochs=1, **SMALL).fit(train, checkpoint_dir=folder)
    assert sel.best_epoch_ == 1 and not folder.exists()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    with pytest.raises(ConfigError, match="not a cross-encoder fit's checkpoints"):
        make_selector("crossencoder", epochs=1, **SMALL).fit(train, checkpoint_dir=mine)
    assert (mine / "notes.txt").read_text() == "keep me"


def test_study_resumes_an_interrupted_pooled_training(tmp_path, monkeypatch):
    """A run killed while the pooled cross-encoder trains leaves its checkpoints beside the
    model's folder; the re-run resumes from them, keeps the model and removes them."""
    from tests.conftest import make_toy_instances

    import chunksel.selectors.crossencoder_checkpoints as ce
    from chunksel.study.profiles import Profile
    from chunksel.study.run import run_study

    monkeypatch.setenv("CHUNKSEL_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(ce, "CHECKPOINT_STEPS", 2)
    data = {"popqa": make_toy_instances(n=15, seed=1), "msmarco": make_toy_instances(n=15, seed=2)}
    for ds, insts in data.items():
        for inst in insts:
            inst.question.id = f"{ds}:{inst.question.id}"
    prof = Profile("tiny", limit=15, seeds=(0,), budgets=(), ablation_seeds=(), latency_queries=2,
                   overrides={"crossencoder": {"layers": 1, "epochs": 1, "max_length": 32, "batch_size": 4,
                                                  "loss": "listwise", "negatives": None, "max_questions": None}})
    with monkeypatch.context() as m:
        _kill_at_step(m, 4)
        with pytest.raises(_Killed):
            run_study(data, ["retrieval", "crossencoder"], prof, None, tmp_path / "a", progress=False, reuse=True)
    partial = list((tmp_path / "cache" / "bench-models").glob("crossencoder-*.partial"))
    assert len(partial) == 1 and (partial[0] / "checkpoint-2" / "trainer_state.json").is_file()
    with monkeypatch.context() as m:
        steps = _kill_at_step(m)
        out = run_study(data, ["retrieval", "crossencoder"], prof, None, tmp_path / "b", progress=False, reuse=True)
    assert steps["n"] == 3  # 18 training questions at batch 4: steps 3 to 5
    assert not partial[0].exists()
    assert (partial[0].with_name(partial[0].name.removesuffix(".partial")) / "config.json").is_file()
    assert json.loads((out / "results.json").read_text())["table1"]["crossencoder"]["pooled"] is True


def test_the_defaults_are_the_validated_recipe_the_profiles_train():
    """A cross-encoder built without settings trains the full and large profiles' recipe
    (pointwise, positives + 2 top-ranked negatives, one epoch), not the listwise one that
    stayed below retrieval order on validation."""
    from chunksel.study.profiles import CE_FULL

    params = make_selector("crossencoder").get_params()
    assert {k: params[k] for k in CE_FULL if k != "engine"} == {k: v for k, v in CE_FULL.items() if k != "engine"}
