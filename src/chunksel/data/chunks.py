"""A plain-text chunks file (``chunksel select --chunks-file``): one candidate chunk a line.

UTF-8 (a byte-order mark is allowed); blank lines are skipped; the line end is dropped
and nothing else is changed. Every error names the file (and the line).
"""

from __future__ import annotations

import os
from pathlib import Path

from chunksel.data.jsonl import decode_line
from chunksel.errors import DataError


def read_chunks_file(path: str | os.PathLike) -> list[str]:
    """The chunks of ``path``, in file order.

    Raises:
        DataError: the file does not exist, is a directory, cannot be read, or holds
            bytes that are not UTF-8 (the message names the line). Any readable file
            will do, not only a regular one: ``<(...)`` (``/dev/fd/N``), a named pipe.
    """
    path = Path(path)
    if not path.exists():
        raise DataError(f"chunks file {str(path)!r} not found")
    if path.is_dir():  # anything else readable is fine: a pipe, /dev/fd/N, /dev/stdin
        raise DataError(f"chunks file {str(path)!r} is a directory, not a file")
    chunks = []
    try:
        with open(path, "rb") as fh:
            for lineno, raw in enumerate(fh, 1):
                line = decode_line(raw, f"{path}:{lineno}", first=lineno == 1).rstrip("\r\n")
                if line.strip():
                    chunks.append(line)
    except OSError as err:
        raise DataError(f"chunks file {str(path)!r} cannot be read: {err.strerror or err}") from None
    return chunks
