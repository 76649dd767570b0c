"""The servers tier (``make test-servers``) fails, never skips, when a server it was asked
to test cannot start, skips those it was not asked for, and the make target sets up
what the servers need (the ``servers`` extra; llama.cpp's side environment on request)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]


def _tier(tmp_path, **env) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("CHUNKSEL_SERVERS", "CHUNKSEL_TSERVE",
                                                                      "CHUNKSEL_LLAMACPP"))}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-m", "servers",
         "tests/servers", "-k", "judge"],
        cwd=ROOT, env={**clean, "CHUNKSEL_TEST_SERVERS": "1", **env}, capture_output=True, text=True, timeout=300)


def _python_without_servers(tmp_path) -> str:
    """An interpreter that has neither `transformers serve` nor llama_cpp (it exits 3)."""
    fake = tmp_path / "python"
    fake.write_text("#!/bin/sh\nexit 3\n")
    fake.chmod(0o755)
    return str(fake)


def test_a_server_asked_for_that_cannot_start_fails_the_tier(tmp_path):
    py = _python_without_servers(tmp_path)
    got = _tier(tmp_path, CHUNKSEL_SERVERS="transformers llama.cpp", CHUNKSEL_TSERVE_PYTHON=py,
                CHUNKSEL_LLAMACPP_PYTHON=py)
    out = got.stdout + got.stderr
    assert got.returncode == 1, out
    assert "2 errors" in out and "skipped" not in out, out
    assert "cannot run `transformers serve`: pip install 'chunksel[servers]'" in out
    assert "cannot import llama_cpp.server" in out


def test_llama_cpp_asked_for_without_its_python_fails(tmp_path):
    got = _tier(tmp_path, CHUNKSEL_SERVERS="llama.cpp")
    out = got.stdout + got.stderr
    assert got.returncode == 1 and "CHUNKSEL_LLAMACPP_PYTHON names no Python" in out, out
    assert "transformers not asked for" in out  # the other one is skipped, with the reason


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_the_make_target_sets_up_what_the_servers_need(tmp_path):
    def dry(*args):
        got = subprocess.run(["make", "-n", "test-servers", f"VENV={tmp_path / 'venv'}", *args], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        assert got.returncode == 0, got.stderr
        return got.stdout

    plain = dry()
    assert "pip install -e '.[servers]'" in plain and 'CHUNKSEL_SERVERS="transformers"' in plain
    assert "llama-cpp-python" not in plain  # the long build is opt-in
    both = dry("SERVERS=transformers llama.cpp")
    assert "-m venv" in both and "pip install 'llama-cpp-python[server]" in both
    assert f"CHUNKSEL_LLAMACPP_PYTHON={ROOT / '.venv-llamacpp'}/bin/python" in both
    own = dry("SERVERS=transformers llama.cpp", "LLAMACPP_PYTHON=/opt/llama/bin/python", "TSERVE_PYTHON=/opt/t/python")
    assert "llama-cpp-python" not in own and ".[servers]" not in own  # their own Pythons: nothing to set up
    assert "CHUNKSEL_LLAMACPP_PYTHON=/opt/llama/bin/python" in own
