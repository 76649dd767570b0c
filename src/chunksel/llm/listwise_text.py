"""The text side of the LLM selectors: prompts, the repair of malformed outputs and the
window arithmetic (which positions each call sees).

:mod:`chunksel.llm.listwise` runs them against a backend and describes the protocol; this
module has no backend and no I/O, so the arithmetic is testable on its own.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chunksel.errors import ConfigError, DataError

# ------------------------------------------------------------------ prompts
RANK_SYSTEM = "You are an assistant that ranks passages by their relevance to a search query."
RANK_USER = (
    "I will give you {n} passages, each marked with a number in square brackets. "
    "Rank them by their relevance to the query: {query}\n\n"
    "{passages}\n\n"
    "Search query: {query}\n"
    "Rank the {n} passages above by their relevance to the search query, most relevant first. "
    "Write the ranking with the passage numbers only, in the format [2] > [1] > [3]. "
    "Do not explain."
)
UTILITY_SYSTEM = (
    "You are an assistant that selects the passages that are useful for answering a question."
)
UTILITY_USER = (
    "I will give you {n} passages, each marked with a number in square brackets. "
    "A passage is useful if it helps to write an accurate and complete answer to the question: "
    "{query}\n\n"
    "{passages}\n\n"
    "Question: {query}\n"
    "First write a short answer to the question from the passages, as \"Answer: ...\". "
    "Then select the useful passages, as \"My selection: [[i],[j],...]\" with their numbers "
    "(\"My selection: []\" if none is useful)."
)
KEEP_USER = (
    "Question: {query}\n"
    "Draft answer: {answer}\n"
    "Passage: {passage}\n"
    "Is this passage useful for answering the question? Answer only with Yes or No."
)
KEEP_OPTIONS = ("Yes", "No")
#: the content-free passage of the calibrated keep/skip read
CONTENT_FREE = "N/A"

#: the template text that keys each task's response-cache namespace
RANK_TEMPLATE = RANK_SYSTEM + "\n" + RANK_USER
UTILITY_TEMPLATE = UTILITY_SYSTEM + "\n" + UTILITY_USER
KEEP_TEMPLATE = KEEP_USER


def check_question(question: str) -> str:
    if not isinstance(question, str) or not question.strip():
        raise DataError("empty question text: LLM selection needs a question")
    return question.strip()


def passage_text(text: str, title: str = "", max_words: int | None = 120) -> str:
    """A passage as the prompt shows it: ``title: text`` (title when given), cut to
    ``max_words`` words (``None``: uncut), whitespace collapsed."""
    body = " ".join((text or "").split())
    if max_words is not None:
        words = body.split(" ")
        if len(words) > max_words:
            body = " ".join(words[:max_words])
    title = " ".join((title or "").split())
    return f"{title}: {body}" if title else body


def _numbered(passages: Sequence[str]) -> str:
    return "\n".join(f"[{i}] {p}" for i, p in enumerate(passages, 1))


def rank_prompt(question: str, passages: Sequence[str]) -> list[dict[str, str]]:
    """The listwise ranking prompt (system + user turn) for one window.

    Raises:
        DataError: an empty question or no passages.
    """
    q = check_question(question)
    if not passages:
        raise DataError("no passages to rank")
    user = RANK_USER.format(n=len(passages), query=q, passages=_numbered(passages))
    return [{"role": "system", "content": RANK_SYSTEM}, {"role": "user", "content": user}]


def utility_prompt(question: str, passages: Sequence[str]) -> list[dict[str, str]]:
    """The single-call utility-selection prompt (pseudo-answer, then selection).

    Raises:
        DataError: an empty question or no passages.
    """
    q = check_question(question)
    if not passages:
        raise DataError("no passages to select from")
    user = UTILITY_USER.format(n=len(passages), query=q, passages=_numbered(passages))
    return [{"role": "system", "content": UTILITY_SYSTEM}, {"role": "user", "content": user}]


def keep_prompt(question: str, answer: str, passage: str) -> str:
    """The keep/skip prompt of the ``logprobs`` read: question, pseudo-answer, one passage."""
    q = check_question(question)
    return KEEP_USER.format(query=q, answer=" ".join((answer or "").split()) or "(none)",
                            passage=passage)


# ------------------------------------------------------------------ repairs
@dataclass
class Repairs:
    """Counts of the repairs made to malformed LLM outputs.

    Attributes:
        out_of_range: ids outside ``1..n`` dropped.
        duplicates: repeated ids dropped.
        missing: ids a permutation left out, appended in input order.
        unparsed: outputs with no readable id list (permutation: input order kept;
            selection: no ``My selection:``, so nothing selected).
        no_answer: utility outputs without ``Answer:`` (the text before the selection is
            the pseudo-answer).
    """

    out_of_range: int = 0
    duplicates: int = 0
    missing: int = 0
    unparsed: int = 0
    no_answer: int = 0

    def add(self, other: Repairs) -> None:
        for f in dataclasses.fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))

    def total(self) -> int:
        """Every repair counted."""
        return sum(dataclasses.asdict(self).values())

    def malformed(self) -> bool:
        """True when the output needed any repair."""
        return self.total() > 0

    def to_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


_BRACKET_ID = re.compile(r"\[\s*(\d+)\s*\]")
_ANY_ID = re.compile(r"\d+")
_SELECTION = re.compile(r"my\s+selection\s*:?", re.IGNORECASE)
_ANSWER = re.compile(r"answer\s*:", re.IGNORECASE)


def _clean_ids(raw: Sequence[int], n: int, rep: Repairs) -> list[int]:
    out: list[int] = []
    for x in raw:
        if not 1 <= x <= n:
            rep.out_of_range += 1
        elif x - 1 in out:
            rep.duplicates += 1
        else:
            out.append(x - 1)
    return out


def parse_permutation(text: str, n: int) -> tuple[list[int], Repairs]:
    """A ranking output (``[2] > [1] > ...``) as a permutation of ``0..n-1``, repaired.

    Ids in square brackets are read in order (bare numbers when the text has no bracketed
    id); out-of-range and repeated ids are dropped, missing ids appended in input order.

    Returns:
        ``(order, repairs)``: 0-based positions, most relevant first.
    """
    if n < 1:
        raise DataError("a permutation needs at least one passage")
    rep = Repairs()
    found = [int(m) for m in _BRACKET_ID.findall(text or "")]
    if not found:
        found = [int(m) for m in _ANY_ID.findall(text or "")]
    if not found:
        rep.unparsed += 1
        return list(range(n)), rep
    order = _clean_ids(found, n, rep)
    missing = [i for i in range(n) if i not in order]
    rep.missing += len(missing)
    return order + missing, rep


@dataclass(frozen=True)
class ParsedSelection:
    """A utility output read: the pseudo-answer, the selected 0-based positions (in the
    order written) and the repairs."""

    answer: str
    selected: list[int]
    repairs: Repairs
    empty: bool


def parse_selection(text: str, n: int) -> ParsedSelection:
    """A utility output (``Answer: ... My selection: [[i],[j]]``) read and repaired.

    The selection is the part after the last ``My selection:``; every number in it is an
    id (``[[1],[3]]``, ``[1, 3]`` and ``[1] [3]`` read alike). ``[]`` is a valid empty
    selection. See the module docstring for the repairs.
    """
    if n < 1:
        raise DataError("a selection needs at least one passage")
    text = text or ""
    rep = Repairs()
    marks = list(_SELECTION.finditer(text))
    if marks:
        head, tail = text[: marks[-1].start()], text[marks[-1].end():]
    else:
        head, tail = text, None
    am = _ANSWER.search(head)
    if am is None:
        rep.no_answer += 1
        answer = head
    else:
        answer = head[am.end():]
    answer = " ".join(answer.split())
    if tail is None:
        rep.unparsed += 1
        return ParsedSelection(answer, [], rep, True)
    line = tail.strip().split("\n")[0]
    selected = _clean_ids([int(m) for m in _ANY_ID.findall(line)], n, rep)
    return ParsedSelection(answer, selected, rep, not selected)


# ------------------------------------------------------------------ windows
def rank_windows(n: int, window: int = 20, step: int = 10) -> list[tuple[int, int]]:
    """The back-to-front windows ``(start, end)`` over ``n`` passages.

    The first window is the last ``window`` positions; each next one ends ``step``
    positions earlier; the last one starts at 0 (so the head is always ranked).
    """
    if window < 1 or step < 1:
        raise ConfigError(f"window and step must be >= 1, got {window} and {step}")
    if step > window:
        raise ConfigError(f"step {step} > window {window} would leave passages unranked")
    if n < 1:
        return []
    out = []
    end = n
    while True:
        start = max(0, end - window)
        out.append((start, end))
        if start == 0:
            return out
        end -= step


def next_utility_window(queue: Sequence[int], seen: int, n: int, window: int = 20,
                        carry: int = 10) -> tuple[list[int], list[int]]:
    """The next utility window: ``(carried, new)`` positions.

    ``carried`` is the first ``carry`` passages of the selected ``queue``; ``new`` the next
    unseen passages ``seen..`` that fill the window up to ``window`` (at least one).
    """
    if window < 2 or carry < 0 or carry >= window:
        raise ConfigError(f"need window >= 2 and 0 <= carry < window, got {window} and {carry}")
    carried = list(queue[:carry])
    new = list(range(seen, min(n, seen + window - len(carried))))
    return carried, new


def merge_queue(queue: Sequence[int], selected: Sequence[int]) -> list[int]:
    """The queue after a window: ``selected`` first, then the old queue, no duplicates."""
    out: list[int] = []
    for x in [*selected, *queue]:
        if x not in out:
            out.append(x)
    return out


def plan_utility(n: int, select: Callable[[list[int]], Sequence[int]], window: int = 20,
                 carry: int = 10) -> tuple[list[int], list[list[int]]]:
    """Run the front-to-back utility windows with a selection function.

    Args:
        n: passages in retrieval order.
        select: window (positions) -> the selected positions among them.
        window: window size.
        carry: at most this many queue passages carried into the next window.

    Returns:
        ``(queue, windows)``: the final selection and every window's positions.
    """
    queue: list[int] = []
    windows: list[list[int]] = []
    seen = 0
    while seen < n:
        carried, new = next_utility_window(queue, seen, n, window, carry)
        seen += len(new)
        win = carried + new
        windows.append(win)
        chosen = [p for p in select(win) if p in win]
        queue = merge_queue(queue, chosen)
    return queue, windows


__all__ = [
    "CONTENT_FREE",
    "KEEP_OPTIONS",
    "KEEP_TEMPLATE",
    "KEEP_USER",
    "RANK_SYSTEM",
    "RANK_TEMPLATE",
    "RANK_USER",
    "UTILITY_SYSTEM",
    "UTILITY_TEMPLATE",
    "UTILITY_USER",
    "ParsedSelection",
    "Repairs",
    "keep_prompt",
    "merge_queue",
    "next_utility_window",
    "parse_permutation",
    "parse_selection",
    "passage_text",
    "plan_utility",
    "rank_prompt",
    "rank_windows",
    "utility_prompt",
    "check_question",
]
