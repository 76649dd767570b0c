"""``chunksel bench`` and ``chunksel report``: run the benchmark study, re-render a report."""

from __future__ import annotations

import argparse

from chunksel.cli.common import add_common
from chunksel.settings import Settings

COMMANDS = ("bench", "report")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="run the benchmark study and write the report")
    add_common(p)
    p.add_argument("--profile", choices=["quick", "full", "large"], default="quick",
                   help="quick (<= 500 questions a dataset, 1 seed), full (<= 3,000, 3 seeds), "
                        "large (every question, 3 seeds, learning curves; no Tables 2-3)")
    p.add_argument("--datasets", nargs="+", default=None)
    p.add_argument("--selectors", nargs="+", default=None)
    p.add_argument("--out", default=None, help="report directory (default reports/<profile>)")
    p.add_argument("--no-reuse", action="store_true",
                   help="retrain everything instead of reusing results memoised by an earlier run")
    p.add_argument("--jobs", type=int, default=1,
                   help="worker processes: the datasets are split over them for the per-dataset stages, "
                        "then the study reads their memoised results (default 1)")
    p.add_argument("--split", choices=["grouped", "question"], default=None,
                   help="grouped (the profiles' default: no val/test question shares an evidence passage "
                        "with a training question) or question (a hash of the question text, as before)")
    p.add_argument("--transfer", action=argparse.BooleanOptionalAction, default=None,
                   help="the leave-one-dataset-out table (default: the profile's choice, on in full and large)")
    p.add_argument("--part", default=None, metavar="DATASET", help=argparse.SUPPRESS)  # a --jobs worker: the
    # whole study's first dataset (chunksel.study.run.worker_command)

    p = sub.add_parser("report", help="re-render report.md and the plots from a report folder's results.json")
    add_common(p)
    p.add_argument("folder", help="a report folder (holding results.json)")
    p.add_argument("--out", default=None, help="write into this folder instead (default: the same one)")


def run(args: argparse.Namespace, settings: Settings) -> int:
    return (bench if args.command == "bench" else report)(args, settings)


def bench(args: argparse.Namespace, settings: Settings) -> int:
    check_dataset_names(args.datasets)  # before the study imports or loads anything
    from chunksel.study.run import run_bench

    run_bench(profile=args.profile, datasets=args.datasets, selectors=args.selectors,
              out=args.out, seed=args.seed, progress=not settings.quiet, reuse=not args.no_reuse,
              jobs=args.jobs, threads=settings.threads, part_of=args.part, split=args.split,
              transfer=args.transfer, settings=settings)
    return 0


def check_dataset_names(names: list[str] | None) -> None:
    """``--datasets``: every name a benchmark dataset, refused before any work."""
    import difflib

    from chunksel.data.datasets import DATASETS
    from chunksel.errors import ConfigError

    for name in names or []:
        if name not in DATASETS:
            close = difflib.get_close_matches(name, list(DATASETS), n=1)
            raise ConfigError(f"--datasets: unknown dataset {name!r}{f' (did you mean {close[0]!r}?)' if close else ''}"
                              f"; known: {', '.join(DATASETS)}")


def report(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.study.report import write_report
    from chunksel.study.results import load_results

    path = write_report(load_results(args.folder), args.out or args.folder)
    print(f"wrote {path}")
    return 0
