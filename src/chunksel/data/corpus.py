"""Passage corpora in the DPR ``psgs_w100`` TSV layout plus a source column.

``id \\t text \\t title \\t source`` with a header row, gzip or plain. :func:`iter_passages`
streams rows; :class:`Corpus` keeps ids, titles and texts once (as lists of str) with an
id -> row index, which is what retrieval and labelling need. Corpora named by the
benchmark (``wiki-w100``, ``msmarco-sub``) resolve to files under ``CHUNKSEL_DATA``.
"""

from __future__ import annotations

import csv
import gzip
import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from chunksel.config import data_root, file_checksum, show_progress
from chunksel.errors import ConfigError, DataError

CORPORA = {
    "wiki-w100": "corpus/wiki-w100.tsv.gz",
    "msmarco-sub": "corpus/msmarco-sub.tsv.gz",
}
#: precomputed all-MiniLM-L6-v2 embeddings shipped beside each corpus
PRECOMPUTED = {
    "wiki-w100": "corpus/wiki-w100.all-MiniLM-L6-v2.i8.npz",
    "msmarco-sub": "corpus/msmarco-sub.all-MiniLM-L6-v2.i8.npz",
}

csv.field_size_limit(min(sys.maxsize, 2**31 - 1))


@dataclass(frozen=True)
class Passage:
    id: str
    text: str
    title: str = ""
    source: str = ""


def corpus_path(name_or_path: str | Path, root: str | Path | None = None) -> Path:
    """A corpus name (``wiki-w100``, ``msmarco-sub``) or a TSV path -> existing file."""
    if str(name_or_path) in CORPORA:
        path = data_root(root) / CORPORA[str(name_or_path)]
    else:
        path = Path(name_or_path)
        if path.suffix not in (".tsv", ".gz") and not path.exists():
            raise ConfigError(f"unknown corpus {str(name_or_path)!r}; known: {', '.join(CORPORA)}")
    if not path.is_file():
        raise DataError(f"corpus file {str(path)!r} not found")
    return path


def user_corpus_path(name_or_path: str | Path) -> str:
    """A corpus the user names: a benchmark name or a TSV path as they are, a passage
    JSONL file (``{"id", "title"?, "text"}`` per line) converted once to a TSV under
    ``cache_root()/corpora/<checksum>.tsv`` (the layout every corpus reader expects)."""
    if str(name_or_path) in CORPORA:
        return str(name_or_path)
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise DataError(f"corpus file {str(path)!r} not found")
    if path.suffix.lower() not in (".jsonl", ".json", ".ndjson"):
        return str(path)
    import json

    from chunksel.config import cache_root

    out = cache_root() / "corpora" / f"{file_checksum(path)}.tsv"
    if out.is_file():
        return str(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tsv.part")
    n = 0
    with open(path, encoding="utf-8-sig") as src, open(tmp, "w", encoding="utf-8", newline="") as dst:
        dst.write("id\ttext\ttitle\tsource\n")
        for lineno, line in enumerate(src, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as err:
                raise DataError(f"{path}:{lineno}: malformed JSON ({err.msg})") from None
            if not isinstance(rec, dict) or rec.get("id") is None or not isinstance(rec.get("text"), str):
                raise DataError(f"{path}:{lineno}: a passage needs 'id' and 'text'")
            cells = [str(rec["id"]), rec["text"], str(rec.get("title") or ""), "user"]
            dst.write("\t".join(" ".join(c.split()) for c in cells) + "\n")
            n += 1
    if n == 0:
        tmp.unlink(missing_ok=True)
        raise DataError(f"corpus {path} has no passages")
    tmp.replace(out)
    return str(out)


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def iter_passages(path: str | Path) -> Iterator[Passage]:
    """Stream the passages of a corpus TSV (header row skipped)."""
    path = Path(path)
    with _open_text(path) as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = next(reader, None)
        if header is None:
            raise DataError(f"corpus {path} is empty")
        if header[:2] != ["id", "text"]:
            raise DataError(f"corpus {path}: expected a header 'id\\ttext\\ttitle[\\tsource]', got {header[:4]}")
        for lineno, row in enumerate(reader, 2):
            if not row:
                continue
            if len(row) < 2:
                raise DataError(f"corpus {path}:{lineno}: expected at least id and text columns")
            yield Passage(
                id=row[0],
                text=row[1],
                title=row[2] if len(row) > 2 else "",
                source=row[3] if len(row) > 3 else "",
            )


class Corpus:
    """An in-memory passage corpus: parallel lists plus an id index.

    Args:
        ids, texts, titles, sources: parallel lists, rows in file order.
        name: the corpus name (or file stem).
        checksum: sha256 prefix of the source file (keys embedding/index caches).
    """

    def __init__(
        self,
        ids: list[str],
        texts: list[str],
        titles: list[str],
        sources: list[str] | None = None,
        name: str = "corpus",
        checksum: str = "",
    ) -> None:
        if not ids:
            raise DataError(f"corpus {name!r} is empty")
        if not (len(ids) == len(texts) == len(titles)):
            raise DataError(f"corpus {name!r}: ids, texts and titles differ in length")
        self.ids = ids
        self.texts = texts
        self.titles = titles
        self.sources = sources if sources is not None else [""] * len(ids)
        self.name = name
        self.checksum = checksum
        self._row: dict[str, int] | None = None

    @classmethod
    def load(cls, name_or_path: str | Path, root: str | Path | None = None, progress: bool = True) -> Corpus:
        """Read a whole corpus TSV once (193k wiki passages: ~10 s, ~0.5 GB)."""
        from tqdm.auto import tqdm

        path = corpus_path(name_or_path, root)
        name = str(name_or_path) if str(name_or_path) in CORPORA else path.name.split(".")[0]
        ids: list[str] = []
        texts: list[str] = []
        titles: list[str] = []
        sources: list[str] = []
        for p in tqdm(iter_passages(path), desc=f"reading {name}", unit=" psg", disable=not show_progress(progress), mininterval=1.0):
            ids.append(p.id)
            texts.append(p.text)
            titles.append(p.title)
            sources.append(p.source)
        return cls(ids, texts, titles, sources, name=name, checksum=file_checksum(path))

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def row_of(self) -> dict[str, int]:
        """Passage id -> row index (built on first use)."""
        if self._row is None:
            self._row = {pid: i for i, pid in enumerate(self.ids)}
        return self._row

    def passage(self, row: int) -> Passage:
        return Passage(self.ids[row], self.texts[row], self.titles[row], self.sources[row])

    def encoder_input(self, row: int) -> str:
        """The retriever's input for a passage: ``(title + " " + text).strip()``."""
        return (self.titles[row] + " " + self.texts[row]).strip()
