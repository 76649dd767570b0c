from __future__ import annotations

import json
from pathlib import Path

import pytest

from chunksel.data.jsonl import load_user_jsonl
from chunksel.errors import DataError


def _write(tmp_path: Path, records: list) -> Path:
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in records) + "\n")
    return path


def test_reads_questions_with_and_without_ctxs(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        [
            {
                "id": 7,
                "question": " Who wrote Hamlet? ",
                "answers": ["Shakespeare"],
                "topic": "plays",
                "ctxs": [
                    {"id": "p1", "title": "Hamlet", "text": "Hamlet is a play.", "label": 1},
                    {"id": "p2", "text": "Other.", "label": False, "score": 0.5},
                    {"id": "p3", "text": "No label."},
                ],
            },
            "",
            {"id": "q2", "question": "Anything?", "answers": "yes"},
        ],
    )
    (q1, c1), (q2, c2) = load_user_jsonl(path)
    assert q1.id == "7" and q1.text == "Who wrote Hamlet?" and q1.answers == ["Shakespeare"]
    assert q1.meta == {"topic": "plays"} and q1.dataset == "user"
    assert [c.id for c in c1] == ["p1", "p2", "p3"]
    assert [c.rank for c in c1] == [0, 1, 2]
    assert c1[0].labels == {"given": 1} and c1[0].title == "Hamlet"
    assert c1[1].labels == {"given": 0} and c1[1].score == 0.5
    assert c1[2].labels == {}
    assert q2.answers == ["yes"] and c2 is None


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"id": "a", "question": "   "}, "in.jsonl:2: empty question"),
        ({"question": "q"}, "in.jsonl:2: missing field 'id'"),
        ({"id": "a"}, "in.jsonl:2: missing field 'question'"),
        ({"id": "a", "question": "q", "ctxs": [{"id": "x"}]}, r"ctxs\[0\]: missing field 'text'"),
        ({"id": "a", "question": "q", "ctxs": [{"text": "t"}]}, r"ctxs\[0\]: missing field 'id'"),
        ({"id": "a", "question": "q", "ctxs": [{"id": "x", "text": "t", "label": "yes"}]}, "label"),
        ({"id": "a", "question": "q", "answers": [{"x": 1}]}, "answers"),
        ({"id": "a", "question": "q", "ctxs": "nope"}, "'ctxs' must be a list"),
        ({"id": "ok", "question": "fine"}, "duplicate id"),
        ("{not json", "malformed JSON"),
    ],
)
def test_bad_records_name_the_line(tmp_path: Path, record, message: str) -> None:
    path = _write(tmp_path, [{"id": "ok", "question": "fine"}, record])
    with pytest.raises(DataError, match=message):
        load_user_jsonl(path)


def test_build_alias(tmp_path: Path) -> None:
    from chunksel.data.jsonl import read_generic_jsonl

    path = _write(tmp_path, [{"id": "a", "question": "q?", "ctxs": []}])
    assert read_generic_jsonl(path)[0][1] == []


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="not found"):
        load_user_jsonl(tmp_path / "nope.jsonl")


def test_non_utf8_bytes_name_the_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "latin1.jsonl"
    good = json.dumps({"id": "a", "question": "fine"}).encode()
    bad = json.dumps({"id": "b", "question": "caf\u00e9"}, ensure_ascii=False).encode("latin-1")
    path.write_bytes(good + b"\n" + bad + b"\n")
    with pytest.raises(DataError, match=r"latin1\.jsonl:2: not UTF-8 text \(byte 0xe9"):
        load_user_jsonl(path)


def test_a_utf8_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + json.dumps({"id": "a", "question": "caf\u00e9?"}, ensure_ascii=False).encode())
    assert load_user_jsonl(path)[0][0].text == "caf\u00e9?"


def test_malformed_json_keeps_its_column(tmp_path: Path) -> None:
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "question": "q", oops}\n', encoding="utf-8")
    with pytest.raises(DataError, match=r"bad\.jsonl:1: malformed JSON at column 30 \(Expecting property name"):
        load_user_jsonl(path)


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_file_says_it_holds_no_records(tmp_path: Path, content: str) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(DataError, match=r"empty\.jsonl' holds no records \(it is empty or only blank lines\)"):
        load_user_jsonl(path)
