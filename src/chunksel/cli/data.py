"""``chunksel features`` and ``chunksel embed``: fill the feature store and the embedding
cache ahead of time, in this process or as a Ray Data job (``--ray``, chunksel.bulk)."""

from __future__ import annotations

import argparse

from chunksel.cli.common import INDEX_HELP, INDEXES, add_common, add_ray_options
from chunksel.settings import Settings

COMMANDS = ("features", "embed")


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("features", help="extract generator question features into the feature store")
    add_common(p)
    p.add_argument("--dataset", nargs="+", required=True)
    p.add_argument("--generator", default=None, help="HF directory or .gguf file (default SmolLM2-135M-Instruct)")
    p.add_argument("--k", type=int, default=5)
    p.add_argument("--index", choices=INDEXES, default="flat", help=INDEX_HELP)
    p.add_argument("--limit", type=int, default=None)
    p.add_argument("--batch-size", type=int, default=32)
    add_ray_options(p)

    p = sub.add_parser("embed", help="encode a corpus into the embedding cache (shards), optionally index it")
    add_common(p)
    p.add_argument("--corpus", required=True, help="wiki-w100, msmarco-sub, or a passage TSV/JSONL file")
    p.add_argument("--index", choices=["none", "ivfpq"], default="none",
                   help="also build the IVF-PQ index shard by shard (default none)")
    p.add_argument("--shard-rows", type=int, default=4096, help="passages per shard (default 4096)")
    p.add_argument("--encoder-engine", choices=["torch", "onnx", "onnx-int8"], default="torch",
                   help="torch (sentence-transformers), or MiniLM on ONNX Runtime: onnx (fp32), onnx-int8")
    add_ray_options(p)


def run(args: argparse.Namespace, settings: Settings) -> int:
    return (features if args.command == "features" else embed)(args, settings)


def features(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.build import build_instances, extract_question_features

    progress = not settings.quiet
    for ds in args.dataset:
        built = build_instances(ds, k=args.k, index=args.index, limit=args.limit, seed=args.seed, progress=progress,
                                label=settings.label)
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


def embed(args: argparse.Namespace, settings: Settings) -> int:
    from chunksel.data.corpus import Corpus, user_corpus_path
    from chunksel.retrieval.onnx_encoder import make_encoder

    progress = not settings.quiet
    corpus = Corpus.load(user_corpus_path(args.corpus), progress=progress)
    encoder = make_encoder(args.encoder_engine, threads=args.threads)
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
