"""How the CLI reports bad input: one line on stderr, exit code 2."""

from __future__ import annotations

import sys

import typer

EXIT_BAD_INPUT = 2


def fail(message: str) -> typer.Exit:
    """Print `error: message` and return the Exit to raise: `raise fail("...")`."""
    print(f"error: {message}", file=sys.stderr)
    return typer.Exit(EXIT_BAD_INPUT)
