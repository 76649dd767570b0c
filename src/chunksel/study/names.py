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


def selector_label(name: str) -> str:
    """The display name a registered selector declares (its registry name otherwise)."""
    from chunksel.errors import ChunkselError
    from chunksel.selectors.base import REGISTRY, describe

    if name not in REGISTRY:
        return name
    try:
        return describe(name)["display_name"]
    except (ChunkselError, ImportError):
        return name
