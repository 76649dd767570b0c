"""Dense-as-MoE adapter on a tiny random Llama."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tiny import QUESTIONS, question_positions, tiny_llama

from chunksel.errors import ConfigError
from chunksel.features.dense import DenseAdapter
from chunksel.features.extract import extract_features, pad_batch
from chunksel.llm.prompts import question_prompt_ids

E = 8


@pytest.fixture(scope="module")
def llama():
    return tiny_llama(intermediate_size=64)


def test_groups_sum_to_mlp(llama):
    adapter = DenseAdapter(llama, n_groups=E)
    x = torch.randn(7, 32)
    with torch.no_grad():
        for slot, mlp in enumerate(adapter.mlps):
            a = adapter.activations(slot, x)
            groups = adapter.group_outputs(slot, a)
            assert groups.shape == (7, E, 32)
            torch.testing.assert_close(groups.sum(1), mlp(x), atol=1e-5, rtol=0)
            # expert j = the MLP restricted to neurons [j*G, (j+1)*G)
            g = 64 // E
            w = mlp.down_proj.weight
            torch.testing.assert_close(groups[:, 3], a[:, 3 * g:4 * g] @ w[:, 3 * g:4 * g].T)
            norms = torch.linalg.vector_norm(groups, dim=-1)
            torch.testing.assert_close(adapter.group_norms(slot, a), norms, atol=1e-5, rtol=1e-4)
            p = adapter.router_probs(a)
            torch.testing.assert_close(p.sum(1), torch.ones(7))


def test_rs_matches_bruteforce(llama, tok):
    adapter = DenseAdapter(llama, n_groups=E)
    q = QUESTIONS[1]
    got = extract_features(llama, tok, [q], adapter=adapter, progress=False)["r"][0]
    ids = torch.tensor([question_prompt_ids(tok, q)])
    positions = question_positions(tok, q)  # Eq. 2: T = the question's own tokens
    xs = {}
    handles = [m.register_forward_pre_hook(lambda _m, a, i=i: xs.__setitem__(i, a[0][0]))
               for i, m in enumerate(adapter.mlps)]
    with torch.no_grad():
        llama(input_ids=ids)
    for h in handles:
        h.remove()
    ref = []
    g = 64 // E
    with torch.no_grad():
        for i, mlp in enumerate(adapter.mlps):
            rs = np.zeros(E)
            x = xs[i]
            for t in positions:
                a = mlp.act_fn(mlp.gate_proj(x[t])) * mlp.up_proj(x[t])
                total = float(a.abs().sum())
                for j in range(E):
                    aj = a[j * g:(j + 1) * g]
                    out = mlp.down_proj.weight[:, j * g:(j + 1) * g] @ aj
                    rs[j] += float(aj.abs().sum()) / total * float(out.norm())
            ref.append(rs / len(positions))
    np.testing.assert_allclose(got, np.concatenate(ref), rtol=1e-4, atol=1e-6)


def test_shapes_h_is_last_hidden_state(llama, tok):
    feats = extract_features(llama, tok, QUESTIONS, batch_size=3, progress=False,
                             adapter=DenseAdapter(llama, n_groups=E))
    assert feats["h"].shape == (4, 32) and feats["r"].shape == (4, 2 * E)
    ids, mask, pos = pad_batch([question_prompt_ids(tok, q) for q in QUESTIONS], 0)
    with torch.no_grad():
        out = llama(input_ids=ids, attention_mask=mask, position_ids=pos,
                    output_hidden_states=True)
    last = mask.sum(1) - 1
    want = out.hidden_states[-1][torch.arange(4), last].numpy()
    np.testing.assert_allclose(feats["h"], want, atol=1e-5)


@pytest.mark.parametrize("side", ["right", "left"])
def test_padding_invariance_and_logits(llama, tok, side):
    adapter = DenseAdapter(llama, n_groups=E)
    alone = [extract_features(llama, tok, [q], adapter=adapter, progress=False) for q in QUESTIONS]
    batch = extract_features(llama, tok, QUESTIONS, batch_size=4, adapter=adapter,
                             progress=False, padding_side=side)
    for name in ("h", "r"):
        np.testing.assert_allclose(batch[name], np.concatenate([a[name] for a in alone]),
                                   atol=1e-4, rtol=1e-4)
    ids, mask, pos = pad_batch([question_prompt_ids(tok, q) for q in QUESTIONS], 0, side)
    with torch.no_grad():
        plain = llama(input_ids=ids, attention_mask=mask, position_ids=pos).logits
        with adapter.capture(mask):
            hooked = llama(input_ids=ids, attention_mask=mask, position_ids=pos).logits
    assert torch.equal(plain, hooked)
    assert sum(len(m._forward_pre_hooks) for m in llama.modules()) == 0


def test_group_count_must_divide(llama):
    with pytest.raises(ConfigError, match="not divisible"):
        DenseAdapter(llama, n_groups=7)
