"""The ``chunksel`` command line.

``chunksel fetch-models | build | embed | features | train | eval | bench | report | select |
export | serve | label``: one module per command (or command group), each with
``add_parser(subparsers)`` and ``run(args, settings)``; this module only builds the parser
and dispatches. Heavy imports happen inside each command; a
:class:`~chunksel.errors.ChunkselError` is printed as one ``error: ...`` line (exit status 2),
never as a traceback. Settings that are wrong on their own (counts < 1, unknown or ill-typed
``--param``, a ``--model`` that is no saved selector, missing or non-UTF-8 input files) fail
before any data is built or model loaded.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from chunksel.cli import bench, build, data, eval, export, label, models, select, serve, train
from chunksel.cli.common import setup
from chunksel.errors import ChunkselError
from chunksel.settings import Settings, use

#: the command modules, in the order ``chunksel --help`` lists their commands
MODULES = (models, build, data, train, eval, bench, select, serve, export, label)


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every command's subparser."""
    from chunksel import __version__

    parser = argparse.ArgumentParser(prog="chunksel", description="Lightweight chunk selection for RAG.")
    parser.add_argument("--version", action="version", version=f"chunksel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in MODULES:
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; the process exit status (0 done, 2 a one-line error, 130 interrupted)."""
    args = build_parser().parse_args(argv)
    try:
        settings = setup(args)
        with use(settings):  # library defaults (data root, cache, label) are these settings
            return _dispatch(args, settings)
    except ChunkselError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: re-run the same command to resume from the cache", file=sys.stderr)
        return 130


def _dispatch(args: argparse.Namespace, settings: Settings) -> int:
    for module in MODULES:
        if args.command in module.COMMANDS:
            return module.run(args, settings)
    raise ChunkselError(f"unknown command {args.command!r}")


__all__ = ["MODULES", "build_parser", "main"]
