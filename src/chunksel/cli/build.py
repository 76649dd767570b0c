"""``chunksel build``: benchmark instances (questions with their K candidates) for a dataset."""

from __future__ import annotations

import argparse

from chunksel.cli.common import INDEX_HELP, INDEXES, add_common
from chunksel.settings import Settings

COMMANDS = ("build",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("build", help="build benchmark instances for a dataset")
    add_common(p)
    p.add_argument("--dataset", default=None,
                   help="triviaqa, nq, popqa, msmarco, squad2, hotpotqa, wikiqa (or the label of an --input file)")
    p.add_argument("--k", type=int, default=5, help="candidates per question (default 5)")
    p.add_argument("--index", choices=INDEXES, default="flat", help=INDEX_HELP)
    p.add_argument("--candidates", choices=["retrieve", "given"], default="retrieve",
                   help="retrieve from the corpus, or use the candidates a set ships with")
    p.add_argument("--limit", type=int, default=None, help="deterministic sample of at most N questions")
    p.add_argument("--input", default=None, help="a generic JSONL file instead of a named dataset")
    p.add_argument("--corpus", default=None,
                   help="with --input records without ctxs: the corpus to retrieve from "
                        "(wiki-w100, msmarco-sub, or a passage TSV/JSONL file)")
    p.add_argument("--split", choices=["question", "grouped"], default="question",
                   help="question: hash of the question text (default); grouped: questions "
                        "sharing an evidence passage share a split")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.build import build_instances, format_stats
    from chunksel.cli.common import dataset_args
    from chunksel.data.instances import load_meta

    data = dataset_args(args)  # --dataset or --input; --corpus only with --input
    built = build_instances(
        k=args.k, index=args.index, candidates=args.candidates, limit=args.limit, seed=args.seed,
        progress=not settings.quiet, label=settings.label, split=args.split, **data,
    )
    print(format_stats(built))
    overlap = load_meta(built.path).get("evidence_overlap")
    if overlap:
        for part in ("val", "test"):
            b, a = overlap["before"][part], overlap["after"][part]
            print(f"{part} questions sharing an evidence passage with train: "
                  f"{b['shared_pct']:.1f}% before grouping, {a['shared_pct']:.1f}% after")
    print(f"instances: {built.path}")
    return 0
