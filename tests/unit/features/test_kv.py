"""KV reuse: continuing from the cropped warm-up cache equals a fresh full pass."""

from __future__ import annotations

import copy

import numpy as np
import torch
from tiny import QUESTIONS, tiny_llama

from chunksel.features.kv import common_prefix, generate_with_reuse, warm_up
from chunksel.llm.prompts import generation_prompt_ids

CHUNK = "Hamlet is a tragedy written by William Shakespeare around 1600."


def _greedy_fresh(model, ids, n):
    ids = list(ids)
    out = []
    with torch.no_grad():
        for _ in range(n):
            nxt = int(model(input_ids=torch.tensor([ids])).logits[0, -1].argmax())
            out.append(nxt)
            ids.append(nxt)
    return out


def test_reuse_matches_fresh_pass(tok):
    model = tiny_llama()
    question = "Who wrote Hamlet?"
    warm = warm_up(model, tok, question)
    assert warm.cache.get_seq_length() == len(warm.ids)
    ids = generation_prompt_ids(tok, question, CHUNK)
    shared = common_prefix(warm.ids, ids)
    assert shared > len(question)  # template header + the whole question
    gen = generate_with_reuse(model, tok, question, CHUNK, copy.deepcopy(warm.cache), warm.ids,
                              max_new_tokens=6)
    assert gen.reused == shared and gen.prompt_len == len(ids)
    with torch.no_grad():
        fresh = model(input_ids=torch.tensor([ids])).logits[0, -1].numpy()
    np.testing.assert_allclose(gen.first_logits, fresh, atol=1e-4)
    want = _greedy_fresh(model, ids, 6)
    eos = tok.eos_token_id
    want = want[: want.index(eos)] if eos in want else want
    assert gen.token_ids == want
    # the warm-up's own next-token logits equal a fresh pass over the warm-up prompt
    with torch.no_grad():
        fresh_warm = model(input_ids=torch.tensor([warm.ids])).logits[0, -1].numpy()
    np.testing.assert_allclose(warm.next_logits, fresh_warm, atol=1e-4)


def test_warm_up_features_equal_the_feature_store_rows(tok):
    """The warm-up pass of the pipeline gives the features the selectors were trained on
    (Eq. 2 over the question's tokens, as extraction computes it)."""
    from chunksel.features.extract import extract_features

    model = tiny_llama()
    question = QUESTIONS[2]
    warm = warm_up(model, tok, question)
    ref = extract_features(model, tok, [question], progress=False)
    np.testing.assert_allclose(warm.h, ref["h"][0], atol=1e-5)
    np.testing.assert_allclose(warm.r, ref["r"][0], atol=1e-5)


def test_one_generation_path_for_the_answer_table_and_chunk_selector(tok):
    """The answer table's Generator and generate_with_reuse (ChunkSelector.answer, /answer)
    build the same prompt and decode with the same loop: the same answer, for several chunks
    (stripped, joined by a blank line) and for none (the warm-up prompt itself)."""
    from types import SimpleNamespace

    from chunksel.features.generation import Generator
    from chunksel.features.kv import answer_prompt_ids

    model = tiny_llama()
    question = "Who wrote Hamlet?"
    chunks = ["  " + CHUNK + "\n", "Macbeth is another of his tragedies."]
    assert answer_prompt_ids(tok, question, chunks) == generation_prompt_ids(
        tok, question, CHUNK + "\n\n" + "Macbeth is another of his tragedies.")
    gen = Generator(SimpleNamespace(model=model, tokenizer=tok, model_id="tiny"), max_new_tokens=6)
    for pick in (chunks, chunks[:1], []):
        ans = gen.answer(question, pick, measure_noreuse=False)
        warm = warm_up(model, tok, question)
        out = generate_with_reuse(model, tok, question, pick, warm.cache, warm.ids, max_new_tokens=6)
        assert gen.prompt_ids(question, pick) == answer_prompt_ids(tok, question, pick)
        assert (out.text, len(out.token_ids), out.prompt_len) == (ans.text, ans.tokens_out, ans.prompt_tokens)
        assert out.prompt_len - out.reused == ans.prefill_tokens
    assert answer_prompt_ids(tok, question, []) == warm.ids  # no context: the warm-up prompt
