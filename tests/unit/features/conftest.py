from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from tiny import tiny_tokenizer  # noqa: E402


@pytest.fixture(scope="session")
def tok():
    return tiny_tokenizer()
