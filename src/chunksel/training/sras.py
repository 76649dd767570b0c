"""Training of the SRAS scorer (:mod:`chunksel.nn.sras`): supervised warm-up, then PPO on
a QA reward with a curriculum from easy to hard questions (SRAS paper, Sec. III-D).

1. **Supervised warm-up** (Sec. III-D2, "a cross-entropy pretraining phase using gold
   QA document labels"): the multi-positive cross-entropy
   ``L = -log sum_{i in P} softmax(s)_i`` over instances with at least one positive and
   one negative real candidate (:func:`chunksel.training.losses.multi_positive_contrastive`
   at ``tau = 1``), AdamW, ``warmup_epochs`` passes.
2. **PPO** (:mod:`chunksel.training.ppo`): for each batch of ``batch_size`` questions,
   the current policy *samples* ``select_k`` distinct candidates (Plackett-Luce; the
   categorical softmax for ``select_k = 1``), ``reward_fn`` scores the choice, the
   rewards are normalised over the batch, the advantage is ``A = r_norm - V(q)``
   (GAE with one-step episodes; ``V`` is a small value head fitted to ``r_norm``), and
   ``update_epochs`` AdamW steps minimise
   ``L = L_clip(eps) - c_H * H(pi) + c_V * 0.5 (V(q) - r_norm)^2``.
3. **Curriculum** (Sec. III-D2, "we start training with easier QA pairs (higher top-1
   overlap)"): each question's ease is :func:`~chunksel.labels.answers.answer_overlap` of
   its top-ranked candidate (column 0) with its answers (1.0 = the top-1 chunk already
   holds every answer token). Questions are sorted easiest first (ties in a seeded random
   order); epoch ``e`` (0-based) of ``E`` draws its batches, shuffled, from the easiest
   ``p_e = start + (1 - start) * min(1, (e + 1) / ceil(ramp * E))`` of them, so the pool
   grows linearly to every question by the ``ramp`` share of the epochs (with ``E = 1``
   the single epoch sees every question). Without the curriculum every epoch shuffles
   every question.
"""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from tqdm.auto import tqdm

from chunksel.config import show_progress
from chunksel.errors import DataError
from chunksel.labels.answers import answer_overlap
from chunksel.nn.sras import SRASScorer, ValueHead
from chunksel.training.losses import multi_positive_contrastive
from chunksel.training.ppo import (
    PPOConfig,
    clipped_surrogate,
    gae_advantages,
    masked_entropy,
    normalise_batch,
    plackett_luce_log_prob,
    sample_topk,
)
from chunksel.training.rewards import RewardFn
from chunksel.training.trainer import seed_everything
from chunksel.types import Instance


@dataclass
class SRASTrainConfig:
    """Settings of :func:`train_sras`."""

    hidden: int = 256
    """attention width h"""
    value_hidden: int = 64
    """width of the value head (training only)"""
    select_k: int = 1
    """candidates picked per question (the action size)"""
    warmup_epochs: int = 10
    """supervised passes (0 = no warm-up: the paper's NoSW ablation)"""
    warmup_lr: float = 1e-3
    """AdamW learning rate of the warm-up"""
    warmup_batch_size: int = 32
    """instances per warm-up step"""
    ppo: PPOConfig = field(default_factory=PPOConfig)
    """the PPO phase (``ppo.epochs = 0``: warm-up only)"""
    max_questions: int | None = None
    """PPO budget: at most this many training questions (a seeded sample); None = all"""
    curriculum: bool = True
    """easy-to-hard pacing of the PPO questions (False: the paper's NoCL ablation)"""
    curriculum_start: float = 0.5
    """share of the easiest questions available in the first epoch"""
    curriculum_ramp: float = 0.5
    """share of the epochs after which every question is available"""
    seed: int = 0
    """seeds initialisation, shuffling and the rollouts' action sampling"""
    progress: bool = True
    """tqdm bars"""


@dataclass
class SRASSummary:
    """What happened during training (reward curves included)."""

    n_warmup: int = 0
    warmup_loss: list[float] = field(default_factory=list)
    n_ppo: int = 0
    ppo_epochs_run: int = 0
    reward_per_epoch: list[float] = field(default_factory=list)
    """mean raw reward of the sampled actions, per PPO epoch"""
    reward_per_batch: list[float] = field(default_factory=list)
    curriculum_share: list[float] = field(default_factory=list)
    entropy_per_epoch: list[float] = field(default_factory=list)
    clip_fraction_per_epoch: list[float] = field(default_factory=list)
    value_parameters: int = 0
    reward_calls: int = 0
    seconds_warmup: float = 0.0
    seconds_ppo: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


class SRASData:
    """Arrays of a set of instances as tensors, and the instances themselves."""

    def __init__(self, q: np.ndarray, e: np.ndarray, m: np.ndarray, y: np.ndarray,
                 instances: Sequence[Instance]) -> None:
        self.q = torch.as_tensor(np.ascontiguousarray(q), dtype=torch.float32)
        self.e = torch.as_tensor(np.ascontiguousarray(e), dtype=torch.float32)
        self.m = torch.as_tensor(np.asarray(m, dtype=bool))
        self.y = torch.as_tensor(np.asarray(y) >= 1)
        self.instances = list(instances)
        if not (len(self.q) == len(self.e) == len(self.m) == len(self.y) == len(self.instances)):
            raise DataError("SRASData: q, e, m, y and instances differ in length")

    def __len__(self) -> int:
        return int(self.q.shape[0])


def ease(instances: Sequence[Instance]) -> np.ndarray:
    """(N,) answer overlap of each instance's top-ranked candidate (higher = easier)."""
    out = np.zeros(len(instances))
    for i, inst in enumerate(instances):
        if inst.candidates:
            c = inst.candidates[0]
            out[i] = answer_overlap(f"{c.title} {c.text}", inst.question.answers)
    return out


def curriculum_share(epoch: int, epochs: int, start: float, ramp: float) -> float:
    """``p_e = start + (1 - start) * min(1, (e + 1) / ceil(ramp * E))`` (see the module doc)."""
    steps = max(1, math.ceil(ramp * epochs))
    return float(min(1.0, start + (1.0 - start) * min(1.0, (epoch + 1) / steps)))


def curriculum_order(overlap: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Indices easiest first (overlap descending), ties in a random order."""
    return np.lexsort((rng.permutation(len(overlap)), -overlap))


def warm_up(model: SRASScorer, data: SRASData, cfg: SRASTrainConfig, summary: SRASSummary) -> None:
    """Multi-positive cross-entropy on the labels (see the module docstring)."""
    pos = data.y & data.m
    keep = torch.nonzero(pos.any(1) & (data.m & ~pos).any(1)).squeeze(1)
    summary.n_warmup = int(len(keep))
    if cfg.warmup_epochs <= 0:
        return
    if len(keep) == 0:
        raise DataError(
            "the SRAS warm-up needs training instances with a positive and a negative candidate; "
            "none has both (set warmup_epochs=0 to skip it)"
        )
    t0 = time.perf_counter()
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.warmup_lr)
    gen = torch.Generator().manual_seed(cfg.seed)
    model.train()
    for _ in tqdm(range(cfg.warmup_epochs), desc="sras warm-up", unit="epoch", leave=False,
                  disable=not show_progress(cfg.progress)):
        total = 0.0
        for idx in keep[torch.randperm(len(keep), generator=gen)].split(cfg.warmup_batch_size):
            s = model(data.q[idx], data.e[idx], data.m[idx]).nan_to_num(neginf=-1e9)
            loss = multi_positive_contrastive(s, data.y[idx], data.m[idx], tau=1.0)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            total += float(loss.detach()) * len(idx)
        summary.warmup_loss.append(total / len(keep))
    summary.seconds_warmup = time.perf_counter() - t0


def train_ppo(model: SRASScorer, data: SRASData, reward_fn: RewardFn, cfg: SRASTrainConfig,
              summary: SRASSummary) -> ValueHead:
    """The PPO phase (see the module docstring); returns the fitted value head."""
    p = cfg.ppo
    value = ValueHead(int(data.q.shape[1]), cfg.value_hidden)
    summary.value_parameters = value.n_parameters()
    rng = np.random.default_rng(cfg.seed)
    usable = np.flatnonzero(data.m.sum(1).numpy() >= cfg.select_k)
    if cfg.max_questions is not None and len(usable) > cfg.max_questions:
        usable = np.sort(rng.choice(usable, size=cfg.max_questions, replace=False))
    summary.n_ppo = int(len(usable))
    if len(usable) == 0:
        raise DataError(f"no training instance has the {cfg.select_k} real candidates PPO picks")
    order = usable
    if cfg.curriculum:
        overlap = ease([data.instances[i] for i in usable])
        order = usable[curriculum_order(overlap, rng)]
    opt = torch.optim.AdamW([
        {"params": model.parameters(), "lr": p.lr},
        {"params": value.parameters(), "lr": p.value_lr},
    ], weight_decay=p.weight_decay)
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    t0 = time.perf_counter()
    bar = tqdm(range(p.epochs), desc="sras ppo", unit="epoch", leave=False,
               disable=not show_progress(cfg.progress))
    for epoch in bar:
        share = curriculum_share(epoch, p.epochs, cfg.curriculum_start, cfg.curriculum_ramp) if cfg.curriculum else 1.0
        pool = order[: max(1, math.ceil(share * len(order)))]
        pool = pool[rng.permutation(len(pool))]
        rewards, ents, clips = [], [], []
        for start in range(0, len(pool), p.batch_size):
            idx = torch.as_tensor(pool[start:start + p.batch_size])
            q, e, m = data.q[idx], data.e[idx], data.m[idx]
            # rollout: sample actions from the current policy
            model.eval()
            with torch.no_grad():
                logits = model(q, e, m)
                actions = sample_topk(logits, m, cfg.select_k, gen)
                logp_old = plackett_luce_log_prob(logits, m, actions)
                v_old = value(q)
            insts = [data.instances[int(i)] for i in idx]
            raw = np.asarray(reward_fn(insts, actions.tolist()), dtype=np.float64)
            if raw.shape != (len(insts),) or not np.isfinite(raw).all():
                raise DataError(f"reward_fn returned {raw.shape} / non-finite rewards for {len(insts)} questions")
            summary.reward_calls += 1
            r = torch.as_tensor(raw, dtype=torch.float32)
            r = normalise_batch(r) if p.normalise_rewards else r
            # one-step episodes: done = 1, so A = r - V(q) and the return is r
            adv, ret = gae_advantages(r[None], v_old[None], torch.ones(1, len(r)), torch.zeros(len(r)),
                                      p.gamma, p.gae_lambda)
            adv, ret = adv[0], ret[0]
            model.train()
            for _ in range(p.update_epochs):
                logits = model(q, e, m)
                logp = plackett_luce_log_prob(logits, m, actions)
                entropy = masked_entropy(logits, m).mean()
                pg = clipped_surrogate(logp, logp_old, adv, p.clip_eps)
                v_loss = 0.5 * ((value(q) - ret) ** 2).mean()
                loss = pg - p.entropy_coef * entropy + p.value_coef * v_loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(list(model.parameters()) + list(value.parameters()), p.max_grad_norm)
                opt.step()
                with torch.no_grad():
                    clips.append(float(((logp - logp_old).exp() - 1.0).abs().gt(p.clip_eps).float().mean()))
            rewards.append(raw)
            ents.append(float(entropy.detach()))
            summary.reward_per_batch.append(float(raw.mean()))
        mean_r = float(np.concatenate(rewards).mean())
        summary.reward_per_epoch.append(mean_r)
        summary.curriculum_share.append(share)
        summary.entropy_per_epoch.append(float(np.mean(ents)))
        summary.clip_fraction_per_epoch.append(float(np.mean(clips)) if clips else 0.0)
        summary.ppo_epochs_run = epoch + 1
        bar.set_postfix(reward=f"{mean_r:.3f}", share=f"{share:.2f}")
    bar.close()
    summary.seconds_ppo = time.perf_counter() - t0
    return value


def train_sras(data: SRASData, reward_fn: RewardFn | None, cfg: SRASTrainConfig | None = None,
               model: SRASScorer | None = None) -> tuple[SRASScorer, SRASSummary]:
    """Warm-up then PPO (see the module docstring).

    Args:
        data: the training arrays and instances.
        reward_fn: the reward (required when ``cfg.ppo.epochs > 0``).
        cfg: the recipe.
        model: a scorer to start from (default: a fresh one, seeded).

    Returns:
        ``(model, summary)``: the scorer in eval mode, and what happened.

    Raises:
        DataError: PPO is asked for without a reward function, or the data cannot train.
    """
    cfg = cfg or SRASTrainConfig()
    if cfg.ppo.epochs > 0 and reward_fn is None:
        raise DataError("SRAS PPO needs a reward function (reward_fn), or ppo epochs = 0 for warm-up only")
    seed_everything(cfg.seed)
    summary = SRASSummary()
    model = model or SRASScorer(int(data.q.shape[1]), cfg.hidden)
    warm_up(model, data, cfg, summary)
    if cfg.ppo.epochs > 0:
        train_ppo(model, data, reward_fn, cfg, summary)
    return model.eval(), summary
