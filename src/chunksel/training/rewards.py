"""Rewards for reinforcement-learned chunk selection (SRAS paper, Sec. III-B).

A reward function maps a batch of instances and, for each, the chosen candidate columns
to one float per instance::

    reward_fn(instances, actions) -> np.ndarray  # (B,), higher = better

- :class:`QAReward`: the paper's QA-derived reward. A frozen generator answers the
  question from the chosen chunk(s) (:class:`AnswerGenerator`: greedy, at most 32 new
  tokens) and the answer is scored against the reference answers:
  ``R = alpha * RelaxedF1 + (1 - alpha) * BERTScoreF1`` with ``alpha = 0.6``
  (``mode="hybrid"``, Eq. 1), or the sparse exact match ``R = EM`` (``mode="sparse"``:
  the paper's "without reward shaping" ablation). Metrics: :mod:`chunksel.labels.answers`.
- :class:`LabelReward`: a cheap reward from the candidates' labels (share of the chosen
  chunks that are positive): for tests, toy bandits and label-only studies.

Generations go through the LLM layer's response cache (:func:`chunksel.llm.cache.map_cached`),
keyed by the question id and the chosen chunk ids (in pool order, so a set of chunks is
one prompt whatever order it was picked in): a rerun or a resumed run regenerates
nothing it has seen.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from chunksel.errors import ConfigError
from chunksel.labels.answers import exact_match, relaxed_f1
from chunksel.types import Instance

#: the generation prompt (one user turn): question first, then the chosen chunks
ANSWER_TEMPLATE = (
    "Answer the question in a few words, using the context.\n"
    "Question: {question}\n\nContext:\n{context}"
)
REWARD_MODES = ("hybrid", "sparse")


class RewardFn(Protocol):
    """``(instances, actions) -> (B,) rewards``; ``actions[b]`` are candidate columns."""

    def __call__(self, instances: Sequence[Instance], actions: Sequence[Sequence[int]]) -> np.ndarray: ...


def _chunk_text(inst: Instance, j: int) -> str:
    c = inst.candidates[j]
    return f"{c.title}. {c.text}" if c.title else c.text


def canonical(actions: Sequence[int]) -> list[int]:
    """The chosen columns in pool order (a set of chunks is one prompt)."""
    return sorted(int(a) for a in actions)


@dataclass
class GenerationStats:
    """Accounting of an :class:`AnswerGenerator` over its life."""

    items: int = 0
    hits: int = 0
    misses: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


@dataclass
class AnswerGenerator:
    """Answers questions from chosen chunks with a frozen LLM, through the response cache.

    Args:
        backend: an :class:`~chunksel.llm.backends.LLMBackend` (e.g.
            :class:`~chunksel.llm.local.LocalBackend` on SmolLM2).
        max_new_tokens: generation limit (32, greedy).
        template: the prompt; its hash keys the cache namespace.
        cache: cache root (default ``CHUNKSEL_CACHE``).
        batch_size: misses per backend call.
        progress: a bar over the misses.
        fsync: ``fsync`` every cached record.
    """

    backend: Any
    max_new_tokens: int = 32
    template: str = ANSWER_TEMPLATE
    cache: str | os.PathLike | None = None
    batch_size: int = 8
    progress: bool = False
    fsync: bool = False
    stats: GenerationStats = field(default_factory=GenerationStats)

    def prompt(self, inst: Instance, actions: Sequence[int]) -> str:
        context = "\n\n".join(_chunk_text(inst, j) for j in canonical(actions))
        return self.template.format(question=inst.question.text, context=context)

    @staticmethod
    def item_id(inst: Instance, actions: Sequence[int]) -> str:
        return inst.id + "|" + ",".join(inst.candidates[j].id for j in canonical(actions))

    def __call__(self, instances: Sequence[Instance], actions: Sequence[Sequence[int]]) -> list[str]:
        """One answer per instance (first non-empty line of the generation, stripped)."""
        from chunksel.llm.cache import map_cached

        items = list(zip(instances, actions, strict=True))
        res = map_cached(
            self.backend, items,
            prompt=lambda x: self.prompt(x[0], x[1]),
            item_id=lambda x: self.item_id(x[0], x[1]),
            template=self.template, max_new_tokens=self.max_new_tokens, temperature=0.0,
            batch_size=self.batch_size, cache=self.cache, fsync=self.fsync,
            progress=self.progress, desc="answers",
        )
        self.stats.items += res.stats.items
        self.stats.hits += res.stats.hits
        self.stats.misses += res.stats.misses
        self.stats.seconds += res.stats.seconds
        return [clean_answer(g.text) for g in res.results]


def clean_answer(text: str) -> str:
    """The first non-empty line, without a leading ``Answer:``."""
    for line in text.strip().splitlines():
        line = line.strip()
        if line:
            if line.lower().startswith("answer:"):
                line = line[7:].strip()
            return line
    return ""


class QAReward:
    """The SRAS QA reward: generate an answer from the chosen chunks and score it.

    Args:
        generator: the :class:`AnswerGenerator`.
        mode: ``"hybrid"`` (``alpha * RelaxedF1 + (1 - alpha) * BERTScoreF1``) or
            ``"sparse"`` (exact match, the "without reward shaping" ablation).
        alpha: the relaxed-F1 weight (0.6).
        bertscore: a callable ``(predictions, references) -> (N,) F1`` (default
            :class:`chunksel.labels.answers.BertScoreF1` on local MiniLM; only built for
            ``mode="hybrid"``).

    Attributes:
        last: the components of the last call (``answers``, ``relaxed_f1``,
            ``bertscore``, ``exact_match``, ``reward``).
    """

    def __init__(self, generator: AnswerGenerator, mode: str = "hybrid", alpha: float = 0.6,
                 bertscore: Any = None) -> None:
        if mode not in REWARD_MODES:
            raise ConfigError(f"reward mode must be one of {REWARD_MODES}, got {mode!r}")
        if not 0.0 <= alpha <= 1.0:
            raise ConfigError(f"alpha must be in [0, 1], got {alpha}")
        self.generator = generator
        self.mode = mode
        self.alpha = alpha
        if bertscore is None and mode == "hybrid":
            from chunksel.labels.answers import BertScoreF1

            bertscore = BertScoreF1()
        self.bertscore = bertscore
        self.last: dict[str, Any] = {}

    def components(self, instances: Sequence[Instance], actions: Sequence[Sequence[int]],
                   with_bertscore: bool | None = None) -> dict[str, Any]:
        """Answers and every metric for the chosen chunks (BERTScore when available)."""
        answers = self.generator(instances, actions)
        refs = [inst.question.answers for inst in instances]
        rf1 = np.array([relaxed_f1(a, r) for a, r in zip(answers, refs)], dtype=np.float64)
        em = np.array([exact_match(a, r) for a, r in zip(answers, refs)], dtype=np.float64)
        use_bs = self.bertscore is not None if with_bertscore is None else with_bertscore
        bs = self.bertscore(answers, refs) if use_bs else np.full(len(answers), np.nan)
        if self.mode == "hybrid":
            reward = self.alpha * rf1 + (1.0 - self.alpha) * bs
        else:
            reward = em
        return {"answers": answers, "relaxed_f1": rf1, "bertscore": bs, "exact_match": em,
                "reward": reward}

    def __call__(self, instances: Sequence[Instance], actions: Sequence[Sequence[int]]) -> np.ndarray:
        self.last = self.components(instances, actions, with_bertscore=self.mode == "hybrid")
        return self.last["reward"]


class LabelReward:
    """Share of the chosen candidates that are positive under ``label`` (cheap, no LLM).

    Args:
        label: label spec (default: each instance's own).
    """

    def __init__(self, label: str | None = None) -> None:
        self.label = label

    def __call__(self, instances: Sequence[Instance], actions: Sequence[Sequence[int]]) -> np.ndarray:
        out = np.zeros(len(instances), dtype=np.float64)
        for b, (inst, act) in enumerate(zip(instances, actions, strict=True)):
            lab = inst.labels(self.label)
            out[b] = float(np.mean([lab[int(j)] for j in act])) if len(act) else 0.0
        return out
