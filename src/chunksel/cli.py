"""The ``chunksel`` command line.

``chunksel fetch-models | build | embed | features | train | eval | bench | select | export | serve | label``
(``embed``, ``features`` and ``label`` run on Ray with ``--ray`` / ``--ray-address``). Heavy
imports happen inside each command; a :class:`~chunksel.errors.ChunkselError` is printed
as one ``error: ...`` line (exit status 2), never as a traceback. Settings that are wrong
on their own (counts < 1, unknown or ill-typed ``--param``, a ``--model`` that is no saved
selector, missing or non-UTF-8 input files) fail before any data is built or model loaded.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from chunksel.errors import ChunkselError


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--threads", type=int, default=None,
                   help="CPU threads for torch/BLAS/FAISS, >= 1 (default: no limit)")
    p.add_argument("--data-root", default=None, help="input data root (default $CHUNKSEL_DATA)")
    p.add_argument("--cache", default=None, help="cache root (default $CHUNKSEL_CACHE or ~/.cache/chunksel)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("--label", default=None, metavar="SPEC",
                   help="label spec replacing each dataset's default, e.g. semantic or containment|gold "
                        "(sets $CHUNKSEL_LABEL; semantic needs `chunksel label` first)")


def _ray_options(p: argparse.ArgumentParser) -> None:
    """``--ray`` / ``--ray-address``: run the bulk job as a Ray Data pipeline (chunksel.bulk)."""
    p.add_argument("--ray", action="store_true",
                   help="run as a Ray Data job on a local Ray instance (needs chunksel[ray])")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="run as a Ray Data job on the Ray cluster at ADDR (implies --ray)")
    p.add_argument("--workers", type=int, default=2, help="Ray workers, each loads the model once (default 2)")


def build_parser() -> argparse.ArgumentParser:
    from chunksel import __version__

    parser = argparse.ArgumentParser(prog="chunksel", description="Lightweight chunk selection for RAG.")
    parser.add_argument("--version", action="version", version=f"chunksel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("fetch-models", help="obtain the default generator (SmolLM2 GGUF) and cache it")
    _common(p)

    p = sub.add_parser("build", help="build benchmark instances for a dataset")
    _common(p)
    p.add_argument("--dataset", required=True, help="triviaqa, nq, popqa, msmarco, squad2, hotpotqa, wikiqa")
    p.add_argument("--k", type=int, default=5, help="candidates per question (default 5)")
    p.add_argument("--index", choices=["flat", "ivfpq"], default="flat", help="FAISS index (default flat)")
    p.add_argument("--candidates", choices=["retrieve", "given"], default="retrieve",
                   help="retrieve from the corpus, or use the candidates a set ships with")
    p.add_argument("--limit", type=int, default=None, help="deterministic sample of at most N questions")
    p.add_argument("--input", default=None, help="a generic JSONL file instead of a named dataset")
    p.add_argument("--corpus", default=None,
                   help="with --input records without ctxs: the corpus to retrieve from "
                        "(wiki-w100, msmarco-sub, or a passage TSV/JSONL file)")

    p = sub.add_parser("features", help="extract generator question features into the feature store")
    _common(p)
    p.add_argument("--dataset", nargs="+", required=True)
    p.add_argument("--generator", default=None, help="HF directory or .gguf file (default SmolLM2-135M-Instruct)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=["flat", "ivfpq"], default="flat")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=32)
    _ray_options(p)

    p = sub.add_parser("embed", help="encode a corpus into the embedding cache (shards), optionally index it")
    _common(p)
    p.add_argument("--corpus", required=True, help="wiki-w100, msmarco-sub, or a passage TSV/JSONL file")
    p.add_argument("--index", choices=["none", "ivfpq"], default="none",
                   help="also build the IVF-PQ index shard by shard (default none)")
    p.add_argument("--shard-rows", type=int, default=4096, help="passages per shard (default 4096)")
    _ray_options(p)

    p = sub.add_parser("train", help="train a selector on a dataset's training split")
    _common(p)
    _data_source(p)
    p.add_argument("--selector", required=True)
    p.add_argument("--out", required=True, help="directory to save the trained selector")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=["flat", "ivfpq"], default="flat")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                   help="selector setting (JSON value), repeatable")

    p = sub.add_parser("eval", help="evaluate a saved selector on a dataset split")
    _common(p)
    _data_source(p)
    p.add_argument("--model", required=True, help="a saved selector directory, or a registered name")
    p.add_argument("--split", default="test")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=["flat", "ivfpq"], default="flat")
    p.add_argument("--limit", type=int, default=None)

    p = sub.add_parser("bench", help="run the benchmark study and write the report")
    _common(p)
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

    p = sub.add_parser("report", help="re-render report.md and the plots from a report folder's results.json")
    _common(p)
    p.add_argument("folder", help="a report folder (holding results.json)")
    p.add_argument("--out", default=None, help="write into this folder instead (default: the same one)")

    p = sub.add_parser("select", help="select chunk(s) for a question with any saved selector, or an LLM selector")
    _common(p)
    p.add_argument("--model", default=None, help="a saved selector directory")
    p.add_argument("--selector", default=None, choices=["rankgpt", "utility"],
                   help="instead of --model: an LLM selector (utility returns its own dynamic k; rankgpt the --top)")
    p.add_argument("--llm", default="local", metavar="local|URL",
                   help="with --selector: local (SmolLM2 unless --llm-model) or an OpenAI-compatible base URL")
    p.add_argument("--llm-model", default=None, help="with --selector: local model path, or the server's model name")
    p.add_argument("--question", required=True)
    p.add_argument("--chunk", action="append", default=[], help="a candidate chunk text (repeatable)")
    p.add_argument("--chunks-file", default=None, help="a UTF-8 text file with one chunk per line")
    p.add_argument("--top", type=int, default=1,
                   help="chunks to return (>= 1, default 1); only the model's first K chunks are scored: "
                        "the rest get null scores and a warning")
    p.add_argument("--engine", default=None, choices=["torch", "onnxruntime"],
                   help="inference engine (default: the one saved with the model, torch)")
    p.add_argument("--quantize", default=None, choices=["fp32", "int8", "int8w"],
                   help="inference numerics (default: those saved with the model, fp32)")
    p.add_argument("--corpus", default=None,
                   help="BM25-based selectors: score with this corpus's statistics (a name or a passage "
                        "TSV/JSONL file) instead of those saved with the model")

    p = sub.add_parser("serve", help="serve a saved selector over HTTP (needs chunksel[serve])")
    _common(p)
    p.add_argument("--model", required=True, help="a saved selector directory")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000; 0 = any free port, printed)")
    p.add_argument("--api-key", default=None,
                   help="require this key in the X-API-Key header (default $CHUNKSEL_API_KEY; none = open)")
    p.add_argument("--corpus", default=None, help="as for select")
    p.add_argument("--generator", default=None, help="generator path (default SmolLM2-135M-Instruct)")
    p.add_argument("--no-answer", action="store_true", help="disable POST /answer (no generator is loaded for it)")
    p.add_argument("--max-request-bytes", type=int, default=1_000_000)
    p.add_argument("--max-chunks", type=int, default=64, help="chunks per question (default 64)")
    p.add_argument("--max-chunk-chars", type=int, default=8000, help="characters per chunk (default 8000)")
    p.add_argument("--max-questions", type=int, default=32, help="questions per batch request (default 32)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="cap on /answer's max_new_tokens")
    p.add_argument("--concurrency", type=int, default=2, help="requests worked on at once (default 2)")
    p.add_argument("--queue", type=int, default=64,
                   help="requests allowed to wait for a worker; more get 503 (default 64)")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per request before a 504 (default 30)")
    p.add_argument("--batch-wait-ms", type=float, default=0.0,
                   help="collect /select requests arriving within this many ms into one batch (default 0: off)")

    p = sub.add_parser("export", help="export a trained prototype or anchored selector as a self-contained ONNX graph")
    _common(p)
    p.add_argument("--model", required=True, help="a saved prototype or anchored selector directory")
    p.add_argument("--out", required=True, help="the .onnx file to write")
    p.add_argument("--quantize", default="fp32", choices=["fp32", "int8"],
                   help="fp32, or int8 (int8 weights, per-row dynamic int8 activations)")
    # -- chunksel label: LLM labels (labels/judge.py: semantic; labels/utility.py: utility)
    p = sub.add_parser("label", help="LLM labels for every candidate: 'semantic' (the judge's prompt) or "
                                     "'utility' (the utility selector as teacher)")
    _common(p)
    p.add_argument("--source", default="semantic", choices=["semantic", "utility"],
                   help="semantic (judge, default) or utility (teacher selections, labels/utility.py)")
    p.add_argument("--dataset", required=True)
    p.add_argument("--judge", required=True, metavar="local|URL",
                   help="local (transformers, SmolLM2 unless --model) or an OpenAI-compatible base URL")
    p.add_argument("--model", default=None, help="local: a model folder or .gguf; URL: the server's model name")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=["flat", "ivfpq"], default="flat")
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=8, help="pairs per backend call (default 8)")
    _ray_options(p)
    return parser


def _data_source(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dataset", default=None, help="a benchmark dataset (or the label of an --input file)")
    p.add_argument("--input", default=None, help="a generic JSONL file instead of a named dataset")
    p.add_argument("--corpus", default=None,
                   help="with --input: the corpus to retrieve from when records have no ctxs, and the "
                        "BM25 statistics corpus (default: the input's own passages, or those saved with the model)")


def _dataset_args(args: argparse.Namespace) -> dict:
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
_COUNTS = ("threads", "jobs", "k", "limit", "batch_size", "top", "max_request_bytes", "max_chunks",
           "max_chunk_chars", "max_questions", "max_new_tokens", "concurrency", "queue", "workers",
           "shard_rows")


def _check_settings(args: argparse.Namespace) -> None:
    """Refuse impossible option values up front, before any data or model loads."""
    from chunksel.errors import ConfigError

    for name in _COUNTS:
        value = getattr(args, name, None)
        if value is not None and value < 1:
            hint = " (leave it out for no limit)" if name == "threads" else ""
            raise ConfigError(f"--{name.replace('_', '-')} must be >= 1, got {value}{hint}")
    if not 0 <= args.seed < 2**32:
        raise ConfigError(f"--seed must be in [0, 2**32 - 1], got {args.seed}")


def _setup(args: argparse.Namespace) -> None:
    _check_settings(args)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.data_root:
        os.environ["CHUNKSEL_DATA"] = args.data_root
    if args.cache:
        os.environ["CHUNKSEL_CACHE"] = args.cache
    if args.quiet:
        os.environ["TQDM_DISABLE"] = "1"
    if args.label:
        os.environ["CHUNKSEL_LABEL"] = args.label
    from chunksel.config import set_threads

    set_threads(args.threads)
    import random

    import numpy as np

    random.seed(args.seed)
    np.random.seed(args.seed)


def _params(pairs: Sequence[str]) -> dict[str, str]:
    """``--param KEY=VALUE`` pairs as raw text (coerced per setting by the selector's class)."""
    from chunksel.errors import ConfigError

    out = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--param expects KEY=VALUE, got {pair!r}")
        out[key.strip()] = raw
    return out


def _llm_select(args: argparse.Namespace, chunks: list[str]) -> dict:
    """``select --selector rankgpt|utility``: one question and its chunks through an LLM selector."""
    from chunksel.errors import ConfigError
    from chunksel.selectors import make_selector
    from chunksel.types import Candidate, Instance, Question

    if args.llm == "local":
        settings = {"backend": "local", "model": args.llm_model}
    elif args.llm.startswith(("http://", "https://")):
        if not args.llm_model:
            raise ConfigError("--llm URL needs --llm-model NAME (the server's model name)")
        settings = {"backend": "openai", "base_url": args.llm, "model": args.llm_model}
    else:
        raise ConfigError(f"--llm must be 'local' or an http(s):// base URL, got {args.llm!r}")
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
            "llm_seconds": round(run.seconds, 3), "repairs": run.repairs.to_dict(), "read": run.read}


def _eval_selector(model: str):
    """``eval --model``: a saved selector directory, or the name of one that needs no training."""
    from pathlib import Path

    from chunksel.errors import ConfigError, DataError
    from chunksel.selectors import REGISTRY, load_selector, make_selector

    path = Path(model).expanduser()
    if path.exists():
        return load_selector(path)  # a file, or a directory without config.json, is named as such
    if model not in REGISTRY:
        if any(ch in model for ch in "/\\") or model.startswith((".", "~")):
            raise DataError(f"--model {model!r}: the directory does not exist (expected a saved selector directory)")
        raise ConfigError(
            f"--model {model!r} is neither a saved selector directory (no such directory) nor a registered "
            f"selector (known: {', '.join(sorted(REGISTRY))})"
        )
    sel = make_selector(model)
    if not sel.is_fitted():
        raise ConfigError(
            f"selector {model!r} must be trained first: chunksel train --selector {model} --out DIR, "
            "then chunksel eval --model DIR"
        )
    return sel


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        _setup(args)
        return _run(args)
    except ChunkselError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: re-run the same command to resume from the cache", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    progress = not args.quiet
    if args.command == "fetch-models":
        from chunksel.llm.models import fetch_models

        for name, path in fetch_models().items():
            print(f"{name}: {path}")
        return 0

    if args.command == "build":
        from chunksel.build import build_instances, format_stats

        built = build_instances(
            args.dataset, k=args.k, index=args.index, candidates=args.candidates,
            limit=args.limit, input_path=args.input, seed=args.seed, progress=progress,
        )
        print(format_stats(built))
        print(f"instances: {built.path}")
        return 0

    if args.command == "features":
        from chunksel.build import build_instances, extract_question_features

        for ds in args.dataset:
            built = build_instances(ds, k=args.k, index=args.index, limit=args.limit, seed=args.seed, progress=progress)
            if args.ray or args.ray_address:  # chunksel.bulk: the same store, filled by Ray workers
                from chunksel.bulk.jobs import extract_features

                store, rep = extract_features([i.question for i in built.instances], args.generator,
                                              workers=args.workers, address=args.ray_address,
                                              batch_size=args.batch_size, progress=progress)
                print(f"{ds}: Ray job {rep.folder.name}: {rep.computed} shard(s) computed, "
                      f"{rep.already_done} already done")
            else:
                store = extract_question_features(
                    [i.question for i in built.instances], generator=args.generator,
                    batch_size=args.batch_size, progress=progress,
                )
            print(f"{ds}: {len(built.instances)} questions -> {store.root} (dims {store.dims})")
        return 0

    if args.command == "embed":
        from chunksel.data.corpus import Corpus, user_corpus_path
        from chunksel.retrieval.encoder import Encoder

        corpus = Corpus.load(user_corpus_path(args.corpus), progress=progress)
        encoder = Encoder()
        if args.ray or args.ray_address:
            from chunksel.bulk.jobs import encode_corpus

            rep = encode_corpus(corpus, encoder, workers=args.workers, address=args.ray_address,
                                shard_rows=args.shard_rows, progress=progress)
            print(f"{corpus.name}: {rep.computed} shard(s) encoded on Ray ({rep.rows} passages, "
                  f"{rep.seconds:.1f} s), {rep.already_done} already done")
        else:
            from chunksel.retrieval.embeddings import corpus_embeddings

            corpus_embeddings(corpus, encoder, use_precomputed=False, shard_rows=args.shard_rows,
                              progress=progress)
        from chunksel.retrieval.embeddings import embeddings_dir

        print(f"embeddings: {embeddings_dir(corpus, encoder)} ({len(corpus)} passages)")
        if args.index == "ivfpq":
            from chunksel.bulk.jobs import sharded_ivfpq

            index = sharded_ivfpq(corpus, encoder, progress=progress, seed=args.seed)
            print(f"index: {index} (filled shard by shard; `build --index ivfpq` reuses it)")
        return 0

    if args.command == "train":
        from pathlib import Path

        from chunksel.build import build_instances, features_for
        from chunksel.errors import ConfigError
        from chunksel.selectors import get_selector_class
        from chunksel.selectors.params import coerce_params

        # every setting is checked before any data is built or model loaded
        cls = get_selector_class(args.selector)
        sel = cls(**coerce_params(cls, _params(args.param), "--param", text=True))
        check = getattr(sel, "_validate", None)
        if callable(check):
            check()
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise ConfigError(f"--out {args.out!r} is a file; give a directory to save the selector in")
        data = _dataset_args(args)
        built = build_instances(k=args.k, index=args.index, limit=args.limit, seed=args.seed, progress=progress, **data)
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

    if args.command == "eval":
        from chunksel.build import build_instances, features_for
        from chunksel.eval.metrics import evaluate
        from chunksel.types import candidate_mask, label_matrix

        sel = _eval_selector(args.model)  # before the (slow) build: a bad --model fails at once
        data = _dataset_args(args)
        built = build_instances(k=args.k, index=args.index, limit=args.limit, seed=args.seed, progress=progress, **data)
        if args.input:
            from pathlib import Path

            from chunksel.selectors.bm25_stats import use_saved_corpus
            from chunksel.selectors.provenance import selector_inputs

            if "corpus_stats" in selector_inputs(sel) and Path(args.model).is_dir():
                from chunksel.data.corpus import user_corpus_path

                use_saved_corpus(sel, args.model, user_corpus_path(args.corpus) if args.corpus else None)
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

    if args.command == "bench":
        from chunksel.bench import run_bench

        run_bench(profile=args.profile, datasets=args.datasets, selectors=args.selectors,
                  out=args.out, seed=args.seed, progress=progress, reuse=not args.no_reuse,
                  jobs=args.jobs, threads=args.threads)
        return 0

    if args.command == "report":
        from chunksel.eval.output import write_report
        from chunksel.eval.results import load_results

        path = write_report(load_results(args.folder), args.out or args.folder)
        print(f"wrote {path}")
        return 0

    if args.command == "select":
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
            print(json.dumps(_llm_select(args, chunks), indent=2, ensure_ascii=False, allow_nan=False))
            return 0
        if not args.model:
            raise ConfigError("give --model DIR (a saved selector) or --selector rankgpt|utility")
        name = read_config(args.model)["name"]
        if (args.quantize or args.engine) and name != "prototype":
            raise ConfigError(f"{args.model} holds a {name!r} selector; --quantize and --engine apply to a "
                              "prototype selector")
        from chunksel.pipeline.chunk_selector import ChunkSelector

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UnscoredChunksWarning)  # said below, in one line
            result = ChunkSelector.load(args.model, quantize=args.quantize, engine=args.engine,
                                        corpus=args.corpus).select(args.question, chunks, k=args.top)
        if 0 <= result.n_scored < len(chunks):
            print(f"warning: only the first {result.n_scored} of {len(chunks)} chunks were scored (the model's "
                  f"K={result.n_scored}); the rest have null scores and cannot be selected", file=sys.stderr)
        print(json.dumps(result.to_dict(), indent=2, ensure_ascii=False, allow_nan=False))
        return 0
    if args.command == "serve":
        from chunksel.pipeline.server import ServeSettings, serve

        settings = ServeSettings(
            host=args.host, port=args.port, api_key=args.api_key or os.environ.get("CHUNKSEL_API_KEY") or None,
            answer=not args.no_answer, max_request_bytes=args.max_request_bytes, max_chunks=args.max_chunks,
            max_chunk_chars=args.max_chunk_chars, max_questions=args.max_questions,
            max_new_tokens=args.max_new_tokens, concurrency=args.concurrency, queue=args.queue,
            timeout_s=args.timeout, batch_wait_ms=args.batch_wait_ms,
        )
        serve(args.model, settings, corpus=args.corpus, generator=args.generator)
        return 0
    if args.command == "export":
        from chunksel.pipeline.onnx_export import OnnxPrototype, export_prototype
        from chunksel.selectors import load_selector

        sel = load_selector(args.model)
        if getattr(sel, "name", "") == "anchored":
            from chunksel.pipeline.onnx_anchored import OnnxAnchored, export_anchored

            path = export_anchored(sel, args.out, quantize=args.quantize)
            runner = OnnxAnchored(path)  # reads it back: a broken export fails here
            ins = ", ".join(f"{i.name} {i.shape}" for i in runner.session.get_inputs())
            print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {args.quantize}); inputs: {ins}; "
                  f"outputs: scores ['n', {runner.k}]")
            return 0
        if getattr(sel, "name", "") != "prototype":
            raise ChunkselError(
                f"{args.model} holds a {getattr(sel, 'name', '?')!r} selector; export needs a prototype "
                "or anchored selector"
            )
        path = export_prototype(sel, args.out, quantize=args.quantize)
        runner = OnnxPrototype(path)  # reads it back: a broken export fails here, not on the device
        ins = ", ".join(f"{i.name} {i.shape}" for i in runner.session.get_inputs())
        print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {args.quantize}); inputs: {ins}; "
              f"outputs: scores ['n', {runner.layout.k}], prototype ['n', {runner.layout.d_e}]")
        return 0
    if args.command == "label":  # LLM-judge labels (labels/judge.py)
        from chunksel.errors import ConfigError
        from chunksel.llm.backends import get_backend

        if args.judge == "local":
            backend = get_backend("local", model_path=args.model, batch_size=args.batch_size)
        elif args.judge.startswith(("http://", "https://")):
            if not args.model:
                raise ConfigError("--judge URL needs --model NAME (the server's model name)")
            backend = get_backend("openai", base_url=args.judge, model=args.model)
        else:
            raise ConfigError(f"--judge must be 'local' or an http(s):// base URL, got {args.judge!r}")
        from chunksel.build import build_instances
        from chunksel.labels.judge import label_instances, write_sidecar

        os.environ.pop("CHUNKSEL_LABEL", None)  # the labels are being made: no spec to apply yet
        built = build_instances(args.dataset, k=args.k, index=args.index, limit=args.limit, seed=args.seed,
                                progress=progress)
        if args.source == "utility":
            from chunksel.labels import utility

            ures = utility.label_instances(built.instances, backend, progress=progress)
            upath = utility.write_sidecar(built.path, ures)
            print(f"{args.dataset}: {ures.summary()}")
            print(f"labels: {upath} (use --label utility)")
            return 0
        if args.ray or args.ray_address:  # chunksel.bulk: Ray workers fill the same response cache
            from chunksel.bulk.jobs import judge_instances

            judge = ("local", {"model_path": args.model}) if args.judge == "local" else (
                "openai", {"base_url": args.judge, "model": args.model})
            res, rep = judge_instances(built.instances, *judge, workers=args.workers, address=args.ray_address,
                                       batch_size=args.batch_size, progress=progress)
            print(f"{args.dataset}: Ray job {rep.folder.name}: {rep.computed} shard(s) judged, "
                  f"{rep.already_done} already done")
        else:
            res = label_instances(built.instances, backend, batch_size=args.batch_size, progress=progress)
        path = write_sidecar(built.path, res)
        st = res.stats
        rate = f", {res.pairs_per_second:.2f} pairs/s" if st["misses"] else ""
        print(f"{args.dataset}: {len(res.rows)} pairs judged by {res.judge} ({st['misses']} new, {st['hits']} cached"
              f"{rate}); positive {sum(r.label for r in res.rows)}, unparsed {len(res.failures)}")
        print(f"labels: {path} (use --label semantic)")
        return 0
    raise ChunkselError(f"unknown command {args.command!r}")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
