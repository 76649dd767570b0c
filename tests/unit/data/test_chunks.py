from __future__ import annotations

import pytest

from chunksel.data.chunks import read_chunks_file
from chunksel.errors import DataError


def test_one_chunk_a_line_blank_lines_skipped(tmp_path):
    path = tmp_path / "c.txt"
    path.write_bytes("first chunk\r\n\n  \nsecond caf\u00e9 chunk\n".encode())
    assert read_chunks_file(path) == ["first chunk", "second caf\u00e9 chunk"]


def test_missing_file_directory_and_non_utf8(tmp_path):
    with pytest.raises(DataError, match=r"chunks file .*absent\.txt' not found"):
        read_chunks_file(tmp_path / "absent.txt")
    with pytest.raises(DataError, match="is not a file"):
        read_chunks_file(tmp_path)
    path = tmp_path / "c.txt"
    path.write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(DataError, match=r"c\.txt:2: not UTF-8 text \(byte 0xe9 at byte 4 of the line\)"):
        read_chunks_file(path)
