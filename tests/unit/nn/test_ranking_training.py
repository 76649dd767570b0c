from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from chunksel.training.ranking import (
    RankingData,
    pairwise_hinge_loss,
    ranking_loss,
    softmax_ranking_loss,
)


def test_softmax_loss_with_several_positives_and_padding() -> None:
    s = torch.tensor([[1.0, 2.0, 0.5, 9.0]])
    y = torch.tensor([[1, 0, 1, 1]])
    m = torch.tensor([[True, True, True, False]])  # the 9.0 is padding
    expected = -math.log((math.exp(1.0) + math.exp(0.5)) / (math.exp(1.0) + math.exp(2.0) + math.exp(0.5)))
    assert softmax_ranking_loss(s, y, m).item() == pytest.approx(expected, rel=1e-6)


def test_pairwise_hinge_loss() -> None:
    s = torch.tensor([[1.0, 0.8, -1.0, 5.0]])
    y = torch.tensor([[1, 0, 0, 0]])
    m = torch.tensor([[True, True, True, False]])
    # pairs (0,1): max(0, 1 - 1 + 0.8) = 0.8; (0,2): max(0, 1 - 1 - 1) = 0
    assert pairwise_hinge_loss(s, y, m).item() == pytest.approx(0.4)
    with pytest.raises(ValueError, match="unknown"):
        ranking_loss("listnet", s, y, m)


def test_contested_keeps_instances_with_both_labels() -> None:
    n, k, length = 3, 2, 4
    data = RankingData(
        q_ids=np.ones((n, length), np.int64), q_mask=np.ones((n, length), bool),
        d_ids=np.ones((n, k, length), np.int64), d_mask=np.ones((n, k, length), bool),
        cand_mask=np.array([[True, True], [True, True], [True, False]]),
        labels=np.array([[1, 0], [1, 1], [0, 1]], np.int8),
    )
    kept = data.contested()
    assert len(kept) == 1 and kept.labels.tolist() == [[1, 0]]


def _toy_ranking_data(seed: int, n: int = 24, k: int = 4, lq: int = 6, ld: int = 15, vocab: int = 40) -> RankingData:
    """Questions whose positive candidate repeats their terms (a learnable signal)."""
    rng = np.random.default_rng(seed)
    q = rng.integers(1, vocab, (n, lq))
    d = rng.integers(1, vocab, (n, k, ld))
    labels = np.zeros((n, k), np.int8)
    for i in range(n):
        j = int(rng.integers(k))
        labels[i, j] = 1
        d[i, j, : lq] = q[i]
    q_mask = np.ones((n, lq), bool)
    q_mask[::3, -2:] = False  # some short questions
    d_mask = np.ones((n, k, ld), bool)
    d_mask[:, :, -int(rng.integers(1, 5)):] = False
    return RankingData(q * q_mask, q_mask, d * d_mask, d_mask, np.ones((n, k), bool), labels)


@pytest.mark.parametrize("model_name", ["knrm", "drmm"])
def test_frozen_embeddings_train_identically_from_cached_inputs(model_name: str) -> None:
    from chunksel.nn.drmm import DRMM
    from chunksel.nn.knrm import KNRM
    from chunksel.training.ranking import RankingTrainConfig, score_ranking_data, train_ranker

    train, val = _toy_ranking_data(0), _toy_ranking_data(1)
    weights = {}
    for cached in (True, False):
        torch.manual_seed(0)
        table = torch.randn(40, 8)
        model = KNRM(40, 8, table, train_embeddings=False) if model_name == "knrm" else DRMM(
            40, 8, table, train_embeddings=False, n_bins=6)
        assert model.cacheable
        cfg = RankingTrainConfig(loss="hinge", lr=1e-2, batch_size=5, max_epochs=4, patience=10,
                                 progress=False, cache_inputs=cached)
        hist = train_ranker(model, train, val, cfg)
        weights[cached] = ({k: v.clone() for k, v in model.state_dict().items()}, hist,
                           score_ranking_data(model, val))
    (w1, h1, s1), (w0, h0, s0) = weights[True], weights[False]
    assert h1.train_loss == pytest.approx(h0.train_loss, rel=1e-5)
    assert h1.val_loss == pytest.approx(h0.val_loss, rel=1e-5)
    for name in w1:
        torch.testing.assert_close(w1[name], w0[name], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s1, s0, rtol=1e-5, atol=1e-6)
    assert h1.train_loss[-1] < h1.train_loss[0]  # it learned something


@pytest.mark.parametrize("model_name", ["knrm", "drmm"])
def test_trainable_embeddings_are_not_cached_and_learn(model_name: str) -> None:
    from chunksel.nn.drmm import DRMM
    from chunksel.nn.knrm import KNRM
    from chunksel.training.ranking import RankingTrainConfig, train_ranker

    torch.manual_seed(0)
    table = torch.randn(40, 8)
    model = KNRM(40, 8, table, train_embeddings=True) if model_name == "knrm" else DRMM(
        40, 8, table, train_embeddings=True, n_bins=6)
    assert not model.cacheable
    train_ranker(model, _toy_ranking_data(0), None,
                 RankingTrainConfig(loss="hinge", lr=1e-2, batch_size=5, max_epochs=2, progress=False))
    assert not torch.equal(model.embedding.weight.detach(), table)  # gradients reached the table
