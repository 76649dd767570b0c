from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from chunksel.selectors.bm25 import BM25Stats
from chunksel.selectors.letor import FEATURE_NAMES, instance_features, letor_features
from chunksel.types import Candidate, Instance, Question

DOCS = ["apple banana apple", "banana cherry", "cherry date elder fig"]


@pytest.fixture
def stats() -> BM25Stats:
    return BM25Stats.from_texts(DOCS)


def _instance() -> Instance:
    cands = [
        Candidate(id="a", title="Apple", text="red apple pie banana", score=0.9, rank=0,
                  labels={"containment": 0}),
        Candidate(id="b", title="", text="the cherry tree", score=float("nan"), rank=1,
                  labels={"containment": 1}),
    ]
    q = Question(id="toy:q:1", text="the apple pie recipe", answers=["cherry"], dataset="toy")
    return Instance(q, cands, label_source="containment")


def test_feature_values(stats: BM25Stats) -> None:
    f = instance_features(_instance(), stats)
    assert f.shape == (2, len(FEATURE_NAMES))
    col = {n: i for i, n in enumerate(FEATURE_NAMES)}
    assert f[0, col["retrieval_score"]] == 0.9 and f[1, col["retrieval_score"]] == 0.0  # NaN -> 0
    assert f[:, col["reciprocal_rank"]].tolist() == [1.0, 0.5]
    # question terms {apple, pie, recipe}; passage a has apple and pie, b none
    assert f[:, col["query_coverage"]].tolist() == pytest.approx([2 / 3, 0.0])
    assert f[0, col["title_overlap"]] == pytest.approx(1 / 3)
    # question bigrams (stopwords kept): (the apple) (apple pie) (pie recipe); a has "apple pie"
    assert f[0, col["bigram_overlap"]] == pytest.approx(1 / 3)
    assert f[0, col["log_passage_len"]] == pytest.approx(math.log1p(5))  # apple red apple pie banana
    assert f[1, col["log_question_len"]] == pytest.approx(math.log1p(4))
    assert f[0, col["bm25"]] > 0 and f[1, col["bm25"]] == 0
    assert f[:, col["bm25_gap"]].max() == 0.0
    assert 0 < f[0, col["tfidf_cosine"]] < 1 and f[1, col["tfidf_cosine"]] == 0
    # idf coverage: apple (df 1) and pie (unseen) covered out of apple, pie, recipe (unseen)
    idf = {t: math.log(4 / (df + 1)) + 1 for t, df in {"apple": 1, "pie": 0, "recipe": 0}.items()}
    assert f[0, col["idf_coverage"]] == pytest.approx((idf["apple"] + idf["pie"]) / sum(idf.values()))


def test_features_never_read_labels_or_answers(stats: BM25Stats) -> None:
    a = _instance()
    b = _instance()
    b.question.answers = ["apple pie"]
    for c in b.candidates:
        c.labels = {"containment": 1 - c.labels["containment"], "gold": 1}
    np.testing.assert_array_equal(instance_features(a, stats), instance_features(b, stats))


def test_batch_features_pad_with_zeros(tmp_path: Path) -> None:
    path = tmp_path / "c.tsv"
    path.write_text("id\ttext\ttitle\n" + "".join(f"d{i}\t{t}\t\n" for i, t in enumerate(DOCS)))
    short = _instance()
    long = _instance()
    long.candidates.append(Candidate(id="c", text="apple", rank=2))
    x, mask = letor_features([short, long], corpus=str(path))
    assert x.shape == (2, 3, len(FEATURE_NAMES))
    assert mask.tolist() == [[True, True, False], [True, True, True]]
    assert not x[0, 2].any()


_SCRIPT = """
import sys
from chunksel.selectors.bm25 import BM25Stats
from chunksel.selectors.letor import instance_features
from chunksel.types import Candidate, Instance, Question
words = [f"w{i}" for i in range(60)]
docs = [" ".join(words[j:j + 7 + j % 5]) for j in range(50)]
stats = BM25Stats.from_texts(docs)
q = Question(id="toy:q:1", text=" ".join(words[3:40:3]), answers=["x"], dataset="toy")
cands = [Candidate(id=str(j), text=docs[j], title=words[j], score=1.0 - j / 10, rank=j) for j in range(0, 50, 7)]
sys.stdout.write(instance_features(Instance(q, cands), stats).tobytes().hex())
"""


def test_features_do_not_depend_on_the_process_hash_seed() -> None:
    """Sums over sets of terms are exact (math.fsum), so two processes with different
    string-hash seeds compute bit-identical features (a plain sum did not, which moved
    LambdaMART's early-stopped trees between runs)."""
    import os
    import subprocess
    import sys

    out = [subprocess.run([sys.executable, "-c", _SCRIPT], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONHASHSEED": str(seed)}).stdout for seed in (1, 2, 3, 4)]
    assert out[0] and len(set(out)) == 1
