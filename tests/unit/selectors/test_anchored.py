"""The retrieval-anchored prototype selector: anchoring, model selection, learning, save/load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from tests.conftest import make_toy_instances

from chunksel.errors import ConfigError, DataError
from chunksel.features.base import InMemoryFeatures
from chunksel.nn.anchored import AnchoredEnsemble, AnchoredScorer
from chunksel.selectors import load_selector, make_selector
from chunksel.selectors.anchored_ltr import ltr_scores
from chunksel.selectors.base import rank_order
from chunksel.types import Instance, label_matrix

SMALL = {"hidden": 16, "phi_hidden": 8, "batch_size": 8, "progress": False}


def _corpus(instances: list[Instance], path: Path) -> str:
    lines = ["id\ttext\ttitle\tsource"]
    for inst in instances:
        for c in inst.candidates:
            lines.append(f"{c.id}\t{c.text}\t{c.title}\ttoy")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(path)


def _features(instances: list[Instance], seed: int = 0) -> InMemoryFeatures:
    rng = np.random.default_rng(seed)
    ids = [i.id for i in instances]
    return InMemoryFeatures(ids, h=rng.normal(size=(len(ids), 6)), r=rng.random((len(ids), 4)))


def _rank1(scores: np.ndarray, batch: list[Instance]) -> float:
    labels = label_matrix(batch, k=scores.shape[1])
    top = rank_order(scores)[:, 0]
    answerable = labels.any(axis=1)
    return float(labels[np.arange(len(batch)), top][answerable].mean())


def test_untrained_scorer_is_retrieval_order():
    torch.manual_seed(0)
    model = AnchoredScorer(x_dim=12, phi_dim=7, emb_dim=8).eval()
    q = torch.nn.functional.normalize(torch.randn(64, 8), dim=-1)
    e = torch.nn.functional.normalize(torch.randn(64, 5, 8), dim=-1)
    with torch.no_grad():
        s = model(q, e, torch.randn(64, 12) * 5, torch.randn(64, 5, 7) * 5)
    # exactly -beta * rank: every row strictly decreasing in retrieval order
    np.testing.assert_allclose(s.numpy(), np.tile(-float(model.beta.detach()) * np.arange(5), (64, 1)), atol=1e-5)
    assert (np.argsort(-s.numpy(), axis=1, kind="stable") == np.arange(5)).all()


def test_ensemble_is_retrieval_order_untrained_and_the_mean_of_its_members():
    torch.manual_seed(0)
    members = [AnchoredScorer(x_dim=12, phi_dim=7, emb_dim=8).eval() for _ in range(3)]
    ens = AnchoredEnsemble(members).eval()
    q = torch.nn.functional.normalize(torch.randn(32, 8), dim=-1)
    e = torch.nn.functional.normalize(torch.randn(32, 5, 8), dim=-1)
    x, phi = torch.randn(32, 12), torch.randn(32, 5, 7)
    with torch.no_grad():
        assert (np.argsort(-ens(q, e, x, phi).numpy(), axis=1, kind="stable") == np.arange(5)).all()
        for m in members:  # move every member away from retrieval order, differently
            for prm in m.parameters():
                prm.add_(torch.randn_like(prm) * 0.3)
        each = torch.stack([m(q, e, x, phi) for m in members])
        np.testing.assert_allclose(ens(q, e, x, phi).numpy(), each.mean(0).numpy(), rtol=1e-6, atol=1e-6)
        assert not torch.allclose(each[0], each[1])
    assert ens.n_parameters() == 3 * members[0].n_parameters()
    with pytest.raises(ValueError, match="at least one member"):
        AnchoredEnsemble([])


@pytest.mark.parametrize("members", [1, 2])
def test_members_are_distinct_seeds_and_round_trip(tmp_path, members):
    inst = make_toy_instances(n=40, seed=7)
    feats = _features(inst)
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), max_epochs=4, patience=4,
                        lr=1e-2, members=members, **SMALL)
    sel.fit([x for x in inst if x.split == "train"], feats, [x for x in inst if x.split == "val"])
    assert sel.summary_["members"] == members == len(sel.summary_["member_best_epoch"])
    if members == 1:
        assert isinstance(sel.model_, AnchoredScorer)
    else:
        assert isinstance(sel.model_, AnchoredEnsemble) and len(sel.model_.members) == members
        a, b = (dict(m.named_parameters()) for m in sel.model_.members)
        assert not torch.equal(a["g.0.weight"], b["g.0.weight"])  # different seeds
    sel.save(tmp_path / "m")
    again = load_selector(tmp_path / "m")
    assert type(again.model_) is type(sel.model_)
    np.testing.assert_array_equal(again.score(inst, feats), sel.score(inst, feats))
    with pytest.raises(ConfigError, match="members"):
        make_selector("anchored", members=0, **SMALL).fit(inst, feats)


def test_ensemble_without_validation_carves_one_split_for_every_member(tmp_path):
    inst = make_toy_instances(n=40, seed=8)
    feats = _features(inst)
    train = [x for x in inst if x.split == "train"]
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), max_epochs=3, patience=3,
                        members=2, **SMALL).fit(train, feats)
    assert sel.summary_["val_carved"] and sel.summary_["members"] == 2
    # the ensemble's guard ran on the carved rows: never below retrieval order there
    assert sel.summary_["n_val"] >= 1
    assert sel.summary_["best_val_acc"] >= sel.summary_["val_acc_retrieval"]


def test_validation_selection_never_below_retrieval_order(tmp_path):
    """Training labels put the evidence last, validation labels first: every update hurts
    on validation, so the untrained scorer (retrieval order) is what fit returns."""
    inst = make_toy_instances(n=60, seed=4)
    for i, x in enumerate(inst):
        n = len(x.candidates)
        x.split = "val" if i % 4 == 0 else "train"
        pos = n - 1 if x.split == "train" else 0
        for j, c in enumerate(x.candidates):
            c.labels = {"containment": int(j == pos)}
    train = [x for x in inst if x.split == "train"]
    val = [x for x in inst if x.split == "val"]
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), max_epochs=15, patience=15,
                        lr=1e-2, anchor="retrieval", **SMALL)
    sel.fit(train, _features(inst), val)
    assert sel.summary_["best_epoch"] == 0 and sel.summary_["member_best_epoch"] == [0, 0, 0]
    assert sel.summary_["best_val_acc"] >= sel.summary_["val_acc_retrieval"] == 1.0
    # training did move away from retrieval order on train (so the test could fail)
    assert min(sel.summary_["val_acc"][1:]) < 1.0
    scores = sel.score(val, _features(inst))
    assert (rank_order(scores) == np.arange(scores.shape[1])).all()


def test_learns_lexical_evidence_beyond_retrieval_order(tmp_path):
    """The toy positive repeats the question's key word at a random rank: retrieval order
    is near chance, the interaction term learns it from the LETOR features."""
    inst = make_toy_instances(n=80, seed=5)
    train = [x for x in inst if x.split == "train"]
    val = [x for x in inst if x.split == "val"]
    test = [x for x in inst if x.split == "test"]
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), blocks="q+letor",
                        max_epochs=40, patience=40, lr=1e-2, **SMALL)
    sel.fit(train, None, val)
    assert sel.summary_["best_epoch"] > 0
    retrieval = np.tile(-np.arange(5.0), (len(test), 1))
    assert _rank1(sel.score(test), test) >= _rank1(retrieval, test) + 0.3


def test_save_load_same_scores_and_checks(tmp_path):
    inst = make_toy_instances(n=30, seed=6)
    feats = _features(inst)
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), max_epochs=3, **SMALL)
    sel.fit([x for x in inst if x.split == "train"], feats, [x for x in inst if x.split == "val"])
    sel.save(tmp_path / "m")
    again = load_selector(tmp_path / "m")
    np.testing.assert_array_equal(again.score(inst, feats), sel.score(inst, feats))
    with pytest.raises(DataError, match="dimension"):
        again.score(inst, InMemoryFeatures([i.id for i in inst], h=np.zeros((len(inst), 3)),
                                           r=np.zeros((len(inst), 4))))
    with pytest.raises(DataError, match="generator features"):
        again.score(inst, None)


def test_bad_settings():
    with pytest.raises(ConfigError, match="blocks"):
        make_selector("anchored", blocks="hs+nope")
    with pytest.raises(ConfigError, match="hidden"):
        make_selector("anchored", hidden=0).fit(make_toy_instances(n=10))


@pytest.mark.parametrize(("quantize", "blocks"), [
    ("fp32", None), ("int8", None),
    ("fp32", "hs+q+lambdamart"),  # interaction features without the letor block
])
def test_onnx_graph_matches_torch(tmp_path, quantize, blocks):
    pytest.importorskip("onnxruntime")
    from chunksel.export.anchored import OnnxAnchored, export_anchored

    inst = make_toy_instances(n=30, seed=7)
    feats = _features(inst)
    extra = {"blocks": blocks, "ltr_folds": 2} if blocks else {}
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), max_epochs=4, lr=1e-2,
                        **SMALL, **extra)
    sel.fit([x for x in inst if x.split == "train"], feats, [x for x in inst if x.split == "val"])
    sel.save(tmp_path / "m")
    runner = OnnxAnchored(export_anchored(load_selector(tmp_path / "m"), tmp_path / "a.onnx", quantize))
    got = runner.scores(**sel.graph_inputs(inst, feats))
    ref = sel.score(inst, feats)
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))  # padded slots
    real = np.isfinite(ref)
    tol = 1e-4 if quantize == "fp32" else 0.05 * np.abs(ref[real]).max()
    np.testing.assert_allclose(got[real], ref[real], atol=tol)


@pytest.mark.parametrize("blocks", [None, "hs+q+lambdamart", "q+chunk+letor+lambdamart", "letor+lambdamart"])
def test_onnxruntime_engine_scores_as_torch_and_follows_its_weights(tmp_path, blocks):
    """``engine="onnxruntime"`` scores through the exported fp32 graph: the torch scores to
    float rounding, the same picks; a session per thread budget; a reload (new weights)
    gets a new graph; the setting survives save/load; a bad engine is a clear error."""
    pytest.importorskip("onnxruntime")
    from chunksel.export import anchored as exp
    from chunksel.threads import limit_threads

    inst = make_toy_instances(n=30, seed=7)
    feats = _features(inst)
    extra = {"blocks": blocks, "ltr_folds": 2} if blocks else {}
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), max_epochs=4, lr=1e-2,
                        engine="onnxruntime", **SMALL, **extra)
    sel.fit([x for x in inst if x.split == "train"], feats, [x for x in inst if x.split == "val"])
    with limit_threads(1):
        got = sel.score(inst, feats)
    sel.engine = "torch"
    ref = sel.score(inst, feats)
    sel.engine = "onnxruntime"
    assert np.array_equal(np.isneginf(got), np.isneginf(ref))
    real = np.isfinite(ref)
    np.testing.assert_allclose(got[real], ref[real], atol=1e-4)
    with limit_threads(2):
        sel.score(inst[:3], feats)
    assert sorted(k for k in exp._SESSIONS[sel][1] if k != "graph") == [1, 2]
    sel.save(tmp_path / "m")
    again = load_selector(tmp_path / "m")
    assert again.engine == "onnxruntime"
    np.testing.assert_allclose(again.score(inst, feats)[real], got[real], atol=1e-5)
    with pytest.raises(ConfigError, match="engine"):
        make_selector("anchored", engine="tensorrt")


def test_lambdamart_block_scores_training_instances_out_of_fold(tmp_path):
    """The training split's LambdaMART scores come from rankers that never saw their fold:
    each fold's scores equal a ranker trained, with the same settings, on the other folds."""
    from chunksel.selectors.ltr import LambdaMARTSelector, train_lambdarank

    inst = make_toy_instances(n=120, seed=8)
    rng = np.random.default_rng(0)
    for x in inst[::2]:  # noise, so that rankers trained on different folds differ
        pos = int(rng.integers(len(x.candidates)))
        for j, c in enumerate(x.candidates):
            c.labels = {"containment": int(j == pos)}
    train = [x for x in inst if x.split == "train"]
    val = [x for x in inst if x.split == "val"]
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), blocks="q+lambdamart",
                        ltr_folds=3, **SMALL)
    got = sel._fit_ltr(train, val)
    lf = sel._letor(train)
    _, _, m = sel._embeddings(train)
    folds = np.random.default_rng(sel.seed).permutation(len(train)) % 3
    d = LambdaMARTSelector()

    def rows(batch):
        kept = [i for i in batch if i.contested(None)]
        k_lf, (_, _, k_m) = sel._letor(kept), sel._embeddings(kept)
        y = np.concatenate([i.labels(None)[:5] for i in kept]).astype(np.int32)
        return k_lf[k_m], y, [int(r.sum()) for r in k_m]

    for f in range(3):
        held = np.flatnonzero(folds == f)
        booster = train_lambdarank(*rows([train[i] for i in np.flatnonzero(folds != f)]), rows(val),
                                   n_estimators=d.n_estimators, learning_rate=d.learning_rate,
                                   num_leaves=d.num_leaves, min_child_samples=d.min_child_samples,
                                   early_stopping_rounds=d.early_stopping_rounds, seed=sel.seed)
        np.testing.assert_allclose(got[held][m[held]], booster.predict(lf[held][m[held]]))
        # and not the in-sample ranker's scores
        assert not np.allclose(got[held][m[held]], sel.ltr_.predict(lf[held][m[held]]))
    assert (got[~m] == 0).all()


def test_lambdamart_block_save_load_and_damaged_trees(tmp_path):
    inst = make_toy_instances(n=40, seed=9)
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), blocks="q+letor+lambdamart",
                        max_epochs=3, **SMALL)
    sel.fit([x for x in inst if x.split == "train"], None, [x for x in inst if x.split == "val"])
    assert sel.n_parameters() > sel.model_.n_parameters()  # the trees are counted
    sel.save(tmp_path / "m")
    again = load_selector(tmp_path / "m")
    np.testing.assert_array_equal(again.score(inst), sel.score(inst))
    (tmp_path / "m" / "lambdamart.txt").write_text("tree\nnot a model\n")
    with pytest.raises(DataError, match="corrupt checkpoint .*lambdamart.txt"):
        load_selector(tmp_path / "m")
    (tmp_path / "m" / "lambdamart.txt").unlink()
    with pytest.raises(DataError, match="lambdamart.txt is missing"):
        load_selector(tmp_path / "m")
    with pytest.raises(ConfigError, match="ltr_folds"):
        make_selector("anchored", ltr_folds=1).fit(inst)


@pytest.mark.parametrize(("blocks", "expected"), [
    ("hs+rw+q+chunk+letor+lambdamart",
     {"warmup", "corpus_stats", "retrieval_score", "chunk_embedding", "question_embedding"}),
    ("q+lambdamart", {"corpus_stats", "retrieval_score", "chunk_embedding", "question_embedding"}),
    ("q+chunk", {"chunk_embedding", "question_embedding"}),
    ("rw+letor", {"warmup", "corpus_stats", "retrieval_score", "chunk_embedding", "question_embedding"}),
])
def test_query_time_inputs_follow_the_blocks(blocks, expected):
    """What a pipeline must compute at query time: the stacked LambdaMART reads the LETOR
    features (corpus statistics, retrieval scores) even without the letor block."""
    from chunksel.selectors.provenance import selector_inputs

    assert selector_inputs(make_selector("anchored", blocks=blocks)) == frozenset(expected)


def test_lambdamart_anchor_untrained_ranks_as_lambdamart_and_scores_come_back_in_input_order(tmp_path):
    """anchor="lambdamart": the untrained scorer reproduces the internal LambdaMART's order
    (the guard's floor), and scores are returned for the candidates as given."""
    inst = make_toy_instances(n=60, seed=11)
    train = [x for x in inst if x.split == "train"]
    val = [x for x in inst if x.split == "val"]
    corpus = _corpus(inst, tmp_path / "c.tsv")
    sel = make_selector("anchored", corpus=corpus, blocks="q+letor+lambdamart", anchor="lambdamart",
                        max_epochs=2, **SMALL)
    sel.fit(train, None, val)
    lf, (_, _, m) = sel._letor(inst), sel._embeddings(inst)
    ltr = np.where(m, ltr_scores(sel.ltr_, lf, m), -np.inf)
    untrained = AnchoredScorer(sel.model_.members[0].x_dim, sel.model_.members[0].phi_dim,
                               sel.emb_dim_, 16, 2, 8, 2, 0.3, 0.1)
    sel.model_ = untrained.eval()
    scores = sel.score(inst)
    for row, want, mask in zip(scores, ltr, m, strict=True):
        got = np.argsort(-row[mask], kind="stable")
        assert (got == np.argsort(-want[mask], kind="stable")).all()
    # the fitted scorer is never below LambdaMART's order on validation, and reloads exactly
    sel.fit(train, None, val)
    assert sel.summary_["best_val_acc"] >= sel.summary_["val_acc_retrieval"]
    sel.save(tmp_path / "m")
    again = load_selector(tmp_path / "m")
    assert again.anchor == "lambdamart"
    np.testing.assert_array_equal(again.score(inst), sel.score(inst))


def test_lambdamart_anchor_settings_are_checked(tmp_path):
    inst = make_toy_instances(n=20, seed=12)
    with pytest.raises(ConfigError, match="anchor must be one of"):
        make_selector("anchored", anchor="bm25").fit(inst)
    with pytest.raises(ConfigError, match="needs the lambdamart block"):
        make_selector("anchored", anchor="lambdamart", blocks="q+letor").fit(inst)
    pytest.importorskip("onnxruntime")
    from chunksel.export.anchored import OnnxAnchored, anchored_graph_bytes

    inst = make_toy_instances(n=40, seed=13)
    sel = make_selector("anchored", corpus=_corpus(inst, tmp_path / "c.tsv"), blocks="q+chunk+letor+lambdamart",
                        anchor="lambdamart", max_epochs=3, **SMALL)
    sel.fit([x for x in inst if x.split == "train"], None, [x for x in inst if x.split == "val"])
    graph = OnnxAnchored(anchored_graph_bytes(sel))
    inputs = sel.graph_inputs(inst)
    assert (inputs["order"] != np.arange(5)).any()  # the test would see an unmapped order
    got, want = graph.scores(**inputs), sel.score(inst)
    np.testing.assert_allclose(np.where(np.isfinite(want), got, 0), np.where(np.isfinite(want), want, 0),
                               rtol=1e-4, atol=1e-4)
    inputs.pop("order")
    with pytest.raises(DataError, match="missing \\['order'\\]"):
        graph.scores(**inputs)


def test_auto_anchor_follows_the_blocks_and_old_checkpoints_stay_retrieval_anchored(tmp_path):
    import json

    inst = make_toy_instances(n=30, seed=14)
    corpus = _corpus(inst, tmp_path / "c.tsv")
    assert make_selector("anchored")._anchor() == "lambdamart"
    assert make_selector("anchored", blocks="q+letor")._anchor() == "retrieval"
    sel = make_selector("anchored", corpus=corpus, blocks="q+letor+lambdamart", max_epochs=2, **SMALL)
    sel.fit([x for x in inst if x.split == "train"], None, [x for x in inst if x.split == "val"])
    sel.save(tmp_path / "m")
    assert load_selector(tmp_path / "m")._anchor() == "lambdamart"
    # a checkpoint written before the anchor setting: its state names no anchor
    cfg_file = tmp_path / "m" / "config.json"
    cfg = json.loads(cfg_file.read_text())
    text = json.dumps(cfg).replace('"anchor": "lambdamart", ', "").replace(', "anchor": "lambdamart"', "")
    cfg_file.write_text(text)
    old = load_selector(tmp_path / "m")
    assert old._anchor() == "retrieval"


def _move_positive(inst: Instance, to: int) -> Instance:
    """``inst`` with its positive candidate moved to position ``to`` (scores and ranks
    follow the positions)."""
    from dataclasses import replace

    cands = list(inst.candidates)
    pos = int(np.flatnonzero(inst.labels())[0])
    cands.insert(to, cands.pop(pos))
    cands = [replace(c, score=1.0 - 0.01 * j, rank=j) for j, c in enumerate(cands)]
    return Instance(question=inst.question, candidates=cands, split="test", label_source=inst.label_source)


def test_without_the_chunk_block_every_candidate_is_scored_any_k(tmp_path):
    """Trained on 5 candidates, the selector without the ``chunk`` block scores lists of
    1 to 20 (no chunk left unscored), the ONNX graph takes any K as torch does, and the
    positive at position 13 of a 20-chunk list can win; with the ``chunk`` block K is fixed."""
    from chunksel.export.anchored import OnnxAnchored, export_anchored
    from chunksel.pipeline.selection import max_chunks

    inst = make_toy_instances(n=60, seed=3)
    corpus = _corpus(inst + make_toy_instances(n=20, k=20, seed=4), tmp_path / "c.tsv")
    sel = make_selector("anchored", corpus=corpus, blocks="q+letor+lambdamart", max_epochs=6, lr=1e-2,
                        ltr_folds=2, **SMALL)
    assert sel.fixed_k is None and max_chunks(sel) is None
    assert make_selector("anchored").fixed_k == 5 and max_chunks(make_selector("anchored", k=7)) == 7
    sel.fit([x for x in inst if x.split == "train"], None, [x for x in inst if x.split == "val"])
    sel.save(tmp_path / "m")
    loaded = load_selector(tmp_path / "m")
    long = make_toy_instances(n=20, k=20, seed=4)
    for one in (long, [long[0].__class__(question=long[0].question, candidates=long[0].candidates[:1],
                                         split="test", label_source="containment")]):
        s = loaded.score(one)
        assert s.shape == (len(one), max(len(i.candidates) for i in one))
        for row, i in zip(s, one, strict=True):
            assert np.isfinite(row[: len(i.candidates)]).all()
    # the evidence at position 13 of 20, four questions: found each time
    at13 = [_move_positive(i, 13) for i in long[:4]]
    assert [int(np.argmax(row)) for row in loaded.score(at13)] == [13] * 4
    assert _rank1(loaded.score(long), long) > _rank1(np.tile(-np.arange(20.0), (len(long), 1)), long)
    pytest.importorskip("onnxruntime")
    runner = OnnxAnchored(export_anchored(loaded, tmp_path / "a.onnx"))
    assert runner.k is None
    np.testing.assert_allclose(runner.scores(**loaded.graph_inputs(long))[np.isfinite(loaded.score(long))],
                               loaded.score(long)[np.isfinite(loaded.score(long))], atol=1e-4)
