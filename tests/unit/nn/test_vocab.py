from __future__ import annotations

import numpy as np
import pytest

from chunksel.nn.vocab import encode, load_word_embeddings


@pytest.mark.model
def test_minilm_wordpiece_table_and_tokenizer() -> None:
    table = load_word_embeddings()
    assert table.shape == (30522, 384) and table.dtype == np.float32
    ids, mask = encode(["What is the alpha answer?", ""], max_len=4)
    assert ids.shape == (2, 4) and mask[0].all() and not mask[1].any()
    assert ids[0].tolist() == [2054, 2003, 1996, 6541]  # uncased WordPiece ids, no [CLS]
