"""Tiny random-initialised generators and a character-level chat tokenizer (no downloads).

Shapes follow transformers' own tests (hidden 32, 2-3 layers, a few experts, vocab 99).
Works with transformers 4.x (ModuleList experts) and 5.x (fused experts).
"""

from __future__ import annotations

import torch

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + "
    "message['content'] + '<|im_end|>' + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<pad>", "<|im_start|>", "<|im_end|>"]
VOCAB = 99  # 3 specials + "\n" + 95 printable ASCII characters


def tiny_tokenizer():
    """Character-level WordLevel tokenizer (vocab 99) with a ChatML chat template."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    chars = ["\n"] + [chr(c) for c in range(32, 127)]
    vocab = {t: i for i, t in enumerate(SPECIALS + chars)}
    assert len(vocab) == VOCAB
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<pad>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("."), behavior="isolated")
    # "." does not match "\n": split it off as well
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex("\n"), behavior="isolated"),
        pre_tokenizers.Split(Regex("."), behavior="isolated"),
    ])
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, pad_token="<pad>", eos_token="<|im_end|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tok.chat_template = CHATML
    return tok


def _randomise(model: torch.nn.Module, seed: int) -> torch.nn.Module:
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() >= 2:
                p.copy_(torch.randn(p.shape, generator=gen) * 0.15)
            elif "norm" in name or "layernorm" in name:
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(0.05 * torch.randn(p.shape, generator=gen))
    return model.eval()


COMMON = dict(
    vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_key_value_heads=2,
    max_position_embeddings=1024, pad_token_id=0, eos_token_id=2, bos_token_id=1,
    tie_word_embeddings=False,
)


def tiny_moe(kind: str, seed: int = 0):
    """A tiny random MoE causal LM: ``olmoe``, ``qwen2_moe``, ``qwen3_moe`` or ``mixtral``."""
    import transformers as tf

    if kind == "olmoe":
        cfg = tf.OlmoeConfig(num_hidden_layers=2, intermediate_size=16, num_experts=8,
                             num_experts_per_tok=2, **COMMON)
        cls = tf.OlmoeForCausalLM
    elif kind == "qwen2_moe":
        cfg = tf.Qwen2MoeConfig(num_hidden_layers=3, intermediate_size=24,
                                moe_intermediate_size=16, shared_expert_intermediate_size=24,
                                num_experts=8, num_experts_per_tok=2, mlp_only_layers=[1],
                                **COMMON)
        cls = tf.Qwen2MoeForCausalLM
    elif kind == "qwen3_moe":
        cfg = tf.Qwen3MoeConfig(num_hidden_layers=2, intermediate_size=24,
                                moe_intermediate_size=16, num_experts=4, num_experts_per_tok=2,
                                head_dim=8, **COMMON)
        cls = tf.Qwen3MoeForCausalLM
    elif kind == "mixtral":
        cfg = tf.MixtralConfig(num_hidden_layers=2, intermediate_size=16, num_local_experts=4,
                               num_experts_per_tok=2, **COMMON)
        cls = tf.MixtralForCausalLM
    else:
        raise ValueError(kind)
    return _randomise(cls(cfg), seed)


def tiny_llama(seed: int = 0, intermediate_size: int = 64, layers: int = 2):
    """A tiny random Llama (dense SwiGLU)."""
    import transformers as tf

    cfg = tf.LlamaConfig(num_hidden_layers=layers, intermediate_size=intermediate_size, **COMMON)
    return _randomise(tf.LlamaForCausalLM(cfg), seed)


QUESTIONS = [
    "Who wrote Hamlet?",
    "What is the capital of France and which river runs through it?",
    "How many moons does Mars have?",
    "e=mc^2",
]


def question_positions(tok, q: str) -> range:
    """The question's token positions by hand: the character-level ChatML prompt is
    ``<|im_start|> u s e r \n`` + one token per character of ``q`` + the closing tokens."""
    from chunksel.llm.prompts import question_prompt_ids

    ids = question_prompt_ids(tok, q)
    start = ids.index(tok.convert_tokens_to_ids("\n")) + 1
    assert tok.decode(ids[start:start + len(q)]) == q
    return range(start, start + len(q))
