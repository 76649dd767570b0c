"""Shared fixtures of the bulk-job tests: one local Ray instance per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# the real cache (filled by `chunksel fetch-models`), read before the autouse fixture
# points CHUNKSEL_CACHE at a temporary folder
REAL_CACHE = Path(os.environ.get("CHUNKSEL_CACHE") or Path.home() / ".cache" / "chunksel").expanduser()


@pytest.fixture(scope="session")
def ray_session():
    """``ray.init(num_cpus=2)`` once for the session, shut down at its end."""
    ray = pytest.importorskip("ray", reason="the Ray tests need chunksel[ray]")
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield ray
    ray.shutdown()


@pytest.fixture(scope="session")
def smollm2_gguf() -> Path:
    """The fetched SmolLM2 GGUF (skipped when absent: nothing downloads at test time)."""
    from chunksel.llm.fetch import SMOLLM2_GGUF

    gguf = REAL_CACHE / "models" / SMOLLM2_GGUF
    if not gguf.is_file():
        pytest.skip(f"SmolLM2 not fetched ({gguf}); run `chunksel fetch-models`")
    return gguf
