"""`assistant ingest PATH...` and `assistant search QUERY`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import typer

from assistant.cli.errors import fail
from assistant.services import Services


def ingest(
    paths: list[Path] = typer.Argument(..., help="Files or folders to ingest."),
    collection: str = typer.Option("default", "--collection", help="Collection name."),
    visibility: str = typer.Option("everyone", "--visibility", help="private|group|everyone."),
    group: str | None = typer.Option(None, "--group", help="Group for --visibility group."),
    max_mb: float = typer.Option(50.0, "--max-mb", help="Largest file accepted, in MB."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Parse, chunk, embed and index documents (txt, md, html, pdf, docx)."""
    import time

    from tqdm import tqdm

    from assistant.documents import DocumentLibrary, check_access, expand_paths

    if max_mb <= 0:
        raise fail("--max-mb must be positive")
    check_access(visibility, group)
    library = DocumentLibrary(Services(), max_mb=max_mb)
    files, _ = expand_paths(paths)
    started = time.perf_counter()
    with (
        tqdm(total=len(files), desc="parsing", unit="file", file=sys.stderr) as files_bar,
        tqdm(desc="embedding", unit="chunk", file=sys.stderr) as chunks_bar,
    ):

        def on_chunks(n: int, total: int) -> None:
            chunks_bar.total = total
            chunks_bar.update(n)

        report = library.ingest(
            paths,
            collection=collection,
            visibility=visibility,
            group_name=group,
            on_file=lambda _path: files_bar.update(1),
            on_chunks=on_chunks,
        )
    seconds = time.perf_counter() - started
    if as_json:
        typer.echo(json.dumps(report.as_dict()))
        return
    rate = report.chunks / seconds if seconds else 0.0
    typer.echo(
        f"ingested {report.documents} documents, {report.chunks} chunks "
        f"in {seconds:.1f}s ({rate:.1f} chunks/s)"
    )
    for item in report.skipped:
        typer.echo(f"skipped {item['path']}: {item['reason']}")
    for item in report.failed:
        typer.echo(f"failed  {item['path']}: {item['reason']}")


def search(
    query: str | None = typer.Argument(None, help="The question or keywords."),
    k: int = typer.Option(5, "-k", help="Number of passages."),
    collection: str | None = typer.Option(None, "--collection", help="Only this collection."),
    mode: str = typer.Option("hybrid", "--mode", help="hybrid|vector|bm25."),
    file: Path | None = typer.Option(None, "--file", help="One query per line."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Search the indexed documents (as a trusted caller: every document is visible)."""
    from assistant.documents import DocumentLibrary

    if (query is None) == (file is None):
        raise fail("give either a QUERY or --file QUERIES.txt")
    if k < 1:
        raise fail(f"-k must be at least 1, got {k}")
    if file is not None and not file.is_file():
        raise fail(f"{file}: no such file")
    queries = [query] if file is None else [q for q in file.read_text().splitlines() if q.strip()]
    library = DocumentLibrary(Services())
    for text in queries:
        hits = [h.as_dict() for h in library.search(text, k, None, collection, mode)]
        if as_json:
            typer.echo(json.dumps(hits))
            continue
        if not hits:
            typer.echo("no passage in the documents clears the relevance floor")
        for n, h in enumerate(hits, 1):
            page = f" p.{h['page']}" if h["page"] else ""
            typer.echo(f"[{n}] {h['score']:.4f} {h['document']}{page} :: {h['section']}")
            typer.echo(f"    {h['text'][:300]}")
