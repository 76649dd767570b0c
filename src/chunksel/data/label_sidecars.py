"""LLM labels persisted beside the instance stores, and read back onto instances.

``chunksel label`` (:mod:`chunksel.labels.judge`) writes one sidecar per judge,
``<cache>/instances/<dataset>/labels/semantic@<judge>.jsonl`` (a :class:`JudgeRow` per
line); the utility teacher (:mod:`chunksel.labels.utility`) writes
``utility@<teacher>.jsonl`` in the same format (label 1 = selected by the teacher).
:func:`attach_sidecar_labels` puts them back on loaded instances as the label sources
``<source>@<judge>`` and ``<source>`` (``semantic``, ``utility``). Plain file I/O on records, so it sits in
the data layer, below the judge that writes them.
"""

from __future__ import annotations

import json
import os
import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chunksel.errors import DataError
from chunksel.types import Candidate, Instance

SOURCE = "semantic"
#: every LLM label source kept in sidecars: the judge's and the utility teacher's
SOURCES = ("semantic", "utility")
#: folder of the sidecar label files, beside a dataset's instance stores
LABELS_DIR = "labels"

_SIDE_RE = {src: re.compile(rf"^{src}@(?P<judge>.+)\.jsonl$") for src in SOURCES}


@dataclass
class JudgeRow:
    """One judged pair, as stored in the sidecar.

    Attributes:
        question_id: the question's id.
        candidate_id: the candidate's id.
        label: 1 (``Yes``) or 0 (``No``, or an unparsed output).
        p_yes: the Yes probability over Yes/No, ``None`` when parsed from text.
        parsed: false when the output named neither option.
        reason: why it could not be parsed (``None`` when it could).
        text: the raw output (empty for log-probability scoring).
    """

    question_id: str
    candidate_id: str
    label: int
    p_yes: float | None
    parsed: bool = True
    reason: str | None = None
    text: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"question_id": self.question_id, "candidate_id": self.candidate_id,
                "label": self.label, "p_yes": self.p_yes, "parsed": self.parsed,
                "reason": self.reason, "text": self.text}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> JudgeRow:
        p = d.get("p_yes")
        return cls(str(d["question_id"]), str(d["candidate_id"]), int(d["label"]),
                   None if p is None else float(p), bool(d.get("parsed", True)),
                   d.get("reason"), d.get("text", ""))


def apply_row(cand: Candidate, row: JudgeRow, key: str, judge: str, plain: bool, source: str = SOURCE) -> None:
    cand.labels[f"{source}@{key}"] = row.label
    if not plain:
        return
    cand.labels[source] = row.label
    cand.meta[f"{source}_p_yes"] = row.p_yes
    cand.meta[f"{source}_judge"] = judge
    if row.parsed:
        cand.meta.pop(f"{source}_unparsed", None)
    else:
        cand.meta[f"{source}_unparsed"] = row.reason or "unparsed"


def labels_dir(store: str | os.PathLike) -> Path:
    """The sidecar folder of an instance store: ``<store>/../labels`` (shared by every
    store of the dataset)."""
    return Path(store).parent / LABELS_DIR


def read_sidecar(path: str | os.PathLike) -> list[JudgeRow]:
    """The rows of one sidecar file.

    Raises:
        DataError: a malformed line (the file's path and line are named).
    """
    out = []
    with open(path, encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                out.append(JudgeRow.from_dict(json.loads(line)))
            except (ValueError, KeyError, TypeError) as err:
                raise DataError(f"{path}:{n}: not a judge label row ({err})") from None
    return out


def merge_sidecar(path: str | os.PathLike, new_rows: Iterable[JudgeRow], meta: dict[str, Any]) -> Path:
    """Merge ``new_rows`` into the sidecar file at ``path`` and write its ``.meta.json``.

    Rows already in the file for other pairs are kept; a pair labelled again is replaced.
    Both files are written to a temporary name and moved into place (atomic). The meta
    file holds ``meta`` plus the merged file's ``pairs``, ``positive`` and ``unparsed``
    counts.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rows: dict[tuple[str, str], JudgeRow] = {}
    if path.is_file():
        for r in read_sidecar(path):
            rows[(r.question_id, r.candidate_id)] = r
    for r in new_rows:
        rows[(r.question_id, r.candidate_id)] = r
    tmp = path.with_name(path.name + f".{os.getpid()}.part")
    with open(tmp, "w", encoding="utf-8") as fh:
        for r in rows.values():
            fh.write(json.dumps(r.to_dict(), ensure_ascii=False) + "\n")
    os.replace(tmp, path)
    meta = {**meta, "pairs": len(rows), "positive": sum(r.label for r in rows.values()),
            "unparsed": sum(not r.parsed for r in rows.values())}
    mtmp = path.with_name(path.stem + f".meta.json.{os.getpid()}.part")
    mtmp.write_text(json.dumps(meta, indent=1) + "\n")
    os.replace(mtmp, path.with_name(path.stem + ".meta.json"))
    return path


def sidecar_files(folders: Iterable[str | os.PathLike], source: str = SOURCE) -> list[tuple[str, Path]]:
    """``(judge key, path)`` of every sidecar of ``source`` in ``folders``, oldest written first."""
    if source not in _SIDE_RE:
        raise DataError(f"unknown sidecar label source {source!r}; known: {', '.join(SOURCES)}")
    found: dict[str, Path] = {}
    for folder in folders:
        folder = Path(folder)
        if not folder.is_dir():
            continue
        for p in folder.iterdir():
            m = _SIDE_RE[source].match(p.name)
            if m and p.is_file():
                found.setdefault(m.group("judge"), p)
    return sorted(found.items(), key=lambda kv: (kv[1].stat().st_mtime, kv[0]))


_warned_several: set[str] = set()


def attach_sidecar_labels(
    instances: Sequence[Instance], store: str | os.PathLike, judge: str | None = None,
    source: str | None = None,
) -> list[str]:
    """Put the judge labels persisted beside ``store`` back on ``instances`` (in place).

    Each judge's rows become the source ``semantic@<judge key>``; the plain ``semantic``
    (with ``meta["semantic_p_yes"]``) comes from ``judge`` when given, else the only
    judge, else the most recently written sidecar (a warning names it). Pairs the judge
    never saw get no label (see :func:`missing_labels`).

    Args:
        instances: instances of the store's dataset.
        store: the instance store directory (its sidecar folder is ``store/../labels``;
            ``store/labels`` is read too, for stores saved outside the cache).
        judge: a judge key to use for the plain ``semantic`` source.
        source: the label source (``semantic`` or ``utility``); ``None``: every source
            (``judge``, when given, then picks the ``semantic`` judge).

    Returns:
        The judge keys attached, the plain one last (with ``source=None``: those of
        each source in turn).

    Raises:
        DataError: ``judge`` names no sidecar, or a sidecar is malformed.
    """
    if source is None:
        out: list[str] = []
        for src in SOURCES:
            out += attach_sidecar_labels(instances, store, judge if src == SOURCE else None, src)
        return out
    store = Path(store)
    files = sidecar_files([labels_dir(store), store / LABELS_DIR], source)
    if not files:
        if judge is not None:
            raise DataError(f"no {source} labels beside {store}: run `chunksel label` first")
        return []
    keys = [k for k, _ in files]
    if judge is not None and judge not in keys:
        raise DataError(f"no labels of judge {judge!r} beside {store}; found: {', '.join(keys)}")
    plain = judge or keys[-1]
    if judge is None and len(keys) > 1 and str(store) not in _warned_several:
        _warned_several.add(str(store))
        warnings.warn(
            f"{len(keys)} judges labelled this dataset ({', '.join(keys)}); {source!r} is the "
            f"latest, {plain!r}: use '{source}@<judge>' to pick another",
            stacklevel=2,
        )
    index = {(inst.question.id, c.id): c for inst in instances for c in inst.candidates}
    for key, path in sorted(files, key=lambda kv: kv[0] == plain):  # the plain judge last
        meta_path = path.with_name(path.stem + ".meta.json")
        name = json.loads(meta_path.read_text()).get("judge", key) if meta_path.is_file() else key
        for r in read_sidecar(path):
            cand = index.get((r.question_id, r.candidate_id))
            if cand is not None:
                apply_row(cand, r, key, name, plain=key == plain, source=source)
    return [k for k in keys if k != plain] + [plain]


def missing_labels(instances: Sequence[Instance], source: str = SOURCE) -> int:
    """Instances with at least one candidate that has no ``source`` label."""
    return sum(any(source not in c.labels for c in inst.candidates) for inst in instances)
