"""MoE adapters on tiny random OLMoE / Qwen2-MoE / Qwen3-MoE / Mixtral.

Runs under transformers 5.x (fused experts) and 4.x (ModuleList experts, via
.ci/test-transformers4.sh). The brute-force reference calls the model's own router and
expert modules one token and one expert at a time.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
import transformers
from tiny import QUESTIONS, question_positions, tiny_llama, tiny_moe

from chunksel.errors import ConfigError
from chunksel.features.adapters import MoEAdapter, make_adapter, moe_block
from chunksel.features.extract import extract_features, pad_batch
from chunksel.llm.prompts import question_prompt, question_prompt_ids

KINDS = ["olmoe", "qwen2_moe", "qwen3_moe", "mixtral"]
TF_MAJOR = int(transformers.__version__.split(".")[0])


@pytest.fixture(scope="module", params=KINDS)
def moe(request):
    return request.param, tiny_moe(request.param)


def _hook_count(model) -> int:
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in model.modules())


def _one_expert(experts, j: int, u: torch.Tensor) -> torch.Tensor:
    """Expert j's output on one token, through the model's own experts module."""
    if isinstance(experts, torch.nn.ModuleList):
        return experts[j](u)
    return experts(u, torch.tensor([[j]]), torch.ones(1, 1, dtype=u.dtype))


def _reference_r(model, adapter, tok, questions) -> np.ndarray:
    """Eq. 2 by brute force: per question, per question token, per expert, in Python loops."""
    out = []
    for q in questions:
        ids = torch.tensor([question_prompt_ids(tok, q)])
        positions = question_positions(tok, q)
        inputs = {}
        handles = [
            moe_block(model.model.layers[i]).register_forward_pre_hook(
                lambda _m, args, i=i, store=inputs: store.__setitem__(i, args[0].detach().clone())
            )
            for i in adapter.layers
        ]
        try:
            with torch.no_grad():
                model(input_ids=ids)
        finally:
            for h in handles:
                h.remove()
        row = []
        with torch.no_grad():
            for i in adapter.layers:
                block = moe_block(model.model.layers[i])
                u = inputs[i][0]  # (T, d)
                logits = block.gate(u)
                logits = logits[0] if isinstance(logits, tuple) else logits
                p = torch.softmax(logits.float(), dim=-1)
                rs = np.zeros(adapter.n_experts)
                for t in positions:
                    for j in range(adapter.n_experts):
                        g = _one_expert(block.experts, j, u[t:t + 1])
                        rs[j] += float(p[t, j]) * float(torch.linalg.vector_norm(g))
                row.append(rs / len(positions))
        out.append(np.concatenate(row))
    return np.stack(out)


def test_layout_and_shapes(moe, tok):
    kind, model = moe
    adapter = make_adapter(model)
    assert isinstance(adapter, MoEAdapter)
    assert adapter.layout == ("fused" if TF_MAJOR >= 5 else "modulelist")
    n_layers = model.config.num_hidden_layers
    expected_layers = [0, 2] if kind == "qwen2_moe" else list(range(n_layers))
    assert adapter.layers == expected_layers  # qwen2_moe: layer 1 is dense (mlp_only_layers)
    feats = extract_features(model, tok, QUESTIONS, batch_size=3, progress=False)
    assert feats["h"].shape == (len(QUESTIONS), 32)
    assert feats["r"].shape == (len(QUESTIONS), len(expected_layers) * adapter.n_experts)
    assert np.isfinite(feats["r"]).all() and (feats["r"] > 0).all()


def test_rs_matches_bruteforce(moe, tok):
    _, model = moe
    adapter = make_adapter(model)
    qs = QUESTIONS[:2]
    got = extract_features(model, tok, qs, batch_size=2, progress=False)["r"]
    ref = _reference_r(model, adapter, tok, qs)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-5)


def test_question_span(tok):
    for q in QUESTIONS:
        span = question_prompt(tok, q).span
        pos = question_positions(tok, q)
        assert span == (pos.start, pos.stop)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_invariance(moe, tok, side):
    _, model = moe
    alone = [extract_features(model, tok, [q], progress=False, padding_side=side)
             for q in QUESTIONS]
    batch = extract_features(model, tok, QUESTIONS, batch_size=4, progress=False,
                             padding_side=side)
    for name in ("h", "r"):
        np.testing.assert_allclose(
            batch[name], np.concatenate([a[name] for a in alone]), atol=1e-4, rtol=1e-4
        )


def test_logits_unchanged_and_hooks_removed(moe, tok):
    _, model = moe
    adapter = make_adapter(model)
    before = _hook_count(model)
    ids, mask, pos = pad_batch([question_prompt_ids(tok, q) for q in QUESTIONS], 0)
    with torch.no_grad():
        plain = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        with adapter.capture(mask) as cap:
            assert _hook_count(model) == before + len(adapter.layers)
            hooked = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.equal(plain, hooked)
    assert cap.r.abs().sum() > 0
    assert _hook_count(model) == before
    with pytest.raises(IndexError):  # token id beyond the vocabulary: the forward fails
        with torch.no_grad(), adapter.capture(mask):
            model(input_ids=ids + 1000, attention_mask=mask)
    assert _hook_count(model) == before


def test_unknown_architecture():
    cfg = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=99)
    with pytest.raises(ConfigError, match="olmoe"):
        make_adapter(transformers.GPT2LMHeadModel(cfg))


def test_missing_modules():
    model = tiny_moe("olmoe")
    model.model.layers[1].mlp = torch.nn.Identity()  # OLMoE keeps its block at .mlp
    with pytest.raises(ConfigError, match="layer 1"):
        make_adapter(model)
    model = tiny_llama()
    model.config.model_type = "mixtral"  # claims MoE, has dense MLPs only
    with pytest.raises(ConfigError, match="lacks its router"):
        make_adapter(model)
