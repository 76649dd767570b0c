"""The test doubles, in one place: model-free stand-ins for the parts that need a model.

- :class:`ScriptedBackend` (``get_backend("scripted")``, registered in ``tests/conftest.py``):
  an LLM backend for the selector and label tests. Ranking prompts (``Rank the N
  passages``) get the passages in reverse order, ``[N] > ... > [1]``; utility prompts (``My
  selection``) get ``Answer: scripted`` and the window's first passage; choices are ``Yes``
  when the prompt's passage shares a word of 4+ letters with its question, else ``No``
  (scored as log-probabilities).
- :class:`EchoBackend`: an LLM backend for the response-cache tests (also run in a
  subprocess): answers ``"echo: <last message>"``, optionally slowly.
- :class:`FakeEncoder`: deterministic 8-dim unit vectors per text, a stand-in for MiniLM.

Everything else in the tests runs the real part (FAISS, LightGBM, MiniLM, SmolLM2).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Sequence

import numpy as np

from chunksel.llm.backends import (
    Choice,
    Generation,
    LLMBackend,
    Prompt,
    check_options,
    choice_from_logprobs,
    choice_from_text,
    normalize_prompt,
)

_WORD = re.compile(r"[a-z]{4,}")


class ScriptedBackend(LLMBackend):
    name = "scripted"

    def __init__(self, model_id: str = "scripted-1") -> None:
        super().__init__()
        self.model_id = model_id

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 64, *,
                 temperature: float = 0.0, top_logprobs: int = 0) -> list[Generation]:
        out = []
        for p in prompts:
            text = "\n".join(m["content"] for m in normalize_prompt(p))
            m = re.search(r"I will give you (\d+) passages", text)
            n = int(m.group(1)) if m else 1
            if "My selection" in text:
                answer = "Answer: scripted\nMy selection: [[1]]"
            else:
                answer = " > ".join(f"[{i}]" for i in range(n, 0, -1))
            out.append(Generation(text=answer, tokens_in=len(text.split()), tokens_out=len(answer.split()),
                                  seconds=0.001, finish_reason="stop"))
        self._record(out, len(out))
        return out

    def choose_many(self, prompts: Sequence[Prompt], options: Sequence[str], *,
                    default: str | None = None) -> list[Choice]:
        opts = check_options(options)
        out = []
        for p in prompts:
            text = normalize_prompt(p)[-1]["content"].lower()
            q = re.search(r"question: (.*)", text)
            psg = re.search(r"passage: (.*)", text)
            shared = bool(q and psg and set(_WORD.findall(q.group(1))) & set(_WORD.findall(psg.group(1))))
            lps = [math.log(0.9) if (o == "Yes") == shared else math.log(0.1) for o in opts]
            out.append(choice_from_logprobs(opts, lps, tokens_in=len(text.split()), seconds=0.001))
        self._record(out, len(out))
        return out


def _content(prompt: Prompt) -> str:
    return normalize_prompt(prompt)[-1]["content"]


class EchoBackend(LLMBackend):
    """Answers ``"echo: <last message>"``; ``choose`` reads the option from the prompt text.

    Args:
        delay: seconds slept per prompt (to make a run slow enough to kill midway).
    """

    name = "echo"

    def __init__(self, delay: float = 0.0, model_id: str = "echo-1") -> None:
        super().__init__()
        self.delay = delay
        self.model_id = model_id
        self.prompts_seen: list[str] = []

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 64, *,
                 temperature: float = 0.0, top_logprobs: int = 0) -> list[Generation]:
        out = []
        for p in prompts:
            text = _content(p)
            self.prompts_seen.append(text)
            time.sleep(self.delay)
            out.append(Generation(text=f"echo: {text}"[: 6 + 4 * max_new_tokens],
                                  tokens_in=len(text.split()), tokens_out=2,
                                  seconds=self.delay, finish_reason="stop"))
        self._record(out, len(out))
        return out

    def choose_many(self, prompts: Sequence[Prompt], options: Sequence[str], *,
                    default: str | None = None) -> list[Choice]:
        opts = check_options(options)
        out = []
        for p in prompts:
            text = _content(p)
            self.prompts_seen.append(text)
            time.sleep(self.delay)
            out.append(choice_from_text(opts, text, default, tokens_in=len(text.split()),
                                        tokens_out=1, seconds=self.delay))
        self._record(out, len(out))
        return out


class FakeEncoder:
    """Deterministic 8-dim unit vectors per text (a stand-in for MiniLM)."""

    def __init__(self, model_id: str = "fake-encoder-8") -> None:
        self.model_id = model_id
        self.dim = 8
        self.n_encoded = 0

    def encode(self, texts, progress=False):
        out = []
        for t in texts:
            seed = int(hashlib.sha256(t.encode()).hexdigest()[:8], 16)
            v = np.random.default_rng(seed).normal(size=8).astype(np.float32)
            out.append(v / np.linalg.norm(v))
        self.n_encoded += len(texts)
        return np.stack(out)
