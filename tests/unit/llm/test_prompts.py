from __future__ import annotations

import warnings

import pytest

from chunksel.errors import DataError
from chunksel.llm import prompts
from chunksel.llm.prompts import (
    generation_prompt_ids,
    question_prompt_ids,
    template_hash,
)


def test_question_prompt_is_chat_template(tok):
    ids = question_prompt_ids(tok, "Who wrote Hamlet?")
    assert tok.decode(ids) == "<|im_start|>user\nWho wrote Hamlet?<|im_end|>\n<|im_start|>assistant\n"


def test_truncation_keeps_closing_tokens_and_warns_once(tok):
    prompts.reset_truncation_warning()
    tail = "<|im_end|>\n<|im_start|>assistant\n"
    long_q = "abcdefghij" * 80  # 800 characters = 800 tokens
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ids = question_prompt_ids(tok, long_q)
        ids2 = question_prompt_ids(tok, long_q + "xyz", max_tokens=512)
    assert len(ids) == 512 and len(ids2) == 512
    text = tok.decode(ids)
    assert text.endswith(tail) and text.startswith("<|im_start|>user\nabcdefghij")
    kept = text[len("<|im_start|>user\n"):-len(tail)]
    overhead = len(question_prompt_ids(tok, "a")) - 1
    assert long_q.startswith(kept) and len(kept) == 512 - overhead  # cut at its end
    assert len([w for w in caught if "cut at the end" in str(w.message)]) == 1
    short = question_prompt_ids(tok, "short one", max_tokens=512)
    assert tok.decode(short).endswith(tail)


def test_empty_question(tok):
    with pytest.raises(DataError, match="empty question"):
        question_prompt_ids(tok, "   ")


def test_generation_prompt_shares_question_prefix(tok):
    q = "Who wrote Hamlet?"
    warm = question_prompt_ids(tok, q)
    gen = generation_prompt_ids(tok, q, "Shakespeare wrote it.")
    head = tok.decode(gen)
    assert head.index(q) < head.index("Shakespeare")
    closing = len(tok("<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)["input_ids"])
    shared = len(warm) - closing  # template header + the whole question
    assert gen[:shared] == warm[:shared] and gen[shared] != warm[shared]


def test_template_hash(tok):
    h = template_hash(tok)
    assert h == template_hash(tok) and len(h) == 12
    assert template_hash(tok, max_tokens=256) != h
    old = tok.chat_template
    try:
        tok.chat_template = old.replace("assistant", "bot")
        assert template_hash(tok) != h
    finally:
        tok.chat_template = old
