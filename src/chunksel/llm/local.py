"""The local backend: a transformers causal LM on this machine (SmolLM2 by default).

Generation batches prompts (sorted by length, left-padded) and decodes greedily unless a
temperature is given; decoding settings come from a fresh ``GenerationConfig``, never
from the model's own defaults, so every model decodes the same way.

:meth:`LocalBackend.choose_many` never generates: it scores each option as the answer's
continuation, ``log p(option | prompt) = sum_t log p(option_t | prompt, option_<t)``, from
the model's logits (one forward pass over the prompts when every option is one token,
else one pass over prompt + option for each option). An option whose tokens begin a
longer option's (``1`` and ``10`` where ``10`` is ``1`` + ``0``) also pays for not going
on into the longer one: ``+ log(1 - p(next tokens of the longer options | prompt,
option))``. The argmax is always one of the options, so even a 135M model gives a
well-formed decision.

Numerics: a prompt's logits can differ in the last bits with the padding of its batch,
so a near-tie may resolve differently in another batch composition.
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Sequence
from typing import Any

from chunksel.errors import ConfigError, DataError
from chunksel.llm.backends import (
    Choice,
    Generation,
    LLMBackend,
    Prompt,
    check_options,
    choice_from_logprobs,
    normalize_prompt,
)


class LocalBackend(LLMBackend):
    """A transformers causal LM (any local HF folder or ``.gguf`` file).

    The model is loaded on first use through :func:`chunksel.llm.models.load_generator`
    unless a loaded ``model`` and ``tokenizer`` are given. Calls are serialised with a
    lock, so one backend may serve several threads.

    Args:
        model_path: a local model folder or ``.gguf`` file; ``None`` for the default
            SmolLM2-135M-Instruct.
        model: an already loaded causal LM (then ``tokenizer`` and ``model_id`` too).
        tokenizer: its tokenizer.
        model_id: stable id of ``model`` (e.g. the third item of ``load_generator``).
        batch_size: prompts (or option sequences) per forward pass.
        dtype: torch dtype for loading (default float32).
        cache: cache root for loading (default :func:`chunksel.config.cache_root`).

    Raises:
        ConfigError: ``model`` without ``tokenizer``/``model_id``, or a bad batch size.
    """

    name = "local"

    def __init__(
        self,
        model_path: str | os.PathLike | None = None,
        *,
        model: Any = None,
        tokenizer: Any = None,
        model_id: str | None = None,
        batch_size: int = 8,
        dtype: Any = None,
        cache: str | os.PathLike | None = None,
    ) -> None:
        super().__init__()
        if model is not None and (tokenizer is None or not model_id):
            raise ConfigError("LocalBackend(model=...) also needs tokenizer= and model_id=")
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.model_path = model_path
        self.batch_size = batch_size
        self.dtype = dtype
        self.cache = cache
        self._model = model
        self._tok = tokenizer
        self._model_id = model_id or ""
        self._lock = threading.RLock()

    # -- loading and encoding
    def _ensure(self) -> None:
        if self._model is not None:
            return
        with self._lock:
            if self._model is None:
                from chunksel.llm.models import load_generator

                model, tok, gen_id = load_generator(self.model_path, dtype=self.dtype, cache=self.cache)
                self._tok, self._model_id, self._model = tok, gen_id, model

    @property
    def model_id(self) -> str:  # type: ignore[override]
        """The generator id (``load_generator``'s third item; loads the model if needed)."""
        if not self._model_id:
            self._ensure()
        return self._model_id

    @property
    def model(self) -> Any:
        """The causal LM (loaded on first access)."""
        self._ensure()
        return self._model

    @property
    def tokenizer(self) -> Any:
        """Its tokenizer (loaded on first access)."""
        self._ensure()
        return self._tok

    def render(self, prompt: Prompt) -> str:
        """The prompt as the model sees it: its chat template with the generation prompt
        added (a plain string prompt on a model without a template is used as is).

        Raises:
            DataError: empty prompt.
            ConfigError: chat messages for a tokenizer without a chat template.
        """
        msgs = normalize_prompt(prompt)
        tok = self.tokenizer
        if getattr(tok, "chat_template", None):
            return tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        if isinstance(prompt, str):
            return prompt
        raise ConfigError(
            f"model {self.model_id!r} has no chat template: pass plain-text prompts"
        )

    def encode(self, prompt: Prompt) -> list[int]:
        """Token ids of :meth:`render` (the template's own special tokens only)."""
        tok = self.tokenizer
        text = self.render(prompt)
        add = not getattr(tok, "chat_template", None)
        ids = list(tok(text, add_special_tokens=add)["input_ids"])
        if not ids:
            raise DataError("the prompt encodes to no tokens")
        return ids

    def _pad_id(self) -> int:
        tok = self.tokenizer
        if tok.pad_token_id is not None:
            return int(tok.pad_token_id)
        if tok.eos_token_id is not None:
            return int(tok.eos_token_id)
        return 0

    def _eos_ids(self) -> list[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        if eos is None:
            eos = self.tokenizer.eos_token_id
        if eos is None:
            return []
        return [int(e) for e in (eos if isinstance(eos, (list, tuple)) else [eos])]

    def _left_pad(self, rows: Sequence[Sequence[int]]) -> tuple[Any, Any]:
        import torch

        width = max(len(r) for r in rows)
        pad = self._pad_id()
        ids = torch.full((len(rows), width), pad, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, r in enumerate(rows):
            ids[i, width - len(r):] = torch.tensor(list(r), dtype=torch.long)
            mask[i, width - len(r):] = 1
        return ids, mask

    # -- generation
    def generate(
        self,
        prompts: Sequence[Prompt],
        max_new_tokens: int = 64,
        *,
        temperature: float = 0.0,
        top_logprobs: int = 0,
    ) -> list[Generation]:
        """Generate one answer per prompt; see :meth:`LLMBackend.generate`.

        Prompts are batched ``batch_size`` at a time, longest first, left-padded.

        Raises:
            DataError: no prompts, an empty prompt, or ``max_new_tokens < 1``.
        """
        if isinstance(prompts, str) or not prompts:
            raise DataError("generate() needs a non-empty list of prompts")
        if max_new_tokens < 1:
            raise DataError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if temperature < 0:
            raise DataError(f"temperature must be >= 0, got {temperature}")
        encoded = [self.encode(p) for p in prompts]
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        results: list[Generation | None] = [None] * len(encoded)
        batches = 0
        for start in range(0, len(order), self.batch_size):
            idx = order[start:start + self.batch_size]
            for i, g in zip(idx, self._generate_batch([encoded[i] for i in idx], max_new_tokens,
                                                      temperature, top_logprobs)):
                results[i] = g
            batches += 1
        out = [g for g in results if g is not None]
        self._record(out, batches)
        return out

    def _generate_batch(
        self, rows: list[list[int]], max_new_tokens: int, temperature: float, top_logprobs: int
    ) -> list[Generation]:
        import torch
        from transformers import GenerationConfig

        model, tok = self.model, self.tokenizer
        ids, mask = self._left_pad(rows)
        eos = self._eos_ids()
        cfg = GenerationConfig(
            max_new_tokens=max_new_tokens,
            do_sample=temperature > 0,
            pad_token_id=self._pad_id(),
            eos_token_id=eos or None,
            return_dict_in_generate=True,
            output_logits=top_logprobs > 0,
            **({"temperature": temperature, "top_k": 0, "top_p": 1.0} if temperature > 0 else {}),
        )
        t0 = time.perf_counter()
        with self._lock, torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
        seconds = (time.perf_counter() - t0) / len(rows)
        new = out.sequences[:, ids.shape[1]:]
        lp_steps = None
        if top_logprobs > 0:
            logits = torch.stack(list(out.logits), dim=1).float()  # (B, T, V)
            vals, toks = torch.log_softmax(logits, dim=-1).topk(top_logprobs, dim=-1)
            lp_steps = (vals.tolist(), toks.tolist())
        gens = []
        for b, row in enumerate(rows):
            seq = new[b].tolist()
            n = len(seq)
            finish = "length"
            for t, token in enumerate(seq):
                if token in eos:
                    n, finish = t + 1, "stop"
                    break
            kept = [t for t in seq[:n] if t not in eos]
            top = None
            if lp_steps is not None:
                vals, toks = lp_steps
                top = tuple(
                    tuple((tok.decode([tid]), float(v)) for tid, v in zip(toks[b][t], vals[b][t]))
                    for t in range(n)
                )
            gens.append(Generation(
                text=tok.decode(kept, skip_special_tokens=True), tokens_in=len(row),
                tokens_out=n, seconds=seconds, finish_reason=finish, top_logprobs=top,
            ))
        return gens

    # -- fixed-option choices
    def option_ids(self, options: Sequence[str]) -> list[list[int]]:
        """Token ids of each option as the answer's first tokens.

        Raises:
            DataError: bad options, or an option that encodes to no tokens.
        """
        opts = check_options(options)
        tok = self.tokenizer
        out = []
        for o in opts:
            ids = list(tok(o, add_special_tokens=False)["input_ids"])
            if not ids:
                raise DataError(f"option {o!r} encodes to no tokens")
            out.append(ids)
        return out

    def option_logprobs(self, prompts: Sequence[Prompt], options: Sequence[str],
                        *, single_token_fast_path: bool = True) -> list[list[float]]:
        """``log p(option | prompt)`` summed over each option's tokens, per prompt.

        An option whose tokens begin a longer option's also pays for not going on into
        it (see the module docstring).

        Args:
            prompts: the prompts.
            options: the options.
            single_token_fast_path: with every option one token long, read all of them
                from one forward pass over the prompts (same numbers, fewer passes).

        Returns:
            ``len(prompts)`` lists of ``len(options)`` finite floats.
        """
        encoded = [self.encode(p) for p in prompts]
        return self._option_logprobs(encoded, self.option_ids(options), single_token_fast_path)

    def _option_logprobs(self, encoded: list[list[int]], opt_ids: list[list[int]],
                         single_token_fast_path: bool = True) -> list[list[float]]:
        import torch

        model = self.model
        out: list[list[float]] = []
        if single_token_fast_path and all(len(o) == 1 for o in opt_ids):
            first = torch.tensor([o[0] for o in opt_ids])
            for start in range(0, len(encoded), self.batch_size):
                rows = encoded[start:start + self.batch_size]
                ids, mask = self._left_pad(rows)
                pos = (mask.cumsum(-1) - 1).clamp(min=0)
                with self._lock, torch.no_grad():
                    logits = model(input_ids=ids, attention_mask=mask, position_ids=pos).logits
                lp = torch.log_softmax(logits[:, -1, :].float(), dim=-1)[:, first]
                out.extend(lp.tolist())
            return out
        pad = self._pad_id()
        for row in encoded:
            seqs = [row + o for o in opt_ids]
            scores: list[float] = []
            for start in range(0, len(seqs), self.batch_size):
                chunk = seqs[start:start + self.batch_size]
                width = max(len(s) for s in chunk)
                ids = torch.full((len(chunk), width), pad, dtype=torch.long)
                mask = torch.zeros((len(chunk), width), dtype=torch.long)
                for i, s in enumerate(chunk):  # right padding: positions stay natural
                    ids[i, :len(s)] = torch.tensor(s)
                    mask[i, :len(s)] = 1
                with self._lock, torch.no_grad():
                    logits = model(input_ids=ids, attention_mask=mask).logits.float()
                logp = torch.log_softmax(logits, dim=-1)
                n0 = len(row)
                for i, o in enumerate(opt_ids[start:start + len(chunk)]):
                    # the token at position p is predicted by the logits at p - 1
                    steps = logp[i, n0 - 1:n0 - 1 + len(o)]
                    score = float(steps.gather(1, torch.tensor(o)[:, None]).sum())
                    # an option whose tokens begin a longer option ("1" and "10"): the
                    # answer is this option only if it does not go on into the longer one
                    nxt = sorted({q[len(o)] for q in opt_ids if len(q) > len(o) and q[:len(o)] == o})
                    if nxt:
                        mass = float(logp[i, n0 - 1 + len(o), nxt].exp().sum())
                        score += math.log(max(1.0 - mass, 1e-30))
                    scores.append(score)
            out.append(scores)
        return out

    def choose_many(
        self, prompts: Sequence[Prompt], options: Sequence[str], *, default: str | None = None
    ) -> list[Choice]:
        """Score every option for every prompt and pick the most likely.

        ``default`` is checked for the interface and otherwise unused: scored options
        always give a decision.

        Raises:
            DataError: no prompts, an empty prompt, bad options or a bad default.
        """
        if isinstance(prompts, str) or not prompts:
            raise DataError("choose_many() needs a non-empty list of prompts")
        opts = check_options(options)
        if default is not None and default not in opts:
            raise DataError(f"default {default!r} is not one of the options {list(opts)}")
        t0 = time.perf_counter()
        encoded = [self.encode(p) for p in prompts]
        lps = self._option_logprobs(encoded, self.option_ids(opts))
        seconds = (time.perf_counter() - t0) / len(prompts)
        n_in = [len(e) for e in encoded]
        out = [
            choice_from_logprobs(opts, lp, tokens_in=n, seconds=seconds)
            for lp, n in zip(lps, n_in)
        ]
        self._record(out, requests=-(-len(prompts) // self.batch_size))
        return out

    def settings(self) -> dict[str, Any]:
        """Nothing beyond the model id changes a local model's outputs."""
        return {}


__all__ = ["LocalBackend"]
