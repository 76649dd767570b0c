"""The SRAS scorer: parameter count, shapes, masking and the softmax policy."""

from __future__ import annotations

import math

import torch

from chunksel.nn.sras import SRASScorer, ValueHead


def test_parameter_count_matches_the_paper() -> None:
    model = SRASScorer(emb_dim=384, hidden=256)
    # W_q (256 x 384) + b (256) + W_d (256 x 384) + w (256)
    assert model.n_parameters() == 2 * 384 * 256 + 256 + 256 == 197_120
    assert 4 * model.n_parameters() / 2**20 < 0.76  # float32: 0.75 MiB


def test_scores_shape_mask_and_policy() -> None:
    torch.manual_seed(0)
    model = SRASScorer(emb_dim=8, hidden=4)
    q, e = torch.randn(3, 8), torch.randn(3, 5, 8)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1, 3:] = False
    s = model(q, e, mask)
    assert s.shape == (3, 5)
    assert torch.isneginf(s[1, 3:]).all() and torch.isfinite(s[mask]).all()
    p = model.log_policy(q, e, mask).exp()
    torch.testing.assert_close(p.sum(1), torch.ones(3))
    assert (p[1, 3:] == 0).all()
    # unmasked scores equal masked ones at real slots; each candidate is scored on its own
    torch.testing.assert_close(model(q, e)[mask], s[mask])
    torch.testing.assert_close(model(q, e[:, [4, 0, 1, 2, 3]])[:, 0], model(q, e)[:, 4])


def test_score_is_the_additive_attention_formula() -> None:
    torch.manual_seed(1)
    model = SRASScorer(emb_dim=6, hidden=3)
    q, e = torch.randn(1, 6), torch.randn(1, 2, 6)
    want = torch.stack([
        model.w.weight[0] @ torch.tanh(model.w_q.weight @ q[0] + model.w_q.bias + model.w_d.weight @ e[0, i])
        for i in range(2)
    ])
    torch.testing.assert_close(model(q, e)[0], want)


def test_value_head_starts_at_zero() -> None:
    v = ValueHead(emb_dim=384, hidden=64)
    assert v(torch.randn(4, 384)).shape == (4,)
    assert torch.equal(v(torch.randn(2, 384)), torch.zeros(2))
    assert v.n_parameters() == 384 * 64 + 64 + 64 + 1
    assert math.isclose(v.n_parameters(), 24_705)
