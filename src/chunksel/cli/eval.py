"""``chunksel eval``: evaluate a saved selector on a dataset split (metrics as JSON)."""

from __future__ import annotations

import argparse
import json

from chunksel.cli.common import INDEX_HELP, INDEXES, add_common, add_data_source, dataset_args
from chunksel.settings import Settings

COMMANDS = ("eval",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("eval", help="evaluate a saved selector on a dataset split")
    add_common(p)
    add_data_source(p)
    p.add_argument("--model", required=True, help="a saved selector directory, or a registered name")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=INDEXES, default="flat", help=INDEX_HELP)
    p.add_argument("--limit", type=int, default=None)


def run(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.build import build_instances, features_for
    from chunksel.eval.metrics import evaluate
    from chunksel.types import candidate_mask, label_matrix

    progress = not settings.quiet
    sel = eval_selector(args.model)  # before the (slow) build: a bad --model fails at once
    data = dataset_args(args)
    built = build_instances(k=args.k, index=args.index, limit=args.limit, seed=args.seed, progress=progress,
                            label=settings.label, **data)
    if args.input:
        from pathlib import Path

        from chunksel.selectors.bm25_stats import use_saved_corpus
        from chunksel.selectors.provenance import selector_inputs

        if "corpus_stats" in selector_inputs(sel):
            from chunksel.data.corpus import user_corpus_path

            own = user_corpus_path(args.corpus) if args.corpus else None
            if Path(args.model).is_dir():
                use_saved_corpus(sel, args.model, own)
            else:  # a registered name (bm25): the --corpus, else the input's own passages
                sel.corpus = own or built.corpus
    batch = [i for i in built.instances if i.split == args.split]
    if not batch:
        from chunksel.errors import DataError

        raise DataError(f"no {args.split!r} questions in {args.input or args.dataset} (split by question hash; "
                        "try --split train, val or test)")
    feats = features_for(batch, sel, progress=progress)
    scores = sel.score(batch, feats)
    res = evaluate(scores, label_matrix(batch, k=scores.shape[1]), candidate_mask(batch, k=scores.shape[1]))
    print(json.dumps(res, indent=2))
    return 0


def eval_selector(model: str):
    """``eval --model``: a saved selector directory, or the name of one that needs no training."""
    from pathlib import Path

    from chunksel.errors import ConfigError, DataError
    from chunksel.pretrained import PRETRAINED, resolve
    from chunksel.selectors import REGISTRY, load_selector, make_selector

    path = Path(resolve(model)).expanduser()  # a shipped pretrained model's name: its folder
    if path.exists():
        return load_selector(path)  # a file, or a directory without config.json, is named as such
    if model not in REGISTRY:
        if any(ch in model for ch in "/\\") or model.startswith((".", "~")):
            raise DataError(f"--model {model!r}: the directory does not exist (expected a saved selector directory)")
        raise ConfigError(
            f"--model {model!r} is neither a saved selector directory (no such directory), a pretrained selector "
            f"({', '.join(PRETRAINED)}) nor a registered selector (known: {', '.join(sorted(REGISTRY))})"
        )
    sel = make_selector(model)
    if not sel.is_fitted():
        raise ConfigError(
            f"selector {model!r} must be trained first: chunksel train --selector {model} --out DIR, "
            "then chunksel eval --model DIR"
        )
    return sel
