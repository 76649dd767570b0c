"""Answer containment, following DPR's ``has_answer`` rules (Karpukhin et al., 2020).

A passage *contains* an answer when the answer's token sequence occurs in the passage's
token sequence:

1. Both strings are Unicode-normalised with NFD (as DPR's ``_normalize``).
2. Both are tokenised by :class:`SimpleTokenizer` — maximal runs of letters, digits and
   combining marks (``[\\p{L}\\p{N}\\p{M}]+``) and every other single non-space,
   non-control character (``[^\\p{Z}\\p{C}]``) — and lower-cased.
3. The passage contains the answer iff the answer tokens appear contiguously.

Regex answers (CuratedTREC style, ``Question.answer_type == "regex"``) match when
``re.search(pattern, NFD(text), IGNORECASE | UNICODE | MULTILINE)`` finds something; a
pattern that does not compile counts as no match and is reported once per pattern with a
warning.

As in DPR, only the passage *text* is searched, never its title (the title names the
page, which for entity questions would make every passage of the answer's page positive).
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Iterable, Sequence

import regex

_BAD_PATTERNS: set[str] = set()


class SimpleTokenizer:
    """DPR/DrQA's simple tokenizer: alphanumeric runs and single non-space symbols."""

    ALPHA_NUM = r"[\p{L}\p{N}\p{M}]+"
    NON_WS = r"[^\p{Z}\p{C}]"

    def __init__(self) -> None:
        self._re = regex.compile(
            f"({self.ALPHA_NUM})|({self.NON_WS})",
            flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE,
        )

    def tokenize(self, text: str, uncased: bool = True) -> list[str]:
        """Tokens of ``text`` in order (lower-cased when ``uncased``)."""
        toks = [m.group() for m in self._re.finditer(text)]
        return [t.lower() for t in toks] if uncased else toks


_TOKENIZER = SimpleTokenizer()


def normalise_nfd(text: str) -> str:
    """DPR's ``_normalize``: Unicode NFD."""
    return unicodedata.normalize("NFD", text)


def answer_tokens(
    answers: Iterable[str], tokenizer: SimpleTokenizer | None = None
) -> list[list[str]]:
    """Tokenised, uncased, NFD-normalised answers (empty answers dropped)."""
    tok = tokenizer or _TOKENIZER
    out = []
    for a in answers:
        t = tok.tokenize(normalise_nfd(a), uncased=True)
        if t:
            out.append(t)
    return out


def _contains_seq(text_toks: Sequence[str], ans: Sequence[str]) -> bool:
    n = len(ans)
    first = ans[0]
    for i in range(len(text_toks) - n + 1):
        if text_toks[i] == first and list(text_toks[i : i + n]) == list(ans):
            return True
    return False


def regex_match(text: str, pattern: str) -> bool:
    """``re.search`` with IGNORECASE|UNICODE|MULTILINE; a bad pattern -> False (warned once)."""
    try:
        compiled = re.compile(pattern, flags=re.IGNORECASE | re.UNICODE | re.MULTILINE)
    except re.error as err:
        if pattern not in _BAD_PATTERNS:
            _BAD_PATTERNS.add(pattern)
            warnings.warn(
                f"invalid regex answer {pattern!r} ({err}); treated as no match", stacklevel=2
            )
        return False
    return compiled.search(text) is not None


def has_answer(
    answers: Sequence[str],
    text: str,
    answer_type: str = "string",
    tokenizer: SimpleTokenizer | None = None,
) -> bool:
    """True if the passage ``text`` contains any of ``answers`` (DPR rules, see module doc).

    Args:
        answers: reference answers (aliases), or regex patterns when ``answer_type="regex"``.
        text: the passage text (not its title).
        answer_type: ``"string"`` (token-sequence match) or ``"regex"``.
        tokenizer: a :class:`SimpleTokenizer` (one shared instance by default).
    """
    text = normalise_nfd(text)
    if answer_type == "regex":
        return any(regex_match(text, a) for a in answers)
    if answer_type != "string":
        from chunksel.errors import ConfigError

        raise ConfigError(f"unknown answer_type {answer_type!r}; known: string, regex")
    ans = answer_tokens(answers, tokenizer)
    if not ans:
        return False
    toks = (tokenizer or _TOKENIZER).tokenize(text, uncased=True)
    return any(_contains_seq(toks, a) for a in ans)


class ContainmentLabeler:
    """Answer containment for many passages of one question (answers tokenised once)."""

    def __init__(self, answers: Sequence[str], answer_type: str = "string") -> None:
        self.answers = list(answers)
        self.answer_type = answer_type
        self._ans = answer_tokens(self.answers) if answer_type == "string" else []

    def __call__(self, text: str) -> bool:
        if self.answer_type != "string":
            return has_answer(self.answers, text, self.answer_type)
        if not self._ans:
            return False
        toks = _TOKENIZER.tokenize(normalise_nfd(text), uncased=True)
        return any(_contains_seq(toks, a) for a in self._ans)
