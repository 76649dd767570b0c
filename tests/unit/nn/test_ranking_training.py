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
