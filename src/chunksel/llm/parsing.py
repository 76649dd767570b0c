"""Reading decisions from model output: options in free text, options from top tokens,
and reasoning blocks removed first.

- :func:`parse_choice`: which fixed option a free-text answer names (whole words, case
  folded, an explicit default otherwise).
- :func:`option_logprobs_from_steps`: each option's log-probability from an
  OpenAI-style server's per-position top tokens.
- :func:`strip_reasoning` / :func:`steps_after_reasoning`: reasoning models (Qwen3,
  DeepSeek-R1 and others served with their chat template) write ``<think>...</think>``
  before the answer; parsers see only what follows it, both in the text and in the
  token steps the log-probabilities are read from.

Pure Python; :mod:`chunksel.llm.backends` re-exports these names.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass

from chunksel.errors import DataError


def check_options(options: Sequence[str]) -> tuple[str, ...]:
    """Validate fixed options: at least one, non-empty strings, no duplicates.

    Raises:
        DataError: no options, an empty or non-string option, or a repeated option.
    """
    if isinstance(options, str) or not options:
        raise DataError("choose() needs a non-empty list of options, e.g. ['Yes', 'No']")
    opts = tuple(options)
    for o in opts:
        if not isinstance(o, str) or not o.strip():
            raise DataError(f"options must be non-empty strings, got {o!r}")
    if len(set(opts)) != len(opts):
        raise DataError(f"options must be distinct, got {list(opts)}")
    return opts


def _option_pattern(options: Sequence[str]) -> re.Pattern[str]:
    alts = "|".join(re.escape(o.strip()) for o in sorted(options, key=len, reverse=True))
    # an option counts as a whole word: "1" does not match inside "10", "No" not in "Not"
    return re.compile(rf"(?<![\w])({alts})(?![\w])", re.IGNORECASE)


def parse_choice(text: str, options: Sequence[str], default: str | None = None) -> tuple[int, str | None]:
    """Read which option a free-text answer names.

    The first whole-word, case-insensitive occurrence of any option wins ("Answer: [3]"
    gives ``"3"``, "yes, it is" gives ``"Yes"``); an output that names none gets the
    explicit default.

    Args:
        text: the generated text.
        options: the fixed options.
        default: the option used when the text names none (``None``: the first option).

    Returns:
        ``(index, reason)``: the chosen option's index and ``None``, or the default's
        index and why the text could not be parsed.

    Raises:
        DataError: bad options, or a default that is not one of them.
    """
    opts = check_options(options)
    fallback = opts[0] if default is None else default
    if fallback not in opts:
        raise DataError(f"default {fallback!r} is not one of the options {list(opts)}")
    if not text or not text.strip():
        return opts.index(fallback), "empty output"
    match = _option_pattern(opts).search(text)
    if match is None:
        return opts.index(fallback), f"no option among {list(opts)} in the output"
    found = match.group(1).casefold()
    for i, o in enumerate(opts):
        if o.strip().casefold() == found:
            return i, None
    return opts.index(fallback), "no option matched"  # pragma: no cover - regex guarantees a hit


@dataclass(frozen=True)
class TokenStep:
    """One generated position as an OpenAI-style server reports it.

    Attributes:
        token: the generated token's text.
        logprob: its log-probability.
        top: the most likely tokens at this position, ``(token, log-probability)``.
    """

    token: str
    logprob: float
    top: tuple[tuple[str, float], ...] = ()


def _logsumexp(xs: Sequence[float]) -> float:
    top = max(xs)
    return top + math.log(sum(math.exp(x - top) for x in xs))


def option_logprobs_from_steps(options: Sequence[str], steps: Sequence[TokenStep]) -> list[float]:
    """Each option's log-probability as the answer, read from a generation's top tokens.

    The walk follows the generated tokens: at position ``i`` (having generated ``s``),
    every listed token ``t`` with ``s + t`` equal to an option completes that option with
    ``log p(s) + log p(t)`` (surface variants such as ``"Yes"``/``" yes"`` add up:
    comparison ignores case and the answer's leading whitespace); the walk goes on while
    the generated text is still a prefix of some option. An option completed on the
    generated path whose text begins a longer option (``1`` and ``10``) also pays
    ``log(1 - p(tokens going on into the longer options))`` at the next position.
    Options never reached get ``-inf``.

    Args:
        options: the fixed options.
        steps: the generated positions with their top log-probabilities.

    Returns:
        One float per option (``-inf`` where the server's top tokens did not reach it).
    """
    keys = [o.strip().casefold() for o in options]
    found: list[list[float]] = [[] for _ in options]
    prefix, lp = "", 0.0
    for i, step in enumerate(steps):
        entries = dict(step.top)
        entries.setdefault(step.token, step.logprob)
        seen: set[tuple[int, str]] = set()
        for tok, tlp in entries.items():
            text = (prefix + (tok if prefix else tok.lstrip())).casefold()
            for j, key in enumerate(keys):
                if text == key and (j, tok) not in seen:
                    seen.add((j, tok))
                    score = lp + tlp
                    if tok == step.token and i + 1 < len(steps):
                        nxt = steps[i + 1]
                        nxt_entries = dict(nxt.top)
                        nxt_entries.setdefault(nxt.token, nxt.logprob)
                        mass = sum(
                            math.exp(v) for t, v in nxt_entries.items()
                            if any(k != key and k.startswith((text + t).casefold()) for k in keys)
                        )
                        score += math.log(max(1.0 - mass, 1e-30))
                    found[j].append(score)
        prefix += step.token if prefix else step.token.lstrip()
        lp += step.logprob
        if not any(k.startswith(prefix.casefold()) and k != prefix.casefold() for k in keys):
            break
    return [_logsumexp(f) if f else -math.inf for f in found]


_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.IGNORECASE | re.DOTALL)
_THINK_END = "</think>"


def strip_reasoning(text: str) -> str:
    """``text`` without its ``<think>...</think>`` blocks (an unclosed block runs to the
    end; a lone ``</think>`` drops what precedes it), stripped of outer whitespace.

    Servers that apply a reasoning model's chat template may open the block in the
    template, so the output starts inside it and only its ``</think>`` is generated.
    """
    if not text:
        return ""
    low = text.casefold()
    first_open, first_close = low.find("<think>"), low.find(_THINK_END)
    if first_close >= 0 and (first_open < 0 or first_close < first_open):
        text = text[first_close + len(_THINK_END):]  # the template opened the block
    return _THINK.sub("", text).strip()


def steps_after_reasoning(steps: Sequence[TokenStep]) -> list[TokenStep]:
    """The generated positions after the last ``</think>`` (all of them when there is
    none), leading whitespace-only tokens dropped; a block left open gives none."""
    text = "".join(s.token for s in steps).casefold()
    end = text.rfind(_THINK_END)
    if text.rfind("<think>") > end:
        return []
    start = 0
    if end >= 0:
        stop, pos = end + len(_THINK_END), 0
        for i, s in enumerate(steps):
            pos += len(s.token)
            if pos >= stop:
                start = i + 1
                break
    out = list(steps[start:])
    while out and not out[0].token.strip():
        out.pop(0)
    return out


__all__ = ["TokenStep", "check_options", "option_logprobs_from_steps", "parse_choice",
           "steps_after_reasoning", "strip_reasoning"]
