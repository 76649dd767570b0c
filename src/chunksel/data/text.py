"""Text normalisation shared by deduplication, split hashing and gold matching.

Two keys, both deterministic and idempotent:

- :func:`normalise_question` — the key under which a dataset's questions are deduplicated
  and hashed into splits (:mod:`chunksel.data.splits`): Unicode NFKC, lower case, format
  characters (zero-width spaces) dropped, curly quotes made straight, whitespace runs
  collapsed to one space, spaces around punctuation removed, PTB's split words (``n't``,
  ``gon na``) rejoined — the DPR NQ topics are tokenised, and ``"hell 's kitchen"`` must
  meet ``"hell's kitchen"`` — and punctuation and whitespace stripped at both ends
  (``"Who wrote Hamlet ?"`` and ``"who wrote  hamlet"`` share a key).
- :func:`normalise_passage` — the key under which a passage is matched to the corpus by
  text (the corpus was deduplicated by normalised title + text): NFKC, lower case,
  whitespace collapsed; a text that repeats its title at the start (the e5 top-3 lists,
  S2RAG's extra passages) has that prefix removed so both spellings share a key.
"""

from __future__ import annotations

import re
import unicodedata

_SPACE_AROUND_PUNCT = re.compile(r"\s*([^\w\s])\s*")
_SPLIT_NT = re.compile(r"\s+(n't)\b")
# PTB tokenisation splits these words in two ("gon na"); rejoin them
_SPLIT_WORDS = re.compile(r"\b(gon na|wan na|got ta|gim me|lem me)\b")
_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "`": "'"})


def _is_edge_junk(ch: str) -> bool:
    cat = unicodedata.category(ch)
    return ch.isspace() or cat.startswith("P") or cat in ("Cc", "Cf")


def collapse_ws(text: str) -> str:
    """Runs of whitespace -> one space, ends stripped."""
    return " ".join(text.split())


def normalise_question(text: str) -> str:
    """Dedup/split key of a question (see the module docstring for the steps).

    Args:
        text: the question as written.

    Returns:
        The key, e.g. ``"  Who's  afraid of Virginia Woolf ?"`` -> ``"who's afraid of
        virginia woolf"``; ``"who 's afraid ..."`` gives the same key.
    """
    s = unicodedata.normalize("NFKC", text).lower().translate(_QUOTES)
    s = "".join(ch for ch in s if unicodedata.category(ch) != "Cf")
    s = collapse_ws(s)
    s = _SPACE_AROUND_PUNCT.sub(r"\1", s)
    s = _SPLIT_NT.sub(r"\1", s)
    s = _SPLIT_WORDS.sub(lambda m: m.group(1).replace(" ", ""), s)
    i, j = 0, len(s)
    while i < j and _is_edge_junk(s[i]):
        i += 1
    while j > i and _is_edge_junk(s[j - 1]):
        j -= 1
    return s[i:j]


def normalise_text(text: str) -> str:
    """NFKC, lower case, whitespace collapsed: the base of the passage keys."""
    if not unicodedata.is_normalized("NFKC", text):  # fast path: most text already is
        text = unicodedata.normalize("NFKC", text)
    return " ".join(text.lower().split())


_norm = normalise_text


def passage_text_variants(title: str, text: str) -> list[str]:
    """The normalised text with 0, 1 and 2 leading copies of the title removed (distinct).

    Sources store a passage as ``body``, ``title body`` or (the e5 lists, when the body
    itself starts with the title) ``title title ...``; matching any variant of one passage
    against any variant of another finds the same passage whichever way it was stored.
    """
    t = _norm(title)
    x = _norm(text)
    out = [x]
    for _ in range(2):
        if t and x.startswith(t) and (len(x) == len(t) or x[len(t)] == " "):
            x = x[len(t) :].lstrip()
            out.append(x)
    return [v for i, v in enumerate(out) if v and v not in out[:i]]


def passage_keys(title: str, text: str) -> tuple[str, str]:
    """``(normalise_passage(title, text), normalise_passage_text(title, text))`` in one pass."""
    t = _norm(title)
    x = _norm(text)
    # strip the title as often as it leads (twice at most): "T T body" and "T body" and
    # "body" then share a key whichever way a source stored the passage
    for _ in range(2):
        if t and x.startswith(t) and (len(x) == len(t) or x[len(t)] == " "):
            x = x[len(t) :].lstrip()
    return t + " || " + x, x


def normalise_passage_text(title: str, text: str) -> str:
    """The normalised passage text alone, with leading copies of the title removed."""
    return passage_keys(title, text)[1]


def normalise_passage(title: str, text: str) -> str:
    """Gold-matching key of a passage: ``norm(title) + " || " + norm(text)``.

    ``norm`` is NFKC + lower case + collapsed whitespace; a text that starts with its own
    title has the title removed first (see :func:`normalise_passage_text`).
    """
    return passage_keys(title, text)[0]


def unquote_csv_field(text: str) -> str:
    """Undo one extra layer of CSV quoting: outer quotes off, doubled inner quotes halved.

    Some DPR topic files quote a field twice; after :mod:`csv` has parsed the line, the
    field may still be wrapped in double quotes with doubled inner quotes. A field is
    unwrapped only when it starts and ends with a double quote and every inner double
    quote is doubled.
    """
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        inner = text[1:-1]
        if '"' not in inner.replace('""', ""):
            return inner.replace('""', '"')
    return text
