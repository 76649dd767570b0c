"""A model-free, deterministic LLM backend for selector tests (``get_backend("scripted")``).

- ranking prompts (``Rank the N passages``): the permutation of the passages in reverse
  order, ``[N] > ... > [1]``;
- utility prompts (``My selection``): ``Answer: scripted`` and the first passage of the
  window selected;
- choices: ``Yes`` when the prompt's passage shares a word of 4+ letters with its
  question, else ``No`` (scored as log-probabilities).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from chunksel.llm.backends import (
    Choice,
    Generation,
    LLMBackend,
    Prompt,
    check_options,
    choice_from_logprobs,
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
