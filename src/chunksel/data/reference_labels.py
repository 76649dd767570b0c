"""Reference semantic evidence labels, for evaluation only.

The benchmark data ships human-grade semantic labels in the chunk-selection paper's sense
(a chunk is positive when it holds enough evidence to answer the question, whatever
strings it contains) for a sample of test questions of TriviaQA, PopQA and MS MARCO:
``<data root>/semantic/<dataset>.jsonl``, one line per (question, candidate) pair::

    {"qid", "pid", "evidence": "Yes"|"No", "supports_reference": "Yes"|"No",
     "sample": "random"|"answerable-stratum"}

They become two label sources on the candidates of the labelled questions:
``semantic@reference`` (``evidence``) and ``supports@reference`` (``supports_reference``:
the passage states one of the reference answers). A label spec naming either works
wherever a spec does (``--label``, ``chunksel eval``) and keeps the labelled questions
only; a question without reference labels under such a spec is an error
(:meth:`chunksel.types.Instance.labels`), never a silent 0, and no selector trains on
them (:func:`chunksel.types.refuse_reference_labels`, called by every ``fit``). The
benchmark study reads them after every fit (:mod:`chunksel.study.semantic`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from chunksel.errors import DataError
from chunksel.types import REFERENCE_SOURCES, Instance, parse_label_spec

#: the evidence label and the supports-a-reference-answer label
EVIDENCE, SUPPORTS = REFERENCE_SOURCES
#: the folder under the data root
FOLDER = "semantic"
#: the question samples of the files (the stratum: TriviaQA questions with a containment positive)
SAMPLES = ("random", "answerable-stratum")
_YES_NO = {"Yes": 1, "No": 0}


@dataclass
class ReferenceLabels:
    """One dataset's reference labels.

    Attributes:
        dataset: the dataset's name.
        path: the file read.
        sha256: the file's SHA-256.
        pairs: ``(question id, candidate id) -> (evidence, supports_reference)`` as 0/1.
        sample: question id -> its sample (``random`` or ``answerable-stratum``).
    """

    dataset: str
    path: Path
    sha256: str
    pairs: dict[tuple[str, str], tuple[int, int]] = field(default_factory=dict)
    sample: dict[str, str] = field(default_factory=dict)

    def matrix(self, inst: Instance, source: str = EVIDENCE) -> list[int]:
        """``inst``'s candidates' labels under ``source``; DataError for an unlabelled one."""
        col = REFERENCE_SOURCES.index(source)
        out = []
        for c in inst.candidates:
            got = self.pairs.get((inst.question.id, c.id))
            if got is None:
                raise DataError(f"{self.dataset}: question {inst.question.id!r}, candidate {c.id!r} has no "
                                f"reference semantic label ({self.path.name} labels {len(self.sample)} questions)")
            out.append(got[col])
        return out


def reference_path(dataset: str, root: str | Path | None = None) -> Path:
    """``<data root>/semantic/<dataset>.jsonl`` (the file may be absent)."""
    from chunksel.config import data_root

    return data_root(root) / FOLDER / f"{dataset}.jsonl"


def reference_datasets(root: str | Path | None = None) -> list[str]:
    """The datasets that have a reference label file under the data root."""
    from chunksel.config import data_root

    folder = data_root(root) / FOLDER
    return sorted(p.stem for p in folder.glob("*.jsonl")) if folder.is_dir() else []


def load_reference(dataset: str, root: str | Path | None = None, path: str | Path | None = None) -> ReferenceLabels:
    """Read one dataset's reference labels (``path`` overrides the data root's file).

    Raises:
        DataError: no file for the dataset, or a malformed line (its line number named).
    """
    given = path is not None
    path = Path(path) if given else reference_path(dataset, root)
    if not path.is_file():
        have = "" if given else ", ".join(reference_datasets(root))
        raise DataError(f"no reference semantic labels for {dataset!r} at {path}"
                        + (f" (datasets with them: {have})" if have else ""))
    raw = path.read_bytes()
    ref = ReferenceLabels(dataset, path, hashlib.sha256(raw).hexdigest())
    for n, line in enumerate(raw.decode("utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            qid, pid = str(row["qid"]), str(row["pid"])
            ev, sup = _YES_NO[row["evidence"]], _YES_NO[row["supports_reference"]]
            sample = str(row.get("sample", "random"))
        except (ValueError, KeyError, TypeError) as err:
            raise DataError(f"{path}:{n}: not a reference label row ({type(err).__name__}: {err}); expected "
                            "qid, pid, evidence and supports_reference (Yes/No)") from None
        if sample not in SAMPLES:
            raise DataError(f"{path}:{n}: unknown sample {sample!r}; known: {', '.join(SAMPLES)}")
        if (qid, pid) in ref.pairs:
            raise DataError(f"{path}:{n}: the pair ({qid}, {pid}) is labelled twice")
        ref.pairs[(qid, pid)] = (ev, sup)
        ref.sample[qid] = sample
    if not ref.pairs:
        raise DataError(f"{path}: no reference labels in the file")
    return ref


def names_reference(spec: str | None) -> bool:
    """Whether a label spec names a reference source."""
    return bool(spec) and any(src in REFERENCE_SOURCES for src in parse_label_spec(spec))


def attach_reference(instances: Sequence[Instance], ref: ReferenceLabels) -> list[Instance]:
    """Put the reference labels on the candidates of the labelled questions (in place) and
    return those instances, in order; the others get none.

    Raises:
        DataError: a labelled question whose candidates differ from the labelled ones
            (built with another K, index or corpus), or no labelled question at all.
    """
    out = []
    for inst in instances:
        if inst.question.id not in ref.sample:
            continue
        labels = [ref.matrix(inst, src) for src in REFERENCE_SOURCES]  # raises for a different candidate list
        for j, c in enumerate(inst.candidates):
            for src, col in zip(REFERENCE_SOURCES, labels, strict=True):
                c.labels[src] = col[j]
        inst.question.meta["reference_sample"] = ref.sample[inst.question.id]
        out.append(inst)
    if not out:
        raise DataError(f"{ref.dataset}: none of these {len(instances)} questions has reference semantic labels "
                        f"({ref.path} labels {len(ref.sample)} test questions of the full and large profiles)")
    return out
