"""The bench worker's role is a command-line parameter (the hidden ``chunksel bench
--part``), not an environment variable: its command line, and what the study does with it."""

from __future__ import annotations

import sys

import pytest

from chunksel.cli import build_parser
from chunksel.errors import ConfigError
from chunksel.settings import Settings, use
from chunksel.study.run import run_bench, worker_command


def test_worker_command_round_trips_through_the_bench_parser():
    with use(Settings(data_root="/data", cache_dir="/cache", label="gold")):
        cmd = worker_command("triviaqa", "quick", ["nq", "squad2"], ["retrieval", "bm25"], "/o/part-1", 3, 1)
    assert cmd[:4] == [sys.executable, "-m", "chunksel.cli", "bench"]
    args = build_parser().parse_args(cmd[3:])
    assert (args.part, args.profile, args.datasets, args.selectors, args.out, args.seed, args.threads) == (
        "triviaqa", "quick", ["nq", "squad2"], ["retrieval", "bm25"], "/o/part-1", 3, 1)
    assert (args.data_root, args.cache, args.label) == ("/data", "/cache", "gold")
    assert args.split == "grouped"  # the workers build the splits the whole study evaluates
    question = worker_command("nq", "quick", ["nq"], ["retrieval"], "o", 0, None, split="question")
    assert build_parser().parse_args(question[3:]).split == "question"
    with use(Settings()):
        assert "--threads" not in worker_command("nq", "full", ["nq"], ["retrieval"], "o", 0, None)


def test_the_whole_study_has_no_part_and_the_option_is_hidden(capsys):
    assert build_parser().parse_args(["bench"]).part is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["bench", "--help"])
    out = capsys.readouterr().out
    assert "--jobs" in out and "--part" not in out


def test_a_worker_runs_with_one_job():
    with pytest.raises(ConfigError, match="jobs=1"):
        run_bench("quick", ["nq"], ["retrieval"], jobs=2, part_of="nq")


def test_an_unknown_split_scheme_is_refused_before_any_work():
    with pytest.raises(ConfigError, match="split scheme"):
        run_bench("quick", ["nq"], ["retrieval"], split="by-title")
