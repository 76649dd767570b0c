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
    with pytest.raises(DataError, match="is a directory, not a file"):
        read_chunks_file(tmp_path)
    path = tmp_path / "c.txt"
    path.write_bytes(b"ok\ncaf\xe9\n")
    with pytest.raises(DataError, match=r"c\.txt:2: not UTF-8 text \(byte 0xe9 at byte 4 of the line\)"):
        read_chunks_file(path)


def test_a_pipe_is_read_like_a_file(tmp_path):
    """``--chunks-file <(...)``: the shell passes ``/dev/fd/N``, a pipe, not a regular file."""
    import os

    read_end, write_end = os.pipe()
    os.write(write_end, b"first chunk\nsecond chunk\n")
    os.close(write_end)
    try:
        assert read_chunks_file(f"/dev/fd/{read_end}") == ["first chunk", "second chunk"]
    finally:
        os.close(read_end)
    fifo = tmp_path / "chunks.fifo"  # a named pipe, written by a thread as the reader opens it
    os.mkfifo(fifo)
    import threading

    writer = threading.Thread(target=lambda: fifo.write_text("from a fifo\n"))
    writer.start()
    try:
        assert read_chunks_file(fifo) == ["from a fifo"]
    finally:
        writer.join(timeout=10)
