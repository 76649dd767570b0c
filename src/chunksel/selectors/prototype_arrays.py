"""The paper prototype's input arrays: feature blocks, candidate embeddings, generator
features and the checks on their dimensions, shared by the selector
(:mod:`chunksel.selectors.prototype`), its feature budgets
(the :class:`~chunksel.nn.inputs.FeatureLayout` of :mod:`chunksel.training.budgets`)
and its ONNX export (which reads the same layout).

``x = [h ; r ; E]``: ``h`` and ``r`` from the generator's question-only warm-up pass,
``E`` the top-K candidates' L2-normalised retriever embeddings flattened in retrieval
order (zeros at padded slots).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from chunksel.errors import ConfigError, DataError
from chunksel.nn.inputs import BLOCKS, FeatureLayout
from chunksel.selectors.base import QuestionFeatures
from chunksel.types import Instance


def parse_blocks(blocks: str | Sequence[str]) -> tuple[str, ...]:
    """``"hs+chunk"``, ``"hs,chunk"`` or ``("hs", "chunk")`` -> ``("hs", "chunk")`` (fixed order)."""
    if isinstance(blocks, str):
        blocks = [b for b in blocks.replace("+", ",").split(",")]
    names = [b.strip().lower() for b in blocks if b.strip()]
    bad = sorted(set(names) - set(BLOCKS))
    if bad or not names:
        raise ConfigError(f"blocks must be a non-empty subset of {', '.join(BLOCKS)}; got {list(blocks)}")
    return tuple(b for b in BLOCKS if b in names)


def question_features(
    batch: Sequence[Instance], features: QuestionFeatures | None, blocks: Sequence[str]
) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(h, r)`` of the batch's questions for the blocks that read them (None otherwise)."""
    if "hs" not in blocks and "rw" not in blocks:
        return None, None
    if features is None:
        raise DataError(
            f"the prototype selector with blocks {'+'.join(blocks)} needs generator "
            "features (h, r): pass a feature store"
        )
    got = features.lookup([inst.id for inst in batch])
    h = got.get("h") if "hs" in blocks else None
    r = got.get("r") if "rw" in blocks else None
    if "hs" in blocks and h is None:
        raise DataError("the feature store has no 'h' array (needed by the 'hs' block)")
    if "rw" in blocks and r is None:
        raise DataError("the feature store has no 'r' array (needed by the 'rw' block)")
    return h, r


def candidate_embeddings(
    batch: Sequence[Instance], k: int, d_e: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(B, K, d) candidate embeddings (zeros at padding) and the (B, K) real mask."""
    if d_e is None:
        d_e = next((c.embedding.shape[-1] for i in batch for c in i.candidates[:k] if c.embedding is not None), None)
        if d_e is None:
            raise DataError("no candidate has an embedding: the prototype selector needs E")
    e = np.zeros((len(batch), k, d_e), dtype=np.float32)
    m = np.zeros((len(batch), k), dtype=bool)
    for b, inst in enumerate(batch):
        for j, cand in enumerate(inst.candidates[:k]):
            if cand.embedding is None:
                raise DataError(f"instance {inst.id!r}: candidate {cand.id!r} has no embedding")
            if cand.embedding.shape[-1] != d_e:
                raise DataError(
                    f"instance {inst.id!r}: candidate embedding dimension {cand.embedding.shape[-1]} "
                    f"!= {d_e} (the selector's)"
                )
            e[b, j] = cand.embedding
            m[b, j] = True
    return e, m


def check_layout(
    layout: FeatureLayout, h: np.ndarray | None, r: np.ndarray | None, e: np.ndarray,
    generator_id: str = "", encoder_id: str = "",
) -> None:
    """Refuse arrays whose dimensions differ from the layout the selector was trained on."""
    for name, arr, dim in (("h", h, layout.d_h), ("r", r, layout.d_r)):
        if arr is not None and arr.shape[-1] != dim:
            where = f" ({generator_id})" if generator_id else ""
            raise DataError(
                f"generator features have {name} of dimension {arr.shape[-1]}, but the selector was "
                f"trained on {name} of dimension {dim}{where}"
            )
    if e.shape[-1] != layout.d_e:
        raise DataError(
            f"chunk embeddings have dimension {e.shape[-1]}, but the selector was trained on "
            f"dimension {layout.d_e}{' (' + encoder_id + ')' if encoder_id else ''}"
        )


def split_input(layout: FeatureLayout, x: np.ndarray) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray]:
    """Full-layout ``x`` (B, D) -> (h, r, E) as the ONNX graph takes them."""
    sl = layout.slices()
    h = x[:, sl["hs"]] if "hs" in sl else None
    r = x[:, sl["rw"]] if "rw" in sl else None
    if "chunk" in sl:
        e = x[:, sl["chunk"]].reshape(len(x), layout.k, layout.d_e)
    else:
        e = np.zeros((len(x), layout.k, layout.d_e), dtype=np.float32)
    return h, r, e


def block_input(layout: FeatureLayout, arr: np.ndarray | None, block: str, b: int) -> np.ndarray | None:
    """``h`` or ``r`` as (B, d) float32 when the layout uses ``block``, else None."""
    if block not in layout.blocks:
        return None
    if arr is None:
        raise DataError(f"the selector uses the {block!r} block: pass {'h' if block == 'hs' else 'r'}")
    arr = np.ascontiguousarray(arr, dtype=np.float32)
    return arr[None] if arr.ndim == 1 and b == 1 else arr.reshape(b, -1)


def all_true(mask: np.ndarray) -> bool:
    """``mask.all()`` for a bool array without a ufunc reduction: at batch 1, right after
    the model's weights have streamed through the caches, ``mask.all()`` costs about 20 us,
    this about 2 us (``benchmarks/selector_latency.py``'s raw-array path)."""
    return b"\x00" not in mask.tobytes()


__all__ = [
    "all_true", "block_input", "candidate_embeddings", "check_layout", "parse_blocks", "question_features",
    "split_input",
]
