"""Proximal Policy Optimization for chunk selection: the pieces, on raw tensors.

Chunk selection is a *one-step* episode (a contextual bandit): the state is a question
and its candidate pool, the action is the ordered choice of ``k`` distinct candidates,
the reward arrives at once and the episode ends. The pieces below are the textbook ones
(Schulman et al. 2017, "Proximal Policy Optimization Algorithms"; the layout follows
CleanRL's single-file ``ppo.py``) specialised to that case:

- :func:`sample_topk` / :func:`plackett_luce_log_prob`: the policy over ordered
  k-subsets is Plackett-Luce on the scores ``s``: pick ``a_1`` from ``softmax(s)``, then
  ``a_2`` from the softmax over the rest, ...; ``log pi(a) = sum_t [s_{a_t} -
  logsumexp_{j not in a_<t} s_j]``. Sampling uses the Gumbel-top-k trick (top-k of
  ``s + Gumbel noise``), which draws exactly that distribution. For ``k = 1`` it is the
  categorical softmax policy.
- :func:`normalise_batch`: per-batch reward normalisation, ``(R - mean) / (std + eps)``
  (SRAS paper, Sec. III-D2).
- :func:`gae_advantages`: generalised advantage estimation,
  ``delta_t = r_t + gamma V(s_{t+1}) (1 - done_t) - V(s_t)``,
  ``A_t = delta_t + gamma lambda (1 - done_t) A_{t+1}``. **For one-step episodes**
  ``done_0 = 1``, so both ``gamma`` and ``lambda`` multiply zero: ``A = r - V(s)``
  and the return is ``r``. ``gamma`` is kept in the configuration (the paper's 0.99)
  for honesty and for multi-step use, but it does not change the one-step update.
- :func:`clipped_surrogate`: ``L = E[max(-A rho, -A clip(rho, 1 - eps, 1 + eps))]``
  with ``rho = exp(log pi_new(a) - log pi_old(a))``.
- :func:`masked_entropy`: entropy of the first pick's softmax over real candidates (the
  entropy bonus; for ``k > 1`` it is the entropy of the first step, a lower-variance
  proxy of the Plackett-Luce entropy).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class PPOConfig:
    """Settings of the PPO phase (defaults: the SRAS paper, Sec. III-D1, where it gives them)."""

    epochs: int = 25
    """passes over the training questions (the paper's "Epochs: 25")"""
    batch_size: int = 8
    """questions per rollout batch (the paper's "Batch Size: 8")"""
    lr: float = 1e-5
    """AdamW learning rate of the policy (the paper's 1e-5)"""
    value_lr: float = 1e-3
    """AdamW learning rate of the value head (its own group: at 1e-5 it would hardly move)"""
    weight_decay: float = 0.0
    """AdamW weight decay"""
    clip_eps: float = 0.2
    """PPO ratio clip epsilon (the paper's 0.2)"""
    gamma: float = 0.99
    """discount (the paper's 0.99); multiplies zero in one-step episodes, see the module doc"""
    gae_lambda: float = 0.95
    """GAE lambda; likewise inert in one-step episodes"""
    update_epochs: int = 4
    """gradient steps on each rollout batch (the clipped ratio matters from the second one)"""
    entropy_coef: float = 0.01
    """weight of the entropy bonus"""
    value_coef: float = 0.5
    """weight of the value loss ``0.5 (V(q) - return)^2``"""
    max_grad_norm: float = 0.5
    """gradient clipping (global norm)"""
    normalise_rewards: bool = True
    """per-batch reward normalisation to zero mean, unit variance (paper, Sec. III-D2)"""


def normalise_batch(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """``(x - mean(x)) / (std(x) + eps)`` over the batch (population std).

    A batch of one, or a batch whose values are all equal, becomes zeros: it carries no
    signal about which action was better.
    """
    x = x.float()
    centred = x - x.mean()
    if x.numel() < 2:
        return centred
    return centred / (x.std(unbiased=False) + eps)


def gae_advantages(
    rewards: torch.Tensor,
    values: torch.Tensor,
    dones: torch.Tensor,
    last_value: torch.Tensor,
    gamma: float,
    lam: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Generalised advantage estimation over ``T`` steps of ``B`` parallel episodes.

    Args:
        rewards: (T, B) rewards ``r_t``.
        values: (T, B) ``V(s_t)``.
        dones: (T, B) 1 where the episode ends after step ``t``.
        last_value: (B,) ``V(s_T)`` for bootstrapping unfinished episodes.
        gamma: discount.
        lam: GAE lambda.

    Returns:
        ``(advantages, returns)``, both (T, B); ``returns = advantages + values``. With
        ``T = 1`` and ``dones = 1`` this is ``(r - V, r)`` whatever ``gamma`` and ``lam``.
    """
    T = rewards.shape[0]
    adv = torch.zeros_like(rewards, dtype=torch.float32)
    next_adv = torch.zeros_like(last_value, dtype=torch.float32)
    next_value = last_value.float()
    for t in reversed(range(T)):
        live = 1.0 - dones[t].float()
        delta = rewards[t] + gamma * next_value * live - values[t]
        next_adv = delta + gamma * lam * live * next_adv
        adv[t] = next_adv
        next_value = values[t]
    return adv, adv + values


def clipped_surrogate(
    logp_new: torch.Tensor, logp_old: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> torch.Tensor:
    """PPO's clipped policy loss (to minimise).

    ``L = mean_b max(-A_b rho_b, -A_b clip(rho_b, 1 - eps, 1 + eps))``,
    ``rho_b = exp(logp_new_b - logp_old_b)``.
    """
    ratio = torch.exp(logp_new - logp_old)
    loss1 = -advantages * ratio
    loss2 = -advantages * torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    return torch.max(loss1, loss2).mean()


def _masked(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return logits.masked_fill(~mask.bool(), float("-inf"))


def sample_topk(
    logits: torch.Tensor, mask: torch.Tensor, k: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Sample ``k`` distinct real candidates per row from the Plackett-Luce policy.

    Gumbel-top-k: ``argtop-k(s_i + g_i)``, ``g_i ~ Gumbel(0, 1)`` i.i.d.

    Args:
        logits: (B, K) scores.
        mask: (B, K) bool, True at real candidates; every row needs at least ``k``.
        k: picks per row.
        generator: torch RNG (reproducible rollouts).

    Returns:
        (B, k) long column indices, in pick order.
    """
    if int(mask.sum(dim=1).min()) < k:
        raise ValueError(f"every row needs at least k={k} real candidates")
    u = torch.rand(logits.shape, generator=generator, dtype=torch.float32)
    gumbel = -torch.log(-torch.log(u.clamp(1e-20, 1.0 - 1e-7)))
    return torch.topk(_masked(logits.detach() + gumbel, mask), k, dim=1).indices


def greedy_topk(logits: torch.Tensor, mask: torch.Tensor, k: int) -> torch.Tensor:
    """(B, k) the ``k`` best real candidates (ties to the lower column)."""
    return torch.topk(_masked(logits, mask), k, dim=1, sorted=True).indices


def plackett_luce_log_prob(logits: torch.Tensor, mask: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
    """(B,) ``log pi(a_1, .., a_k) = sum_t [s_{a_t} - logsumexp_{j real, not in a_<t} s_j]``."""
    s = _masked(logits, mask)
    out = torch.zeros(logits.shape[0], dtype=logits.dtype, device=logits.device)
    avail = mask.bool().clone()
    rows = torch.arange(logits.shape[0], device=logits.device)
    for t in range(actions.shape[1]):
        a = actions[:, t]
        out = out + s[rows, a] - torch.logsumexp(s.masked_fill(~avail, float("-inf")), dim=1)
        avail = avail.clone()
        avail[rows, a] = False
    return out


def masked_entropy(logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(B,) entropy ``-sum_i p_i log p_i`` of ``softmax(s)`` over the real candidates."""
    logp = torch.log_softmax(_masked(logits, mask), dim=1)
    p = logp.exp()
    return -(p * logp.masked_fill(~mask.bool(), 0.0)).sum(dim=1)
