"""Crash-safe file writes shared by every cache and checkpoint that is resumed."""

from __future__ import annotations

import os
from pathlib import Path


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a process-unique temporary file + ``os.replace``:
    a reader sees the old file or the new one, never a torn one."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
