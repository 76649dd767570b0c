from __future__ import annotations

import math

import pytest
import torch

from chunksel.training.losses import MultiPositiveContrastiveLoss, multi_positive_contrastive


def test_hand_computed_value():
    # one instance, scores (0.5, 0.2, -0.1), positives {0, 1}, tau 0.5
    # L = -log((e^1 + e^0.4) / (e^1 + e^0.4 + e^-0.2))
    s = torch.tensor([[0.5, 0.2, -0.1]])
    y = torch.tensor([[1, 1, 0]])
    want = -math.log((math.exp(1.0) + math.exp(0.4)) / (math.exp(1.0) + math.exp(0.4) + math.exp(-0.2)))
    got = multi_positive_contrastive(s, y, tau=0.5)
    assert got.item() == pytest.approx(want, rel=1e-6)
    assert want == pytest.approx(0.1777, abs=1e-4)  # 2.7183+1.4918 over that + 0.8187


def test_mean_over_batch_and_single_positive_is_cross_entropy():
    s = torch.tensor([[0.9, 0.1, 0.3], [0.0, 0.4, -0.2]])
    y = torch.tensor([[0, 1, 0], [1, 0, 0]])
    tau = 0.1
    ce = torch.nn.functional.cross_entropy(s / tau, torch.tensor([1, 0]))
    torch.testing.assert_close(multi_positive_contrastive(s, y, tau=tau), ce)


def test_padded_candidates_are_ignored():
    s = torch.tensor([[0.5, 0.2, -0.1, 0.99, 0.7]])
    y = torch.tensor([[1, 0, 0, 0, 1]])  # a label at a padded slot must not count either
    m = torch.tensor([[True, True, True, False, False]])
    want = multi_positive_contrastive(s[:, :3], y[:, :3], tau=0.05)
    got = multi_positive_contrastive(s, y, m, tau=0.05)
    torch.testing.assert_close(got, want)
    # changing padded scores changes nothing
    s2 = s.clone()
    s2[0, 3:] = -5.0
    torch.testing.assert_close(multi_positive_contrastive(s2, y, m, tau=0.05), want)


def test_rows_without_positive_are_left_out_of_the_mean():
    s = torch.tensor([[0.5, 0.2], [0.3, 0.1]])
    y = torch.tensor([[1, 0], [0, 0]])
    per = multi_positive_contrastive(s, y, tau=0.1, reduction="none")
    assert per[1].item() == 0.0
    assert multi_positive_contrastive(s, y, tau=0.1).item() == pytest.approx(per[0].item())


def test_all_positive_gives_zero_and_gradients_are_finite():
    s = torch.tensor([[0.5, 0.2, 0.1]], requires_grad=True)
    loss = multi_positive_contrastive(s, torch.ones(1, 3), torch.tensor([[True, True, False]]), tau=0.02)
    assert loss.item() == pytest.approx(0.0, abs=1e-6)
    loss.backward()
    assert torch.isfinite(s.grad).all()


def test_module_scores_with_cosines():
    y = torch.nn.functional.normalize(torch.tensor([[1.0, 1.0]]), dim=-1)
    e = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]]])
    lab = torch.tensor([[1, 0, 0]])
    loss = MultiPositiveContrastiveLoss(tau=0.5)(y, e, lab)
    c = 1 / math.sqrt(2)
    want = -math.log(math.exp(c / 0.5) / (2 * math.exp(c / 0.5) + math.exp(-c / 0.5)))
    assert loss.item() == pytest.approx(want, rel=1e-6)


def test_bad_tau():
    with pytest.raises(ValueError, match="tau"):
        multi_positive_contrastive(torch.zeros(1, 2), torch.ones(1, 2), tau=0.0)
