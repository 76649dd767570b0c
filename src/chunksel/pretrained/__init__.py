"""Pretrained selectors shipped inside the package: load by name, no training, no data.

``ChunkSelector.load("anchored-base")`` (and the other names below; the CLI, ``serve`` and
the LangChain / LlamaIndex adapters take the same names) loads a selector trained by
:mod:`chunksel.study.pretrain` (``make pretrained``) and saved under
``chunksel/pretrained/models/<name>/``:

- ``lambdamart-base``: LightGBM LambdaMART over the twelve LETOR features and MaxSim's
  late-interaction columns over MiniLM's token vectors;
- ``anchored-base``: the lean flagship: the retrieval-anchored scorer over the
  question and chunk embeddings, the LETOR features, the late-interaction columns and its
  stacked LambdaMART, with no generator features (the generator-coupled flagship stays
  the paper's option, ``chunksel train --selector anchored``);
- ``lambdamart-lite`` and ``anchored-lite``: the same recipe's choices without the
  late-interaction columns. They read the embeddings and the texts only, so an
  application that has the chunks' embeddings but has not stored their token vectors
  pays no MiniLM pass a query (the ``-base`` models encode what is not given).

All four were trained pooled on the six benchmark datasets' training splits (every TREC DL
topic left out), model selection and calibration on their pooled validation splits, with
the BM25 / TF-IDF statistics of the Wikipedia passage corpus, which travel with them
(``corpus_stats/``; ``corpus=`` at load uses the user's own chunks instead). Each
folder's ``PROVENANCE.json`` records the data checksums, the commit and the settings;
``MANIFEST.json`` here records every shipped file's SHA-256, checked by
:func:`verify_pretrained` (and by the test suite).
"""

from __future__ import annotations

import json
from pathlib import Path

from chunksel.config import file_checksum
from chunksel.errors import DataError

#: the shipped models, with one line each
PRETRAINED = {
    "anchored-base": "the lean retrieval-anchored flagship (question and chunk embeddings, LETOR features, "
                     "MaxSim over MiniLM token vectors, stacked LambdaMART; no generator), trained on six QA "
                     "datasets",
    "lambdamart-base": "LambdaMART over twelve LETOR features and MaxSim over MiniLM token vectors, trained on "
                       "six QA datasets",
    "anchored-lite": "anchored-base without the token vectors (embeddings and LETOR features only): no MiniLM "
                     "pass when the embeddings are given",
    "lambdamart-lite": "LambdaMART over the twelve LETOR features alone: no MiniLM pass when the embeddings "
                       "are given",
}
#: where the shipped models live (inside the installed package)
MODELS_DIR = Path(__file__).resolve().parent / "models"
MANIFEST = "MANIFEST.json"


def is_pretrained(name: object) -> bool:
    """Whether ``name`` is the name of a shipped model (not a path)."""
    return isinstance(name, str) and name in PRETRAINED


def pretrained_dir(name: str) -> Path:
    """The folder of a shipped model.

    Raises:
        DataError: an unknown name, or a package built without its models.
    """
    if name not in PRETRAINED:
        raise DataError(f"no pretrained selector {name!r}; shipped: {', '.join(PRETRAINED)}")
    folder = MODELS_DIR / name
    if not (folder / "config.json").is_file():
        raise DataError(f"the pretrained selector {name!r} is not in this installation ({folder} has no "
                        "config.json): rebuild it with `make pretrained`, or reinstall chunksel")
    return folder


def resolve(path: str | Path) -> str | Path:
    """A shipped model's folder for its name, unless a local path of that name exists;
    anything else unchanged."""
    if is_pretrained(str(path)) and not Path(path).expanduser().exists():
        return pretrained_dir(str(path))
    return path


def _sha256(path: Path) -> str:
    return file_checksum(path, length=64)  # the whole digest


def read_manifest(root: Path = MODELS_DIR) -> dict:
    """``MANIFEST.json``: ``{"files": {relative path: sha256}, ...}``."""
    try:
        return json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError) as err:
        raise DataError(f"the pretrained models' {MANIFEST} cannot be read ({err})") from None


def verify_pretrained(root: Path = MODELS_DIR) -> dict[str, str]:
    """Check every shipped file against ``MANIFEST.json``; returns the manifest's files.

    Raises:
        DataError: a file missing, changed, or not in the manifest.
    """
    files = read_manifest(root).get("files") or {}
    problems = []
    for rel, digest in sorted(files.items()):
        path = root / rel
        if not path.is_file():
            problems.append(f"{rel} is missing")
        elif _sha256(path) != digest:
            problems.append(f"{rel} does not match its recorded checksum")
    shipped = {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() and p.name != MANIFEST}
    problems += [f"{rel} is not in {MANIFEST}" for rel in sorted(shipped - set(files))]
    if problems:
        raise DataError("the pretrained models do not match their manifest: " + "; ".join(problems)
                        + " (rebuild them with `make pretrained`)")
    return files


def write_manifest(root: Path, extra: dict | None = None) -> dict:
    """Record the SHA-256 of every file under ``root`` in ``root/MANIFEST.json``."""
    files = {str(p.relative_to(root)): _sha256(p) for p in sorted(root.rglob("*"))
             if p.is_file() and p.name != MANIFEST}
    out = {"files": files, **(extra or {})}
    (root / MANIFEST).write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    return out
