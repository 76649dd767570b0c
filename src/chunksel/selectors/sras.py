"""SRAS: the additive-attention selector trained with a supervised warm-up and PPO on a
QA reward (SRAS paper; scorer :mod:`chunksel.nn.sras`, training :mod:`chunksel.training.sras`).

Inputs are the frozen MiniLM embeddings the instances already carry: the question's
(``Question.embedding``) and each candidate's (``Candidate.embedding``), both 384-d and
L2-normalised. No generator features, no corpus statistics: ``query_cost = "none"``.

``fit(train, features=None, val=None, reward_fn=None)`` runs the warm-up on the
training labels and then PPO with

- ``reward_fn`` when given (any ``(instances, actions) -> (B,)`` callable);
- else the reward named by ``reward``: ``"hybrid"`` (``0.6 RelaxedF1 + 0.4 BERTScoreF1``
  of the answer the frozen generator -- SmolLM2 by default, greedy, 32 new tokens --
  gives from the chosen chunk(s), cached in the LLM response cache), ``"sparse"`` (its
  exact match) or ``"label"`` (the share of chosen chunks that are positive; no LLM).

``ppo_epochs=0`` trains the warm-up only (the paper's "Supervised (FF)" baseline: same
architecture, cross-entropy). With ``ppo_epochs > 0`` a reward that cannot be built
(missing ``bert-score`` / ``transformers``, no generator) is an error raised *before*
training, never a silent warm-up-only model.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from chunksel.errors import ChunkselError, ConfigError, DataError, MissingExtraError
from chunksel.nn.sras import SRASScorer
from chunksel.selectors.base import QuestionFeatures, Selector
from chunksel.selectors.embedding_arrays import embedding_arrays
from chunksel.training.ppo import PPOConfig
from chunksel.training.rewards import RewardFn
from chunksel.training.sras import SRASData, SRASTrainConfig, train_sras
from chunksel.types import Instance

WEIGHTS = "model.safetensors"
REWARDS = ("hybrid", "sparse", "label")


class SRASSelector(Selector):
    """Additive attention ``s_i = w^T tanh(W_q q + W_d d_i)`` over frozen embeddings, PPO-trained.

    Args:
        k: candidates per instance (K); fewer are padded and masked, more are cut.
        select_k: chunks the policy picks per question during PPO (the action size; the
            paper uses 3 of 8, the benchmark 1 of 5). Scoring always ranks all K.
        hidden: attention width h (256: 197,120 parameters at d = 384).
        warmup_epochs, warmup_lr: the supervised warm-up (0 epochs = none).
        ppo_epochs: PPO passes over the training questions (0 = warm-up only).
        max_questions: PPO budget in questions (a seeded sample); None = all.
        batch_size, lr, clip_eps, gamma, gae_lambda, update_epochs, entropy_coef,
            value_coef, value_hidden, value_lr: PPO (see :class:`PPOConfig`).
        normalise_rewards: per-batch reward normalisation.
        curriculum, curriculum_start, curriculum_ramp: easy-to-hard pacing.
        reward: ``"hybrid"``, ``"sparse"`` or ``"label"`` (ignored when ``fit`` gets a
            ``reward_fn``).
        alpha: relaxed-F1 weight of the hybrid reward.
        generator: the frozen answer generator (local folder or ``.gguf``; None = SmolLM2).
        max_new_tokens: generation limit of the reward's answers.
        seed: seeds initialisation, shuffling and rollouts.
        label: label spec for the warm-up (default: each instance's own).
        progress: progress bars.
        encoder_id: id of the encoder that produced the embeddings (recorded).
    """

    name = "sras"
    display_name = "SRAS"
    family = "rl"
    role = "baseline"
    requires_fit = True
    query_cost = "none"

    def required_inputs(self) -> frozenset[str]:
        """What it reads at query time (:func:`chunksel.selectors.provenance.selector_inputs`):
        the MiniLM embeddings of the question and of each chunk."""
        return frozenset({"chunk_embedding", "question_embedding"})

    def __init__(
        self,
        k: int = 5,
        select_k: int = 1,
        hidden: int = 256,
        warmup_epochs: int = 10,
        warmup_lr: float = 1e-3,
        ppo_epochs: int = 25,
        max_questions: int | None = None,
        batch_size: int = 8,
        lr: float = 1e-5,
        clip_eps: float = 0.2,
        gamma: float = 0.99,
        gae_lambda: float = 0.95,
        update_epochs: int = 4,
        entropy_coef: float = 0.01,
        value_coef: float = 0.5,
        value_hidden: int = 64,
        value_lr: float = 1e-3,
        normalise_rewards: bool = True,
        curriculum: bool = True,
        curriculum_start: float = 0.5,
        curriculum_ramp: float = 0.5,
        reward: str = "hybrid",
        alpha: float = 0.6,
        generator: str | None = None,
        max_new_tokens: int = 32,
        seed: int = 0,
        label: str | None = None,
        progress: bool = True,
        encoder_id: str = "",
    ) -> None:
        self.k = k
        self.select_k = select_k
        self.hidden = hidden
        self.warmup_epochs = warmup_epochs
        self.warmup_lr = warmup_lr
        self.ppo_epochs = ppo_epochs
        self.max_questions = max_questions
        self.batch_size = batch_size
        self.lr = lr
        self.clip_eps = clip_eps
        self.gamma = gamma
        self.gae_lambda = gae_lambda
        self.update_epochs = update_epochs
        self.entropy_coef = entropy_coef
        self.value_coef = value_coef
        self.value_hidden = value_hidden
        self.value_lr = value_lr
        self.normalise_rewards = normalise_rewards
        self.curriculum = curriculum
        self.curriculum_start = curriculum_start
        self.curriculum_ramp = curriculum_ramp
        self.reward = reward
        self.alpha = alpha
        self.generator = generator
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.label = label
        self.progress = progress
        self.encoder_id = encoder_id

    # ------------------------------------------------------------------ config
    def _validate(self) -> None:
        for name in ("k", "select_k", "hidden", "batch_size", "update_epochs", "value_hidden", "max_new_tokens"):
            if int(getattr(self, name)) < 1:
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.select_k > self.k:
            raise ConfigError(f"select_k ({self.select_k}) must be <= k ({self.k})")
        for name in ("warmup_epochs", "ppo_epochs"):
            if int(getattr(self, name)) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.max_questions is not None and self.max_questions < 1:
            raise ConfigError(f"max_questions must be >= 1 or None, got {self.max_questions}")
        if self.reward not in REWARDS:
            raise ConfigError(f"reward must be one of {REWARDS}, got {self.reward!r}")
        if not 0 < self.clip_eps < 1:
            raise ConfigError(f"clip_eps must be in (0, 1), got {self.clip_eps}")
        if not 0 < self.curriculum_start <= 1 or not 0 < self.curriculum_ramp <= 1:
            raise ConfigError("curriculum_start and curriculum_ramp must be in (0, 1]")

    def train_config(self) -> SRASTrainConfig:
        """The :class:`SRASTrainConfig` these settings describe."""
        return SRASTrainConfig(
            hidden=self.hidden, value_hidden=self.value_hidden, select_k=self.select_k,
            warmup_epochs=self.warmup_epochs, warmup_lr=self.warmup_lr,
            ppo=PPOConfig(
                epochs=self.ppo_epochs, batch_size=self.batch_size, lr=self.lr, value_lr=self.value_lr,
                clip_eps=self.clip_eps, gamma=self.gamma, gae_lambda=self.gae_lambda,
                update_epochs=self.update_epochs, entropy_coef=self.entropy_coef,
                value_coef=self.value_coef, normalise_rewards=self.normalise_rewards,
            ),
            max_questions=self.max_questions, curriculum=self.curriculum,
            curriculum_start=self.curriculum_start, curriculum_ramp=self.curriculum_ramp,
            seed=self.seed, progress=self.progress,
        )

    def build_reward(self) -> RewardFn:
        """The reward named by ``reward``; raises a clear error when it cannot be built.

        Raises:
            MissingExtraError: ``bert-score`` or ``transformers`` is not installed.
            ConfigError: the generator cannot be loaded.
        """
        from chunksel.training.rewards import AnswerGenerator, LabelReward, QAReward

        if self.reward == "label":
            return LabelReward(self.label)
        hint = ("SRAS's PPO phase needs its QA reward (a local generator and bert-score): "
                "install 'chunksel[sras]', pass fit(..., reward_fn=...), use reward='label', "
                "or set ppo_epochs=0 for warm-up only")
        try:
            from chunksel.errors import require

            require("transformers", "sras")
            from chunksel.llm.local import LocalBackend

            backend = LocalBackend(self.generator)
            backend.model_id  # noqa: B018 - loads the generator now, so a failure comes before training
            bertscore = None
            if self.reward == "hybrid":
                from chunksel.labels.answers import BertScoreF1

                bertscore = BertScoreF1()
        except MissingExtraError as err:
            raise MissingExtraError(f"{err}. {hint}") from err
        except (ChunkselError, OSError) as err:
            raise ConfigError(f"cannot load the SRAS reward's generator {self.generator!r}: {err}. {hint}") from err
        gen = AnswerGenerator(backend, max_new_tokens=self.max_new_tokens, progress=False)
        return QAReward(gen, mode=self.reward, alpha=self.alpha, bertscore=bertscore)

    # ------------------------------------------------------------------ arrays
    def _arrays(self, batch: Sequence[Instance], labels: bool) -> tuple[np.ndarray, ...]:
        """``q`` (B, d), ``e`` (B, K, d) (zeros at padding), mask (B, K) and labels (B, K)."""
        q, e, m = embedding_arrays(batch, self.k, getattr(self, "emb_dim_", None), "SRAS")
        y = np.zeros((len(batch), self.k), dtype=np.int8)
        if labels:
            for i, inst in enumerate(batch):
                lab = inst.labels(self.label)[: self.k]
                y[i, : len(lab)] = lab
        return q, e, m, y

    # ----------------------------------------------------------------- fitting
    def fit(
        self,
        train: Sequence[Instance],
        features: QuestionFeatures | None = None,
        val: Sequence[Instance] | None = None,
        reward_fn: RewardFn | None = None,
    ) -> SRASSelector:
        """Warm-up on the labels of ``train``, then PPO on ``reward_fn`` (or ``reward``).

        ``features`` and ``val`` are not used (SRAS reads only embeddings; the paper
        selects no checkpoint).
        """
        self._validate()
        self.fitted_ = False
        train = list(train)
        if not train:
            raise DataError("SRAS needs training instances")
        if self.ppo_epochs > 0 and reward_fn is None:
            reward_fn = self.build_reward()
        q, e, m, y = self._arrays(train, labels=True)
        self.emb_dim_ = int(e.shape[2])
        data = SRASData(q, e, m, y, [
            Instance(inst.question, inst.candidates[: self.k], inst.split, inst.label_source) for inst in train
        ])
        model, summary = train_sras(data, reward_fn, self.train_config())
        self.model_ = model
        self.summary_ = summary.to_dict()
        self.fitted_ = True
        return self

    def n_parameters(self) -> int:
        self._check_fitted()
        return self.model_.n_parameters()

    @torch.inference_mode()
    def _score(self, batch: Sequence[Instance], features: QuestionFeatures | None, k: int) -> np.ndarray:
        q, e, m, _ = self._arrays(batch, labels=False)
        s = self.model_(torch.from_numpy(q), torch.from_numpy(e)).numpy()
        return s[:, : min(k, self.k)]

    # --------------------------------------------------------------- save/load
    def _state_config(self) -> dict[str, Any]:
        keep = ("n_warmup", "n_ppo", "ppo_epochs_run", "reward_per_epoch", "value_parameters", "reward_calls")
        return {"emb_dim": self.emb_dim_, "n_parameters": self.model_.n_parameters(),
                "summary": {k: v for k, v in self.summary_.items() if k in keep}}

    def _save_state(self, path: Path) -> None:
        from safetensors.torch import save_file

        save_file({k: v.contiguous() for k, v in self.model_.state_dict().items()}, str(path / WEIGHTS))

    def _load_state(self, path: Path, state: dict[str, Any]) -> None:
        from safetensors.torch import load_file

        try:
            self.emb_dim_ = int(state["emb_dim"])
        except (KeyError, TypeError, ValueError) as err:
            raise DataError(f"corrupt checkpoint {path / 'config.json'}: bad SRAS state ({err})") from None
        file = path / WEIGHTS
        if not file.is_file():
            raise DataError(f"corrupt checkpoint {path}: {WEIGHTS} is missing")
        model = SRASScorer(self.emb_dim_, self.hidden)
        try:
            model.load_state_dict(load_file(str(file)))
        except Exception as err:  # safetensors header errors, shape mismatches
            raise DataError(f"corrupt checkpoint {file}: {str(err).splitlines()[0][:300]}") from None
        self.model_ = model.eval()
        self.summary_ = dict(state.get("summary") or {})
