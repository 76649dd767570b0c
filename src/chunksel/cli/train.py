"""``chunksel train``: train a selector on a dataset's training split and save it."""

from __future__ import annotations

import argparse
import inspect
import sys

from chunksel.cli.common import (
    INDEX_HELP,
    INDEXES,
    add_common,
    add_data_source,
    dataset_args,
    parse_params,
)
from chunksel.settings import Settings

COMMANDS = ("train",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("train", help="train a selector on a dataset's training split")
    add_common(p)
    add_data_source(p)
    p.add_argument("--selector", required=True)
    p.add_argument("--out", required=True, help="directory to save the trained selector")
    p.add_argument("--k", type=int, default=5,
                   help="candidates per question; a selector with a fixed K (a `k` setting) is trained for it")
    p.add_argument("--index", choices=INDEXES, default="flat", help=INDEX_HELP)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="selector setting (JSON value), repeatable")


def run(args: argparse.Namespace, settings: Settings) -> int:
    from pathlib import Path

    from chunksel.build import build_instances, features_for
    from chunksel.errors import ConfigError
    from chunksel.selectors import get_selector_class
    from chunksel.selectors.params import coerce_params

    progress = not settings.quiet
    # every setting is checked before any data is built or model loaded
    cls = get_selector_class(args.selector)
    params = coerce_params(cls, parse_params(args.param), "--param", text=True)
    if "k" in inspect.signature(cls).parameters and "k" not in params:
        params["k"] = args.k  # --k 20 trains a model for 20 candidates, not the default 5
    sel = cls(**params)
    check = getattr(sel, "_validate", None)
    if callable(check):
        check()
    if Path(args.out).exists() and not Path(args.out).is_dir():
        raise ConfigError(f"--out {args.out!r} is a file; give a directory to save the selector in")
    data = dataset_args(args)
    built = build_instances(k=args.k, index=args.index, limit=args.limit, seed=args.seed, progress=progress,
                            label=settings.label, **data)
    if args.input:
        from chunksel.selectors.provenance import selector_inputs

        if "corpus_stats" in selector_inputs(sel) and getattr(sel, "corpus", None) is None:
            from chunksel.data.corpus import user_corpus_path

            # user data: no benchmark corpus to look up
            sel.corpus = user_corpus_path(args.corpus) if args.corpus else built.corpus
            print(f"BM25 statistics: {sel.corpus} (saved with the model)", file=sys.stderr)
    feats = features_for(built.instances, sel, progress=progress)
    train = [i for i in built.instances if i.split == "train"]
    val = [i for i in built.instances if i.split == "val"]
    sel.fit(train, feats, val)
    sel.save(args.out)
    print(f"saved {args.selector} to {args.out}")
    return 0
