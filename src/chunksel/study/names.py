"""How reports name datasets and selectors (display names from the selector registry)."""

from __future__ import annotations

from chunksel.data.datasets import BENCHMARK_DATASETS, DATASETS

#: default dataset order (the registry's: the paper's three first)
DATASET_ORDER: tuple[str, ...] = BENCHMARK_DATASETS

#: how reports name each dataset (the registry's display names)
DATASET_NAMES: dict[str, str] = {n: s.display_name or n for n, s in DATASETS.items()}

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
