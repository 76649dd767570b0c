"""A deterministic, model-free backend for cache tests (also used by a subprocess)."""

from __future__ import annotations

import time
from collections.abc import Sequence

from chunksel.llm.backends import (
    Choice,
    Generation,
    LLMBackend,
    Prompt,
    check_options,
    choice_from_text,
    normalize_prompt,
)


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
