"""Answer generation with KV reuse from the warm-up pass gives the same greedy answer as a
fresh pass over the whole prompt (real SmolLM2, two pairs)."""

from __future__ import annotations

import pytest

from chunksel.features.generation import Generator

pytestmark = pytest.mark.model

PAIRS = [
    ("Who wrote Hamlet?", ["Hamlet is a tragedy written by William Shakespeare around 1600."]),
    ("What is the capital of France?", ["Paris is the capital and largest city of France.",
                                        "Lyon is the third-largest city of France."]),
]


def test_reuse_gives_the_same_greedy_answer(smollm2):
    gen = Generator(smollm2, max_new_tokens=8)
    for question, chunks in PAIRS:
        ans = gen.answer(question, chunks)
        ids = gen.prompt_ids(question, chunks)
        fresh, _ = gen._greedy(ids, None, 0, 8)
        assert gen.tokenizer.decode(fresh, skip_special_tokens=True).strip() == ans.text
        assert ans.first_token_agrees and ans.ttft_ms > 0 and ans.ttft_ms_noreuse > 0
        # the template header and the question came from the warm-up cache
        assert ans.prompt_tokens == len(ids) and 0 < ans.prefill_tokens < ans.prompt_tokens - 5
    nc = gen.answer(PAIRS[0][0], [])  # no context: the warm-up prompt itself, one token prefilled
    assert nc.prefill_tokens == 1 and nc.text
