"""How reports name datasets and selectors (display names from the selector registry)."""

from __future__ import annotations

#: default dataset order: the paper's three first
DATASET_ORDER: tuple[str, ...] = ("triviaqa", "popqa", "msmarco", "nq", "squad2", "hotpotqa")

DATASET_NAMES: dict[str, str] = {
    "triviaqa": "TriviaQA",
    "popqa": "PopQA",
    "msmarco": "MS MARCO",
    "nq": "NQ",
    "squad2": "SQuAD 2.0",
    "hotpotqa": "HotpotQA",
    "wikiqa": "WikiQA",
}

#: what a missing cell prints
DASH = "–"

#: reference rows that never compete for the bold "best" mark nor "strongest baseline"
REFERENCE_SELECTORS: frozenset[str] = frozenset({"oracle"})


def dataset_label(name: str) -> str:
    return DATASET_NAMES.get(name, name)


def _described(name: str) -> dict[str, str] | None:
    """The registry's description of ``name`` (None: unregistered, or its extra is missing)."""
    from chunksel.errors import ChunkselError
    from chunksel.selectors.base import REGISTRY, describe

    if name not in REGISTRY:
        return None
    try:
        return describe(name)
    except (ChunkselError, ImportError):
        return None


def selector_label(name: str) -> str:
    """The display name a registered selector declares (its registry name otherwise)."""
    d = _described(name)
    return name if d is None else d["display_name"]


def selector_role(name: str) -> str | None:
    """The role a registered selector declares (``flagship``, ``baseline``, ``reference``...),
    None for a name the registry does not know."""
    d = _described(name)
    return None if d is None else d["role"]
