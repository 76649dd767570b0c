from __future__ import annotations

import numpy as np
import pytest
import torch

from chunksel.errors import DataError
from chunksel.nn.inputs import StandardScaler
from chunksel.training.trainer import TrainConfig, train_prototype, usable

TINY = dict(hidden=32, depth=2, batch_size=32, max_epochs=8, patience=3, lr=3e-3, progress=False)


def arrays(n=120, k=4, d=10, d_e=6, seed=0):
    """x carries a copy of the positive's embedding, so the task is learnable."""
    rng = np.random.default_rng(seed)
    e = rng.normal(size=(n, k, d_e)).astype(np.float32)
    e /= np.linalg.norm(e, axis=-1, keepdims=True)
    pos = rng.integers(k, size=n)
    y = np.zeros((n, k), dtype=np.int8)
    y[np.arange(n), pos] = 1
    x = np.concatenate([e[np.arange(n), pos], rng.normal(size=(n, d - d_e))], axis=1).astype(np.float32)
    return x, e, y, np.ones((n, k), dtype=bool)


def test_scaler_standardises_and_keeps_constant_dims_finite():
    x = np.array([[1.0, 5.0], [3.0, 5.0]])
    sc = StandardScaler().fit(x)
    np.testing.assert_allclose(sc.transform(x), [[-1, 0], [1, 0]])
    np.testing.assert_allclose(sc.subset(np.array([True, False])).transform(x[:, :1]), [[-1], [1]])


def test_usable_flags():
    y = np.array([[1, 0, 0], [0, 0, 0], [1, 1, 0], [1, 0, 1]])
    m = np.array([[1, 1, 1], [1, 1, 1], [1, 1, 0], [1, 1, 1]], dtype=bool)
    keep, no_pos, no_neg = usable(y, m)
    assert keep.tolist() == [True, False, False, True]
    assert no_pos.tolist() == [False, True, False, False]
    assert no_neg.tolist() == [False, False, True, False]  # the padded slot is no negative


def test_training_reduces_loss_and_counts_left_out_instances():
    x, e, y, m = arrays()
    y[:5] = 0  # no positive
    y[5:8] = 1  # no negative
    model, scaler, summary = train_prototype(x, e, y, m, config=TrainConfig(**TINY, seed=1))
    assert summary.dropped_no_positive == 5 and summary.dropped_no_negative == 3
    assert summary.val_carved and summary.n_train + summary.n_val == 112
    assert summary.n_val == round(0.1 * 112)
    assert summary.train_loss[-1] < summary.train_loss[0]
    assert summary.best_val_loss == min(summary.val_loss)
    assert not model.training
    assert scaler.mean_.shape == (10,) and np.isfinite(scaler.transform(x)).all()


def test_seeded_runs_are_identical_and_seeds_differ():
    x, e, y, m = arrays()
    a, _, _ = train_prototype(x, e, y, m, config=TrainConfig(**TINY, seed=3))
    b, _, _ = train_prototype(x, e, y, m, config=TrainConfig(**TINY, seed=3))
    c, _, _ = train_prototype(x, e, y, m, config=TrainConfig(**TINY, seed=4))
    for (k, va), vb in zip(a.state_dict().items(), b.state_dict().values()):
        assert torch.equal(va, vb), k
    assert not torch.equal(a.head.weight, c.head.weight)


def test_early_stopping_restores_best_weights():
    x, e, y, m = arrays(seed=2)
    xv, ev, yv, mv = arrays(n=40, seed=3)
    cfg = TrainConfig(**{**TINY, "max_epochs": 30, "patience": 2, "lr": 0.05}, seed=0)
    model, scaler, summary = train_prototype(x, e, y, m, xv, ev, yv, mv, config=cfg)
    assert not summary.val_carved and summary.n_val == 40
    assert summary.best_epoch == int(np.argmin(summary.val_loss)) + 1
    assert summary.epochs_run <= summary.best_epoch + 2
    from chunksel.training.trainer import _tensors, evaluate_loss

    restored = evaluate_loss(model, _tensors(scaler.transform(xv), ev, yv, mv, "cpu"), cfg.tau)
    assert restored == pytest.approx(summary.best_val_loss, rel=1e-5)


def test_too_few_usable_instances():
    x, e, y, m = arrays(n=6)
    y[:] = 0
    with pytest.raises(DataError, match="training instance"):
        train_prototype(x, e, y, m, config=TrainConfig(**TINY))


@pytest.mark.parametrize("n,batch", [(2, 1), (9, 4), (13, 4), (17, 4), (16, 4), (1, 4), (5, 4)])
def test_batches_hold_every_index_once_and_never_a_batch_of_one(n, batch):
    """A trailing batch of one joins the batch before it (BatchNorm cannot train on one),
    and no index is dropped or repeated (shuffled or not)."""
    import torch

    from chunksel.training.trainer import _batches

    for gen in (None, torch.Generator().manual_seed(0)):
        out = _batches(n, batch, gen)
        assert sorted(torch.cat(out).tolist()) == list(range(n))
        assert n == 1 or all(len(b) > 1 for b in out) or batch == 1
