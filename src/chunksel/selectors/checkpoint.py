"""Integrity checks of a saved selector's files (no torch import).

- :func:`state_checksums` / :func:`verify_checksums`: the SHA-256 of every state file a
  selector writes beside ``config.json`` is recorded in ``config.json`` under
  ``"checksums"`` (``{relative path: hex digest}``) at save time and checked at load
  time; a changed, truncated or missing file is a :class:`~chunksel.errors.DataError`
  ("corrupt checkpoint ..."). Saves made before checksums existed have no such key and
  load unchecked.
- :func:`check_safetensors_header`: the 8-byte length, the JSON header and the tensors'
  byte ranges of a ``.safetensors`` file, checked before the file is read.
- :func:`load_state_dict_checked`: ``module.load_state_dict`` whose mismatch error names
  the file and the first missing / unexpected keys and mismatched shapes.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from chunksel.config import file_checksum
from chunksel.errors import DataError

#: bytes per element of the safetensors dtypes
_DTYPE_BYTES = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1,
    "I16": 2, "U16": 2, "F16": 2, "BF16": 2,
    "I32": 4, "U32": 4, "F32": 4,
    "I64": 8, "U64": 8, "F64": 8,
}
_MAX_HEADER = 100 * 2**20  # the safetensors format's own limit


def sha256_file(path: str | Path) -> str:
    """Hex SHA-256 of a file's bytes (streamed)."""
    return file_checksum(path, length=64)


def state_checksums(folder: str | Path) -> dict[str, str]:
    """``{relative posix path: sha256}`` of every file under ``folder`` (recursively)."""
    folder = Path(folder)
    return {
        p.relative_to(folder).as_posix(): sha256_file(p)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def verify_checksums(path: str | Path, checksums: Any) -> None:
    """Check the files of saved selector ``path`` against the digests in its config.json.

    Args:
        path: the saved selector's directory.
        checksums: the ``"checksums"`` entry of its config.json (None: an old save,
            nothing to check).

    Raises:
        DataError: a listed file is missing or its SHA-256 differs ("corrupt checkpoint
            <file>"), or the entry itself is malformed.
    """
    if checksums is None:
        return
    path = Path(path)
    if not isinstance(checksums, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in checksums.items()
    ):
        raise DataError(f"corrupt checkpoint {path / 'config.json'}: 'checksums' must map file names to SHA-256 digests")
    for rel, want in checksums.items():
        file = path / rel
        if Path(rel).is_absolute() or ".." in Path(rel).parts:
            raise DataError(f"corrupt checkpoint {path / 'config.json'}: checksum entry {rel!r} is outside the folder")
        if not file.is_file():
            raise DataError(f"corrupt checkpoint {path}: {rel} is missing")
        got = sha256_file(file)
        if got != want.lower():
            raise DataError(
                f"corrupt checkpoint {file}: SHA-256 {got[:12]}... does not match the {want[:12]}... "
                "recorded at save time (the file was changed or damaged); save the selector again"
            )


def check_safetensors_header(file: str | Path) -> dict[str, Any]:
    """Validate the header of a ``.safetensors`` file and return it (the JSON object).

    Checks: the 8-byte little-endian header length, that the header is a JSON object
    within the file, and that every tensor's dtype, shape and ``data_offsets`` agree and
    lie within the data section, which they cover exactly.

    Raises:
        DataError: "corrupt checkpoint <file>: ..." naming what is wrong.
    """
    file = Path(file)

    def bad(reason: str) -> DataError:
        return DataError(f"corrupt checkpoint {file}: {reason}")

    size = file.stat().st_size
    with open(file, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            raise bad(f"{size} bytes, too short for a safetensors file")
        (n,) = struct.unpack("<Q", head)
        if n > min(_MAX_HEADER, size - 8):
            raise bad(f"header length {n} does not fit in a file of {size} bytes (truncated or not safetensors)")
        raw = fh.read(n)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise bad("the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise bad("the safetensors header is not a JSON object")
    data_size = size - 8 - n
    covered = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
            nbytes = _DTYPE_BYTES[dtype] * math.prod(int(d) for d in shape)
        except (KeyError, TypeError, ValueError):
            raise bad(f"malformed header entry for tensor {name!r}") from None
        if not (isinstance(begin, int) and isinstance(end, int)) or not 0 <= begin <= end <= data_size:
            raise bad(f"tensor {name!r} lies outside the file's {data_size} data bytes (truncated?)")
        if end - begin != nbytes:
            raise bad(f"tensor {name!r}: {end - begin} bytes for {dtype} of shape {list(shape)}")
        covered.append((begin, end))
    pos = 0
    for begin, end in sorted(covered):
        if begin != pos:
            raise bad("tensor data ranges overlap or leave gaps")
        pos = end
    if pos != data_size:
        raise bad(f"{data_size - pos} bytes after the last tensor (the file was changed after saving?)")
    return header


def load_state_dict_checked(module: Any, state: Mapping[str, Any], file: str | Path, n_show: int = 3) -> None:
    """``module.load_state_dict(state, strict=True)``; a mismatch becomes one DataError.

    torch's own message spans many lines (one per key) and says nothing of the file; this
    one names ``file`` and the first ``n_show`` missing keys, unexpected keys and shape
    mismatches.
    """
    try:
        module.load_state_dict(state, strict=True)
    except RuntimeError as err:
        why = state_dict_mismatch(module.state_dict(), state, n_show) or str(err).splitlines()[0]
        raise DataError(f"corrupt checkpoint {file}: {why}") from None


def state_dict_mismatch(expected: Mapping[str, Any], got: Mapping[str, Any], n_show: int = 3) -> str:
    """A one-line summary of how ``got`` differs from ``expected`` (keys and shapes), or ''."""

    def shape(t: Any) -> tuple[int, ...]:
        return tuple(int(d) for d in getattr(t, "shape", ()))

    def few(items: list[str]) -> str:
        more = f" (+{len(items) - n_show} more)" if len(items) > n_show else ""
        return ", ".join(items[:n_show]) + more

    missing = [k for k in expected if k not in got]
    unexpected = [k for k in got if k not in expected]
    shapes = [
        f"{k} is {list(shape(got[k]))} in the file, {list(shape(expected[k]))} in the model"
        for k in expected
        if k in got and shape(got[k]) != shape(expected[k])
    ]
    parts = []
    if shapes:
        parts.append(f"shape mismatch: {few(shapes)}")
    if missing:
        parts.append(f"missing keys: {few(missing)}")
    if unexpected:
        parts.append(f"unexpected keys: {few(unexpected)}")
    if not parts:
        return ""
    return "the weights do not match the saved settings: " + "; ".join(parts)
