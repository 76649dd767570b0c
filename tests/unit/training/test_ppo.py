"""PPO pieces on hand-computed cases, and a toy bandit the policy must solve."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from chunksel.training.ppo import (
    PPOConfig,
    clipped_surrogate,
    gae_advantages,
    masked_entropy,
    normalise_batch,
    plackett_luce_log_prob,
    sample_topk,
)
from chunksel.training.sras import SRASData, SRASTrainConfig, curriculum_share, train_sras
from chunksel.types import Candidate, Instance, Question


def test_clipped_surrogate_hand_computed() -> None:
    ratio = torch.tensor([1.5, 0.5, 1.1, 0.7])
    adv = torch.tensor([1.0, 1.0, -1.0, -1.0])
    logp_old = torch.full((4,), math.log(0.5))
    logp_new = (logp_old + torch.log(ratio)).requires_grad_()
    loss = clipped_surrogate(logp_new, logp_old, adv, 0.2)
    # per item max(-A r, -A clip(r, 0.8, 1.2)): -1.2, -0.5, 1.1, 0.8
    assert loss.item() == pytest.approx((-1.2 - 0.5 + 1.1 + 0.8) / 4)
    loss.backward()
    # d/dlogp of -A r / 4 = -A r / 4 where unclipped; 0 where the clipped term is taken
    torch.testing.assert_close(logp_new.grad, torch.tensor([0.0, -0.5 / 4, 1.1 / 4, 0.0]))


def test_gae_one_step_ignores_gamma_and_matches_a_two_step_hand_case() -> None:
    r, v = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.25, 0.5]])
    for gamma in (0.0, 0.99):
        adv, ret = gae_advantages(r, v, torch.ones(1, 2), torch.tensor([9.0, 9.0]), gamma, 0.95)
        torch.testing.assert_close(adv, r - v)
        torch.testing.assert_close(ret, r)
    adv, ret = gae_advantages(torch.tensor([[1.0], [2.0]]), torch.tensor([[0.5], [0.5]]),
                              torch.tensor([[0.0], [1.0]]), torch.tensor([0.0]), 0.9, 1.0)
    # delta_1 = 2 - 0.5; delta_0 = 1 + 0.9 * 0.5 - 0.5; A_0 = delta_0 + 0.9 * A_1
    torch.testing.assert_close(adv, torch.tensor([[0.95 + 0.9 * 1.5], [1.5]]))
    torch.testing.assert_close(ret, adv + 0.5)


def test_normalise_batch() -> None:
    x = normalise_batch(torch.tensor([0.0, 1.0, 2.0, 5.0]))
    assert x.mean().abs() < 1e-6 and x.std(unbiased=False) == pytest.approx(1.0, abs=1e-6)
    assert torch.equal(normalise_batch(torch.tensor([0.3, 0.3])), torch.zeros(2))
    assert torch.equal(normalise_batch(torch.tensor([0.7])), torch.zeros(1))


def test_plackett_luce_log_prob_and_entropy() -> None:
    logits = torch.log(torch.tensor([[1.0, 2.0, 3.0, 100.0]]))
    mask = torch.tensor([[True, True, True, False]])
    # pick 2 (p = 3/6), then 0 among {0, 1} (p = 1/3)
    lp = plackett_luce_log_prob(logits, mask, torch.tensor([[2, 0]]))
    assert lp.item() == pytest.approx(math.log(3 / 6 * 1 / 3))
    assert masked_entropy(torch.zeros(1, 4), mask).item() == pytest.approx(math.log(3))


def test_sample_topk_distinct_real_and_distributed_as_softmax() -> None:
    gen = torch.Generator().manual_seed(0)
    logits = torch.log(torch.tensor([[1.0, 2.0, 5.0, 1.0]])).repeat(4000, 1)
    mask = torch.tensor([[True, True, True, False]]).repeat(4000, 1)
    a = sample_topk(logits, mask, 2, gen)
    assert (a != 3).all() and (a[:, 0] != a[:, 1]).all()
    freq = torch.bincount(sample_topk(logits, mask, 1, gen)[:, 0], minlength=4).float() / 4000
    torch.testing.assert_close(freq, torch.tensor([0.125, 0.25, 0.625, 0.0]), atol=0.03, rtol=0)


def test_curriculum_share_grows_to_one() -> None:
    shares = [curriculum_share(e, 10, 0.5, 0.5) for e in range(10)]
    assert shares[0] == pytest.approx(0.6) and shares[4:] == [1.0] * 6
    assert curriculum_share(0, 1, 0.5, 0.5) == 1.0


def _bandit(n: int = 24, k: int = 4, dim: int = 6, seed: int = 0) -> list[Instance]:
    """Every question has one 'good' candidate (same embedding everywhere, random column)."""
    rng = np.random.default_rng(seed)
    protos = np.eye(dim, dtype=np.float32)[:k]
    out = []
    for i in range(n):
        good = int(rng.integers(k))
        order = [good] + [j for j in range(k) if j != good]
        cols = rng.permutation(k)
        cands = [None] * k
        for proto, col in zip(order, cols):
            emb = protos[proto] + 0.05 * rng.normal(size=dim).astype(np.float32)
            cands[col] = Candidate(id=f"b{i}-{'good' if proto == good else proto}", text="x", rank=int(col),
                                   labels={"containment": 0}, embedding=emb / np.linalg.norm(emb))
        q = Question(id=f"bandit:{i}", text=f"question {i}", answers=["x"])
        q.embedding = rng.normal(size=dim).astype(np.float32)
        out.append(Instance(q, cands, "train"))
    return out


def _good_reward(instances, actions):
    return np.array([float(inst.candidates[a[0]].id.endswith("good")) for inst, a in zip(instances, actions)])


def test_toy_bandit_policy_learns_the_rewarded_candidate() -> None:
    insts = _bandit()
    k, dim = len(insts[0].candidates), 6
    q = np.stack([i.question.embedding for i in insts])
    e = np.stack([[c.embedding for c in i.candidates] for i in insts])
    data = SRASData(q, e, np.ones((len(insts), k), bool), np.zeros((len(insts), k)), insts)
    cfg = SRASTrainConfig(hidden=16, warmup_epochs=0, curriculum=False, seed=0, progress=False,
                          ppo=PPOConfig(epochs=30, lr=3e-2, batch_size=8, update_epochs=4))
    model, summary = train_sras(data, _good_reward, cfg)
    first, last = summary.reward_per_epoch[0], summary.reward_per_epoch[-1]
    assert first < 0.6 and last > 0.9, summary.reward_per_epoch
    with torch.no_grad():
        pick = model(data.q, data.e).argmax(1).tolist()
    assert np.mean(_good_reward(insts, [[p] for p in pick])) == 1.0
    assert summary.ppo_epochs_run == 30 and summary.reward_calls == 30 * 3
    assert dim == data.q.shape[1]
