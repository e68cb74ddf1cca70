"""`assistant bench ...`: benchmarks that print ratios against a baseline run alongside."""

from __future__ import annotations

import typer

from assistant.cli.bench_engine import engine
from assistant.cli.bench_retrieval import retrieval

app = typer.Typer(help="Benchmarks (engine, retrieval).", no_args_is_help=True)
app.command("retrieval")(retrieval)
app.command("engine")(engine)
