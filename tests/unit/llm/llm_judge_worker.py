"""A deterministic fake judge and a labelling run (run as a subprocess by test_judge.py).

Usage: ``python llm_judge_worker.py CACHE_ROOT N_QUESTIONS DELAY`` - judges the candidates
of :func:`toy_instances` through :class:`KeywordJudge` (one pair per call, ``DELAY``
seconds each) and prints the rows and stats as one JSON line.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Sequence

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
from chunksel.types import Candidate, Instance, Question

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]


class KeywordJudge(LLMBackend):
    """Says Yes (p = 0.9) when the context holds the question's key word, else No (p = 0.8);
    a context with ``garbled`` gets a free-text answer naming no option (unparsed)."""

    name = "keyword"

    def __init__(self, delay: float = 0.0, model_id: str = "kw-1") -> None:
        super().__init__()
        self.delay = delay
        self.model_id = model_id
        self.seen: list[str] = []

    def generate(self, prompts: Sequence[Prompt], max_new_tokens: int = 64, *,
                 temperature: float = 0.0, top_logprobs: int = 0) -> list[Generation]:
        raise NotImplementedError

    def choose_many(self, prompts: Sequence[Prompt], options: Sequence[str], *,
                    default: str | None = None) -> list[Choice]:
        opts = check_options(options)
        out = []
        for p in prompts:
            text = normalize_prompt(p)[-1]["content"]
            self.seen.append(text)
            time.sleep(self.delay)
            question = text.split("Question: ", 1)[1].split("\n", 1)[0]
            context = text.split("Context: ", 1)[1]
            key = question.split()[-2]  # "what is the KEY answer"
            if "garbled" in context:
                out.append(choice_from_text(opts, "I cannot tell.", default, seconds=self.delay))
            elif key in context:
                out.append(choice_from_logprobs(opts, [math.log(0.9), math.log(0.1)], seconds=self.delay))
            else:
                out.append(choice_from_logprobs(opts, [math.log(0.2), math.log(0.8)], seconds=self.delay))
        self._record(out, len(out))
        return out


def toy_instances(n: int = 6, k: int = 5) -> list[Instance]:
    """``n`` questions "what is the KEY answer"; candidate ``i % k`` holds the key word and
    the last candidate of question 0 is garbled."""
    out = []
    for i in range(n):
        key = WORDS[i % len(WORDS)]
        cands = []
        for j in range(k):
            text = f"the {key} answer is here" if j == i % k else f"unrelated {WORDS[(i + j + 1) % 8]} text"
            if i == 0 and j == k - 1:
                text = "garbled bytes"
            cands.append(Candidate(id=f"p{i}-{j}", text=text, rank=j, labels={"containment": int(j == i % k)}))
        out.append(Instance(Question(id=f"toy:q:{i}", text=f"what is the {key} answer", answers=[key]), cands))
    return out


def run(cache: str, n: int, delay: float) -> dict:
    from chunksel.labels.judge import label_instances

    res = label_instances(toy_instances(n), KeywordJudge(delay), batch_size=1, cache=cache, progress=False)
    return {"rows": [r.to_dict() for r in res.rows], "stats": res.stats, "path": str(res.cache_path)}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))), flush=True)
