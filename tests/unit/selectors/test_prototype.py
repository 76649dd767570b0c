from __future__ import annotations

import json

import numpy as np
import pytest
from tests.conftest import TINY_PROTOTYPE

from chunksel.errors import ConfigError, DataError, NotFittedError
from chunksel.eval.metrics import rank1_accuracy
from chunksel.features.base import InMemoryFeatures
from chunksel.nn.prototype import InferenceMLP, int8_weight_only_available
from chunksel.selectors import REGISTRY, available, load_selector, make_selector
from chunksel.selectors.prototype import PrototypeSelector, parse_blocks
from chunksel.types import Candidate, Instance, Question

TINY = TINY_PROTOTYPE
D_H, D_R = 6, 10
pytestmark = pytest.mark.usefixtures("one_thread")


def feats_for(instances, d_h=D_H, d_r=D_R, seed=0):
    rng = np.random.default_rng(seed)
    ids = [i.id for i in instances]
    return InMemoryFeatures(ids, h=rng.normal(size=(len(ids), d_h)), r=rng.normal(size=(len(ids), d_r)))


@pytest.fixture
def fitted(toy_instances):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(**TINY, generator_id="gen-x", encoder_id="enc-y").fit(toy_instances, feats)
    return sel, toy_instances, feats


def test_registered():
    assert REGISTRY["prototype"][0] == "chunksel.selectors.prototype:PrototypeSelector"
    assert "prototype" in available()
    sel = make_selector("prototype", k=3, blocks="chunk+hs")
    assert isinstance(sel, PrototypeSelector) and sel.blocks == ("hs", "chunk")
    assert PrototypeSelector.query_cost == "warmup"


def test_parse_blocks():
    assert parse_blocks(("chunk", "rw")) == ("rw", "chunk")
    assert parse_blocks("hs,rw") == ("hs", "rw")
    with pytest.raises(ConfigError, match="non-empty subset"):
        parse_blocks(["hs", "bogus"])
    with pytest.raises(ConfigError):
        parse_blocks("")


def test_not_fitted(toy_instances):
    with pytest.raises(NotFittedError):
        PrototypeSelector().score(toy_instances[:2])


def test_scores_shape_padding_and_select(fitted):
    sel, insts, feats = fitted
    scores = sel.score(insts, feats)
    assert scores.shape == (len(insts), 5)
    assert np.isneginf(scores[-1, 3:]).all() and np.isfinite(scores[-1, :3]).all()  # padded
    assert np.isfinite(scores[:-1]).all() and np.all(np.abs(scores[:-1]) <= 1 + 1e-5)  # cosines
    picks = sel.select(insts, feats, k=4)
    assert len(picks[-1].indices) == 3 and len(set(picks[0].indices)) == 4
    assert sel.layout_.dim == D_H + D_R + 5 * 8
    assert sel.summary_["n_train"] + sel.summary_["n_val"] == len(insts)


def test_score_arrays_matches_score_and_single_instance(fitted):
    sel, insts, feats = fitted
    got = feats.lookup([i.id for i in insts[:3]])
    e = np.stack([[c.embedding for c in i.candidates] for i in insts[:3]])
    via_arrays = sel.score_arrays(got["h"], got["r"], e)
    np.testing.assert_allclose(via_arrays, sel.score(insts[:3], feats), rtol=1e-5, atol=1e-6)
    one = sel.score_arrays(got["h"][0], got["r"][0], e[0])
    np.testing.assert_allclose(one[0], via_arrays[0], rtol=1e-5, atol=1e-6)
    # fewer candidates than K: padded and masked, same as an instance with 3 candidates
    short = sel.score_arrays(got["h"][:1], got["r"][:1], e[:1, :3])
    assert short.shape == (1, 3)


def test_more_than_k_candidates_are_cut(toy_instances):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(k=3, **TINY).fit(toy_instances, feats)
    scores = sel.score(toy_instances, feats)
    assert scores.shape == (len(toy_instances), 5)
    assert np.isneginf(scores[:, 3:]).all() and np.isfinite(scores[:, :3]).all()
    assert all(max(s.indices) < 3 for s in sel.select(toy_instances, feats, k=5))


def test_save_load_identical_and_records_ids(fitted, tmp_path):
    sel, insts, feats = fitted
    sel.save(tmp_path / "m")
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["name"] == "prototype"
    assert cfg["params"]["generator_id"] == "gen-x" and cfg["params"]["encoder_id"] == "enc-y"
    assert cfg["state"]["layout"] == {"d_h": D_H, "d_r": D_R, "k": 5, "d_e": 8, "blocks": ["hs", "rw", "chunk"]}
    assert cfg["state"]["prototype_format"] == 1
    loaded = load_selector(tmp_path / "m")
    assert isinstance(loaded, PrototypeSelector)
    np.testing.assert_array_equal(loaded.score(insts, feats), sel.score(insts, feats))
    assert loaded.n_parameters() == sel.n_parameters()


def test_corrupt_and_truncated_checkpoints(fitted, tmp_path):
    sel, _, _ = fitted
    sel.save(tmp_path / "m")
    weights = tmp_path / "m" / "model.safetensors"
    data = weights.read_bytes()
    weights.write_bytes(data[: len(data) // 2])
    with pytest.raises(DataError, match="corrupt checkpoint"):
        PrototypeSelector.load(tmp_path / "m")
    weights.write_bytes(b"\x00garbage")
    with pytest.raises(DataError, match="corrupt checkpoint"):
        PrototypeSelector.load(tmp_path / "m")
    weights.unlink()
    with pytest.raises(DataError, match="corrupt checkpoint"):
        PrototypeSelector.load(tmp_path / "m")


def test_dimension_mismatch_names_both(fitted, tmp_path):
    sel, insts, _ = fitted
    wrong = feats_for(insts, d_h=D_H + 1)
    with pytest.raises(DataError, match=rf"dimension {D_H + 1}.*dimension {D_H}"):
        sel.score(insts, wrong)
    e = np.zeros((1, 5, 9), dtype=np.float32)
    with pytest.raises(DataError, match="dimension 9.*dimension 8"):
        sel.score_arrays(np.zeros(D_H), np.zeros(D_R), e)


def test_features_required_unless_chunk_only(toy_instances):
    with pytest.raises(DataError, match="generator features"):
        PrototypeSelector(**TINY).fit(toy_instances)
    sel = PrototypeSelector(blocks=("chunk",), **TINY).fit(toy_instances)
    assert sel.layout_.dim == 5 * 8
    assert sel.score(toy_instances).shape == (len(toy_instances), 5)


@pytest.mark.parametrize("blocks", [("hs",), ("rw",), ("hs", "rw"), ("hs", "chunk"), ("rw", "chunk")])
def test_ablations_score_with_candidate_cosines(toy_instances, blocks):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(blocks=blocks, **TINY).fit(toy_instances, feats)
    expected = {"hs": D_H, "rw": D_R, "chunk": 40}
    assert sel.layout_.dim == sum(expected[b] for b in blocks)
    scores = sel.score(toy_instances, feats)
    assert np.isfinite(scores[:-1]).all()
    # the score is the cosine of the prototype with each candidate embedding
    inst = toy_instances[0]
    x = sel.layout_.assemble(
        feats.lookup([inst.id])["h"], feats.lookup([inst.id])["r"],
        np.stack([c.embedding for c in inst.candidates])[None],
    )
    y = sel.prototypes(x)[0]
    np.testing.assert_allclose(scores[0], [y @ c.embedding for c in inst.candidates], rtol=1e-5, atol=1e-6)


def test_budget_setting_masks_input(toy_instances, tmp_path):
    feats = feats_for(toy_instances)
    sel = PrototypeSelector(budget=30, **TINY).fit(toy_instances, feats)
    d = sel.layout_.dim
    assert sel.kept_dims <= int(d * 0.3)
    assert sel.model_.in_dim == sel.kept_dims
    sel.save(tmp_path / "b")
    loaded = PrototypeSelector.load(tmp_path / "b")
    np.testing.assert_array_equal(loaded.feature_mask_, sel.feature_mask_)
    np.testing.assert_array_equal(loaded.score(toy_instances, feats), sel.score(toy_instances, feats))


def test_int8_variant_close_to_fp32(fitted, tmp_path):
    sel, insts, feats = fitted
    sel.save(tmp_path / "m")
    q = PrototypeSelector.load(tmp_path / "m", quantize="int8")
    assert q.quantize == "int8"
    fp, i8 = sel.score(insts, feats), q.score(insts, feats)
    real = np.isfinite(fp)
    assert np.isfinite(i8[real]).all()
    assert np.abs(fp[real] - i8[real]).max() < 0.05
    assert not np.array_equal(fp, i8)  # it really runs quantised
    with pytest.raises(ConfigError):
        PrototypeSelector.load(tmp_path / "m", quantize="int4")


@pytest.mark.skipif(not int8_weight_only_available(), reason="torch without _weight_int8pack_mm")
def test_int8_weight_only_variant_close_to_fp32(fitted, tmp_path):
    sel, insts, feats = fitted
    sel.save(tmp_path / "m")
    q = PrototypeSelector.load(tmp_path / "m", quantize="int8w")
    fp, i8 = sel.score(insts, feats), q.score(insts, feats)
    real = np.isfinite(fp)
    assert np.array_equal(real, np.isfinite(i8))
    assert np.abs(fp[real] - i8[real]).max() < 0.05
    assert not np.array_equal(fp, i8)
    assert isinstance(q._inference_model(), InferenceMLP) and q._inference_model().mode == "int8w"


def test_learns_a_planted_signal():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(8, D_H))
    insts, hs = [], []
    for i in range(400):
        h = rng.normal(size=D_H)
        pos = int(rng.integers(5))
        cands = []
        for j in range(5):
            v = a @ h if j == pos else rng.normal(size=8)
            cands.append(Candidate(id=f"c{i}-{j}", text="", rank=j, labels={"given": int(j == pos)},
                                   embedding=(v / np.linalg.norm(v)).astype(np.float32)))
        insts.append(Instance(Question(id=f"q{i}", text=""), cands, label_source="given"))
        hs.append(h)
    feats = InMemoryFeatures([i.id for i in insts], h=np.stack(hs), r=rng.normal(size=(400, D_R)))
    settings = {**TINY, "hidden": 48, "max_epochs": 40, "batch_size": 32, "patience": 10}
    sel = PrototypeSelector(**settings).fit(insts[:300], feats)
    acc = rank1_accuracy(sel.score(insts[300:], feats), np.stack([i.labels() for i in insts[300:]]), subset="all")
    assert acc > 0.8, acc
