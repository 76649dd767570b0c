"""``chunksel select``: choose chunk(s) for one question with a saved selector or an LLM
selector (rankgpt, utility); prints the selection as JSON."""

from __future__ import annotations

import argparse
import json
import sys

from chunksel.cli.common import add_common
from chunksel.llm.cli_options import add_llm_arguments
from chunksel.settings import Settings

COMMANDS = ("select",)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("select", help="select chunk(s) for a question with any saved selector, or an LLM selector")
    add_common(p)
    p.add_argument("--model", default=None,
                   help="a saved selector directory, or the name of one that needs no training (retrieval)")
    p.add_argument("--selector", default=None, choices=["rankgpt", "utility"],
                   help="instead of --model: an LLM selector (utility returns its own dynamic k; rankgpt the --top)")
    p.add_argument("--llm", default="local", metavar="local|URL",
                   help="with --selector: local (SmolLM2 unless --llm-model) or an OpenAI-compatible base URL")
    p.add_argument("--llm-model", default=None, help="with --selector: local model path, or the server's model name")
    add_llm_arguments(p)
    p.add_argument("--question", required=True)
    p.add_argument("--chunk", action="append", default=[], help="a candidate chunk text (repeatable)")
    p.add_argument("--chunks-file", default=None, help="a UTF-8 text file with one chunk per line")
    p.add_argument("--top", type=_top, default=1, metavar="N|auto",
                   help="chunks to return (>= 1, default 1), or auto: every chunk whose calibrated probability "
                        "passes the model's operating point (may be none); only the model's first K chunks are "
                        "scored: the rest get null scores and a warning")
    p.add_argument("--threshold", type=float, default=None, metavar="P",
                   help="keep only chunks with calibrated P(evidence) >= P (may keep none)")
    p.add_argument("--min-p", type=float, default=None, metavar="P",
                   help="keep no chunk when P(some chunk holds the evidence) is below P (abstain)")
    p.add_argument("--engine", default=None, choices=["torch", "onnxruntime"],
                   help="inference engine (default: the one saved with the model, torch)")
    p.add_argument("--quantize", default=None, choices=["fp32", "int8", "int8w"],
                   help="inference numerics (default: those saved with the model, fp32)")
    p.add_argument("--corpus", default=None,
                   help="BM25-based selectors: score with this corpus's statistics (a name or a passage "
                        "TSV/JSONL file) instead of those saved with the model")


def _top(value: str) -> int | str:
    """``--top``: a whole number, or ``auto``."""
    if value == "auto":
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number or auto, got {value!r}") from None


def run(args: argparse.Namespace, settings: Settings) -> int:
    import warnings

    from chunksel.data.chunks import read_chunks_file
    from chunksel.errors import ConfigError, DataError, UnscoredChunksWarning
    from chunksel.selectors.base import read_config

    # the inputs and the saved model's config are checked before any model loads
    if not args.question.strip():
        raise DataError("empty question (--question)")
    chunks = list(args.chunk)
    if args.chunks_file:
        chunks += read_chunks_file(args.chunks_file)
    if not chunks:
        raise ConfigError("no candidate chunks: give --chunk TEXT (repeatable) or --chunks-file FILE")
    if args.selector:
        if args.model:
            raise ConfigError("give --model (a saved selector) or --selector (an LLM selector), not both")
        if args.top == "auto" or args.threshold is not None or args.min_p is not None:
            raise ConfigError("--top auto, --threshold and --min-p need a saved calibrated selector (--model)")
        print(json.dumps(llm_select(args, chunks), indent=2, ensure_ascii=False, allow_nan=False))
        return 0
    if not args.model:
        raise ConfigError("give --model DIR (a saved selector) or --selector rankgpt|utility")
    from pathlib import Path

    # a saved selector directory, or the registered name of one that needs no training (retrieval)
    from chunksel.pretrained import resolve
    from chunksel.selectors.base import REGISTRY

    named = args.model in REGISTRY and not Path(args.model).expanduser().exists()
    name = args.model if named else read_config(resolve(args.model))["name"]
    if (args.quantize or args.engine) and name != "prototype":
        raise ConfigError(f"{args.model} holds a {name!r} selector; --quantize and --engine apply to a "
                          "prototype selector")
    from chunksel.pipeline.chunk_selector import ChunkSelector

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnscoredChunksWarning)  # said below, in one line
        result = ChunkSelector.load(args.model, quantize=args.quantize, engine=args.engine,
                                    corpus=args.corpus).select(args.question, chunks, k=args.top,
                                                               threshold=args.threshold, min_p=args.min_p)
    if 0 <= result.n_scored < len(chunks):
        print(f"warning: only the first {result.n_scored} of {len(chunks)} chunks were scored (the model's "
              f"K={result.n_scored}); the rest have null scores and cannot be selected", file=sys.stderr)
    print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, allow_nan=False))
    return 0


def llm_select(args: argparse.Namespace, chunks: list[str]) -> dict:
    """``select --selector rankgpt|utility``: one question and its chunks through an LLM selector."""
    from chunksel.llm.cli_options import backend_settings
    from chunksel.selectors import make_selector
    from chunksel.types import Candidate, Instance, Question

    settings = backend_settings(args, args.llm, args.llm_model)
    settings["backend_options"] = settings.pop("options", None)
    sel = make_selector(args.selector, progress=False, **settings)
    inst = Instance(Question(id="cli", text=args.question),
                    [Candidate(id=f"chunk{j}", text=t, rank=j) for j, t in enumerate(chunks)])
    picked = sel.select_dynamic([inst])[0] if args.selector == "utility" else sel.select([inst], k=args.top)[0]
    run = sel.runs_[inst.id]
    backend = sel.llm().backend
    return {"selector": args.selector, "llm": f"{backend.name}/{backend.model_id}",
            "k": len(picked.indices), "empty": not picked.indices, "indices": picked.indices,
            "chunks": [chunks[i] for i in picked.indices],
            "order": run.order if args.selector == "rankgpt" else None,
            "pseudo_answers": run.answers, "calls": run.calls, "prompt_tokens": run.prompt_tokens,
            "llm_seconds": round(run.seconds, 3), "repairs": run.repairs.to_dict(), "read": run.read,
            "fallback": run.fallback}
