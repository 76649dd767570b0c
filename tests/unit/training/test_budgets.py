from __future__ import annotations

import numpy as np
import pytest
import torch

from chunksel.errors import ConfigError
from chunksel.eval.metrics import rank1_accuracy as _rank1
from chunksel.nn.inputs import FeatureLayout
from chunksel.nn.prototype import PrototypeMLP, cosine_scores
from chunksel.selectors.prototype import PrototypeSelector
from chunksel.study.budgets import run_budgets
from chunksel.training.budgets import (
    budget_mask,
    budget_units,
    gradient_importance,
)
from chunksel.training.losses import multi_positive_contrastive


def rank1_accuracy(scores, labels):
    """Rank-1 over every row (the package's one rank-1 metric, subset "all")."""
    return _rank1(scores, labels, subset="all")


TINY = dict(hidden=48, depth=2, batch_size=64, max_epochs=40, patience=6, lr=3e-3, progress=False)


def test_layout_dims_match_paper_and_smollm():
    assert FeatureLayout(2048, 1024, 5, 384).dim == 4992
    assert FeatureLayout(576, 1920, 5, 384).dim == 4416
    assert FeatureLayout(576, 1920, 5, 384, ("chunk", "hs")).blocks == ("hs", "chunk")
    assert budget_units(FeatureLayout(2048, 1024, 5, 384), 10) == 499  # Table 3
    assert budget_units(FeatureLayout(2048, 1024, 5, 384), 70) == 3494
    with pytest.raises(ConfigError):
        FeatureLayout(1, 1, 1, 1, ())
    with pytest.raises(ConfigError):
        budget_units(FeatureLayout(1, 1, 1, 1), 0)


def chunk_grid(lay: FeatureLayout) -> np.ndarray:
    start = lay.slices()["chunk"].start
    return (start + np.arange(lay.dim - start)).reshape(lay.k, lay.d_e)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("pct", [1, 7, 10, 33, 50, 99, 100])
def test_budget_never_exceeded_and_chunk_coords_all_or_none(seed, pct):
    rng = np.random.default_rng(seed)
    lay = FeatureLayout(13, 29, 5, 11)
    imp = rng.exponential(size=lay.dim) * rng.choice([0.1, 1, 10], size=lay.dim)
    mask = budget_mask(imp, lay, pct)
    units = budget_units(lay, pct)
    assert mask.sum() <= units
    grid = chunk_grid(lay)
    kept_cols = mask[grid]  # (K, d_e)
    assert np.all(kept_cols.all(axis=0) | ~kept_cols.any(axis=0))
    assert mask.sum() == mask[: 13 + 29].sum() + lay.k * kept_cols[0].sum()  # coords cost K
    assert units - mask.sum() < lay.k  # greedy leaves less than one chunk coordinate unused
    if pct == 100:
        assert mask.all()


def test_chunk_coordinate_costs_k_units_and_is_ranked_by_its_mean():
    lay = FeatureLayout(4, 4, 3, 2)  # D = 4 + 4 + 6 = 14
    imp = np.zeros(14)
    imp[:8] = [1, 2, 3, 4, 5, 6, 7, 8]
    grid = chunk_grid(lay)
    imp[grid[:, 0]] = [100, 0, 2]  # coordinate 0: mean 34 -> first
    imp[grid[:, 1]] = [3, 3, 3]  # coordinate 1: mean 3
    mask = budget_mask(imp, lay, 50)  # floor(14 * .5) = 7 units
    assert mask[grid[:, 0]].all() and not mask[grid[:, 1]].any()
    assert np.flatnonzero(mask[:8]).tolist() == [4, 5, 6, 7]  # 3 + 4 = 7 units
    # 4 units: the coordinate (3) + the best dim (1)
    mask = budget_mask(imp, lay, 30)
    assert mask.sum() == 4 and mask[grid[:, 0]].all() and mask[7]


def test_gradient_importance_equals_sum_of_per_sample_gradients():
    torch.manual_seed(0)
    model = PrototypeMLP(10, out_dim=4, hidden=8, depth=2).eval()
    rng = np.random.default_rng(0)
    x = rng.normal(size=(6, 10)).astype(np.float32)
    e = rng.normal(size=(6, 3, 4)).astype(np.float32)
    y = np.eye(3, dtype=np.int8)[[0, 1, 2, 0, 1, 2]]
    m = np.ones((6, 3), dtype=bool)
    got = gradient_importance(model, x, e, y, m, tau=0.1, batch_size=4)
    want = np.zeros(10)
    for t in range(6):
        xt = torch.tensor(x[t : t + 1], requires_grad=True)
        loss = multi_positive_contrastive(cosine_scores(model(xt), torch.tensor(e[t : t + 1])),
                                          torch.tensor(y[t : t + 1]), tau=0.1)
        loss.backward()
        want += xt.grad.abs().numpy()[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-7)
    assert all(p.requires_grad for p in model.parameters())


def test_planted_signal_is_learned_and_ranked_first(planted):
    insts, feats = planted
    train, test = insts[:900], insts[900:]
    sel = PrototypeSelector(**TINY).fit(train, feats)
    labels = np.stack([i.labels() for i in test])
    acc = rank1_accuracy(sel.score(test, feats), labels)
    assert acc > 0.8, acc  # chance is 0.2
    lay = sel.layout_
    imp = sel._importance(sel._prepare(train, feats))
    hs = lay.slices()["hs"]
    # every hidden-state dim outranks every routing dim and every chunk coordinate
    chunk_means = imp[chunk_grid(lay)].mean(axis=0)
    assert imp[hs].min() > imp[lay.slices()["rw"]].max()
    assert imp[hs].min() > chunk_means.max()
    mask = budget_mask(imp, lay, 10)  # floor(104 * .1) = 10 units >= 8 hs dims
    assert mask[hs].all()


def test_run_budgets_curve(planted):
    insts, feats = planted
    train, test = insts[:500], insts[900:]
    settings = {**TINY, "max_epochs": 15}
    curve = run_budgets(train, feats, budgets=(10, 50, 100), **settings)
    assert [c.budget for c in curve] == [10.0, 50.0, 100.0]
    lay = curve[-1].selector.layout_
    assert [c.dims for c in curve] == [curve[0].selector.kept_dims, curve[1].selector.kept_dims, lay.dim]
    assert curve[0].dims <= budget_units(lay, 10) and curve[1].dims <= budget_units(lay, 50)
    assert curve[0].selector.n_parameters() < curve[-1].selector.n_parameters()
    labels = np.stack([i.labels() for i in test])
    assert rank1_accuracy(curve[0].selector.score(test, feats), labels) > 0.5
    # the reduced model keeps the full model's importance and scaler
    np.testing.assert_array_equal(curve[0].selector.importance_, curve[-1].selector.importance_)
