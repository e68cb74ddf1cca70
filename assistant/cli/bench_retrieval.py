"""`assistant bench retrieval`: ingest chunks/s and query latency at 10k/100k chunks."""

from __future__ import annotations

from pathlib import Path

import typer

from assistant.cli.errors import fail
from assistant.settings import Settings

EVAL_DOCS = Path(__file__).resolve().parents[2] / "tests" / "data" / "policies"


def retrieval(
    sizes: str = typer.Option("10000,100000", "--sizes", help="Synthetic corpus sizes."),
    queries: int = typer.Option(200, "--queries", help="Queries timed per size."),
    docs: Path = typer.Option(EVAL_DOCS, "--docs", help="Folder ingested for throughput."),
    repeat: int = typer.Option(4, "--repeat", help="Times the folder is ingested."),
    threads: int | None = typer.Option(None, "--threads", help="torch and FAISS threads."),
) -> None:
    """Ingest throughput and query latency, exact vs approximate, with recall."""
    try:
        counts = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise fail(f"--sizes must be comma-separated integers, got '{sizes}'") from None
    if not counts or min(counts) < 100 or queries < 1 or repeat < 1:
        raise fail("--sizes need at least 100 chunks each; --queries and --repeat at least 1")
    if not docs.is_dir():
        raise fail(f"{docs}: not a folder of documents")
    import faiss
    import torch

    from retrieval import Embedder
    from retrieval.benchmark import ingest_throughput, query_latency
    from retrieval.evaluate import load_questions

    if threads is not None:
        if threads < 1:
            raise fail("--threads must be at least 1")
        torch.set_num_threads(threads)
        faiss.omp_set_num_threads(threads)
    typer.echo(f"threads: torch {torch.get_num_threads()}, faiss {faiss.omp_get_max_threads()}")

    settings = Settings()
    embedder = Embedder(settings.embedding_model_path(), settings.device)
    ingest_throughput(embedder, docs, repeat, typer.echo)
    texts = [q.q for q in load_questions(EVAL_DOCS.parent / "questions.jsonl")]
    for size in counts:
        query_latency(embedder, size, texts, queries, typer.echo)
