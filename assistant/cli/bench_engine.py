"""`assistant bench engine`: our engine against HF `generate()` on the same weights."""

from __future__ import annotations

import json

import typer

from assistant.cli.errors import fail
from assistant.settings import Settings


def engine(
    quick: bool = typer.Option(False, "--quick", help="Fewer requests and tokens (minutes less)."),
    threads: int | None = typer.Option(None, "--threads", help="torch CPU threads (default: all)."),
    as_json: bool = typer.Option(False, "--json", help="Print the numbers as JSON."),
) -> None:
    """Decode tok/s, batched tok/s, prefix-cache TTFT and memory-bandwidth use, with ratios."""
    if threads is not None and threads < 1:
        raise fail("--threads must be at least 1")
    from model.bench import BenchOptions, run
    from model.loader import ModelLoadError

    settings = Settings()
    model_path = str(settings.model_path) if settings.model_path else None
    try:
        result = run(BenchOptions(quick, threads, model_path, settings.device))
    except ModelLoadError as exc:
        raise fail(f"cannot load the model: {exc}") from exc
    typer.echo(json.dumps(result.as_dict()) if as_json else result.report())
