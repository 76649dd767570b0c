"""Options every command shares, the checks run before any work, and the process set-up.

:func:`setup` turns the shared options into one :class:`~chunksel.settings.Settings` (the
options first, then the environment) after refusing impossible values up front.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

from chunksel.settings import Settings

#: ``--index`` choices: candidate retrieval (``chunksel.build.INDEXES``, spelled out so that
#: parsing imports no build code)
INDEXES = ("flat", "ivfpq", "bm25")
INDEX_HELP = "candidates: flat or ivfpq (MiniLM + FAISS), or bm25 (default flat)"


def add_common(p: argparse.ArgumentParser) -> None:
    """``--seed --threads --data-root --cache --quiet --label``: on every command."""
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch/BLAS/FAISS, >= 1 (default: no limit)")
    p.add_argument("--data-root", default=None, help="input data root (default $CHUNKSEL_DATA)")
    p.add_argument("--cache", default=None, help="cache root (default $CHUNKSEL_CACHE or ~/.cache/chunksel)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--label", default=None, metavar="SPEC",
                   help="label spec replacing each dataset's default, e.g. semantic or containment|gold "
                        "(default $CHUNKSEL_LABEL; semantic needs `chunksel label` first)")


def add_ray_options(p: argparse.ArgumentParser) -> None:
    """``--ray`` / ``--ray-address``: run the bulk job as a Ray Data pipeline (chunksel.bulk)."""
    p.add_argument("--ray", action="store_true",
                   help="run as a Ray Data job on a local Ray instance (needs chunksel[ray])")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="run as a Ray Data job on the Ray cluster at ADDR (implies --ray)")
    p.add_argument("--workers", type=int, default=2, help="Ray workers, each loads the model once (default 2)")


def add_data_source(p: argparse.ArgumentParser) -> None:
    """``--dataset`` / ``--input`` / ``--corpus`` of ``train`` and ``eval``."""
    p.add_argument("--dataset", default=None, help="a benchmark dataset (or the label of an --input file)")
    p.add_argument("--input", default=None, help="a generic JSONL file instead of a named dataset")
    p.add_argument("--corpus", default=None,
                   help="with --input: the corpus to retrieve from when records have no ctxs, and the "
                        "BM25 statistics corpus (default: the input's own passages, or those saved with the model)")


def dataset_args(args: argparse.Namespace) -> dict:
    """``build_instances`` arguments of ``--dataset`` / ``--input`` / ``--corpus``."""
    from chunksel.errors import ConfigError

    if not args.dataset and not args.input:
        raise ConfigError("give --dataset NAME or --input FILE (a generic JSONL file)")
    if args.corpus and not args.input:
        raise ConfigError("--corpus applies to an --input file (a named dataset has its own corpus)")
    if args.input:
        from pathlib import Path

        from chunksel.errors import DataError

        if not Path(args.input).is_file():
            raise DataError(f"--input {args.input!r}: no such file")
    retrieve_from = None
    if args.input and args.corpus:
        from chunksel.data.jsonl import load_user_jsonl

        if any(c is None for _, c in load_user_jsonl(args.input)):
            retrieve_from = args.corpus
    return {"dataset": args.dataset or "user", "input_path": args.input, "corpus": retrieve_from}


#: options that take a count: each must be >= 1 when given (checked before any work)
COUNTS = ("threads", "jobs", "k", "limit", "batch_size", "top", "max_request_bytes", "max_chunks",
          "max_chunk_chars", "max_questions", "max_new_tokens", "concurrency", "queue", "workers",
          "shard_rows")


def check_settings(args: argparse.Namespace) -> None:
    """Refuse impossible option values up front, before any data or model loads."""
    from chunksel.errors import ConfigError

    for name in COUNTS:
        value = getattr(args, name, None)
        if value is not None and value != "auto" and value < 1:  # select --top auto
            hint = " (leave it out for no limit)" if name == "threads" else ""
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}{hint}")
    if not 0 <= args.seed < 2**32:
        raise ConfigError(f"--seed must be in [0, 2**32 - 1], got {args.seed}")


def setup(args: argparse.Namespace) -> Settings:
    """Check the options, set up the process (offline hubs, threads, seeds) and return the
    run's settings: each option given, else the environment's value."""
    check_settings(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.quiet:
        os.environ["TQDM_DISABLE"] = "1"  # tqdm's own switch: silences every bar, also in libraries
    env = Settings.from_env()
    settings = Settings(data_root=args.data_root or env.data_root, cache_dir=args.cache or env.cache_dir,
                        label=args.label or env.label, threads=args.threads, quiet=bool(args.quiet))
    from chunksel.threads import set_threads

    set_threads(settings.threads)
    import random

    import numpy as np

    random.seed(args.seed)
    np.random.seed(args.seed)
    return settings


def parse_params(pairs: Sequence[str]) -> dict[str, str]:
    """``--param KEY=VALUE`` pairs as raw text (coerced per setting by the selector's class)."""
    from chunksel.errors import ConfigError

    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = raw
    return out
