"""Grouped splits: no evaluation question shares an evidence passage with a training one.

The default split (:mod:`chunksel.data.splits`) hashes each question's text, so two
questions about the same passage (SQuAD asks several per paragraph; PopQA's e5 and
NeuroPath sets share gold passages) can sit in train and test, and a selector that reads
chunk embeddings can memorise the passage. Here questions are joined into groups by
their evidence (gold passage ids, normalised gold texts, and every candidate a label
marks positive) with a union-find, and a whole group takes the split of the hash of
its smallest normalised question text, so the split of a group never depends on the
order it was read in. :func:`evidence_overlap` measures what the grouping removes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from chunksel.data.splits import DEFAULT_RATIOS, split_of
from chunksel.data.text import normalise_question, normalise_text
from chunksel.errors import ConfigError
from chunksel.types import Instance

#: how questions are assigned to train/val/test: ``question`` (a hash of the question's
#: text, :mod:`chunksel.data.splits`) or ``grouped`` (this module)
SPLIT_SCHEMES = ("question", "grouped")


def check_split_scheme(split: str) -> None:
    """Refuse a split scheme that is not one of :data:`SPLIT_SCHEMES`."""
    if split not in SPLIT_SCHEMES:
        raise ConfigError(f"unknown split scheme {split!r}; use {' or '.join(SPLIT_SCHEMES)}")


def evidence_keys(inst: Instance, own_labels: bool = False) -> set[str]:
    """The evidence passages of one instance: gold ids and texts, positive candidates.

    A candidate counts when any of its label sources marks it positive, so the groups
    hold whichever label a study trains on; with ``own_labels``, only when the instance's
    own label spec (``label_source``) does, so labels attached after the split was drawn
    (an LLM judge's sidecars) leave the count alone.
    """
    q = inst.question
    keys = {f"id:{g}" for g in q.gold_ids}
    keys |= {f"text:{normalise_text(t)}" for t in q.gold_texts if t and t.strip()}
    for c in inst.candidates:
        if c.is_positive(inst.label_source) if own_labels else any(v >= 1 for v in c.labels.values()):
            keys.add(f"id:{c.id}")
            keys.add(f"text:{normalise_text(c.text)}")
    return keys


class _UnionFind:
    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def evidence_groups(instances: Sequence[Instance]) -> list[int]:
    """A group id per instance: instances sharing any evidence key share a group."""
    uf = _UnionFind(len(instances))
    first: dict[str, int] = {}
    for i, inst in enumerate(instances):
        for key in evidence_keys(inst):
            if key in first:
                uf.union(first[key], i)
            else:
                first[key] = i
    return [uf.find(i) for i in range(len(instances))]


def grouped_splits(instances: Sequence[Instance],
                   ratios: tuple[float, float, float] = DEFAULT_RATIOS) -> list[str]:
    """One split per instance, constant within each evidence group.

    A group's split is :func:`~chunksel.data.splits.split_of` of the smallest
    normalised question text in it, so a group of one question keeps the split the
    default scheme gives it.
    """
    groups = evidence_groups(instances)
    rep: dict[int, str] = {}
    for g, inst in zip(groups, instances, strict=True):
        text = normalise_question(inst.question.text)
        if g not in rep or text < rep[g]:
            rep[g] = text
    by_group = {g: split_of(text, ratios) for g, text in rep.items()}
    return [by_group[g] for g in groups]


def apply_grouped_splits(instances: Sequence[Instance]) -> dict:
    """Give ``instances`` grouped splits in place; the evidence overlap before and after."""
    before = evidence_overlap(instances)
    for inst, s in zip(instances, grouped_splits(instances), strict=True):
        inst.split = s
    return {"before": before, "after": evidence_overlap(instances), **group_sizes(instances)}


def evidence_overlap(instances: Sequence[Instance], splits: Sequence[str] | None = None,
                     own_labels: bool = False) -> dict:
    """Share of val/test questions with an evidence passage that a train question also has.

    Args:
        instances: the instances of one dataset.
        splits: a split per instance (default: each instance's own ``split``).
        own_labels: count a candidate as evidence only under the instance's own label spec
            (:func:`evidence_keys`).

    Returns:
        ``{"val": {"questions", "shared", "shared_pct"}, "test": {...}}``.
    """
    splits = [i.split for i in instances] if splits is None else list(splits)
    train_keys: set[str] = set()
    for inst, s in zip(instances, splits, strict=True):
        if s == "train":
            train_keys |= evidence_keys(inst, own_labels)
    out: dict[str, dict[str, float]] = {}
    for part in ("val", "test"):
        idx = [j for j, s in enumerate(splits) if s == part]
        shared = sum(1 for j in idx if evidence_keys(instances[j], own_labels) & train_keys)
        out[part] = {"questions": len(idx), "shared": shared,
                     "shared_pct": round(100.0 * shared / len(idx), 2) if idx else 0.0}
    return out


def group_sizes(instances: Sequence[Instance]) -> dict[str, int]:
    """The number of groups and the largest group's size (a giant group skews ratios)."""
    counts: dict[int, int] = defaultdict(int)
    for g in evidence_groups(instances):
        counts[g] += 1
    return {"groups": len(counts), "largest": max(counts.values(), default=0)}
