"""Selectors: the :class:`Selector` interface and the lazy registry."""

from __future__ import annotations

from chunksel.selectors.base import (
    REGISTRY,
    Selector,
    available,
    get_selector_class,
    load_selector,
    make_selector,
)

__all__ = ["REGISTRY", "Selector", "available", "get_selector_class", "load_selector", "make_selector"]
