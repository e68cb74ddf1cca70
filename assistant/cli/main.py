"""The `assistant` command. Each command group lives in its own module."""

from __future__ import annotations

import os
import sys

import typer

from assistant.cli import bench, db, generate, ingest, safety, serve, tools, users
from assistant.cli.errors import EXIT_BAD_INPUT
from assistant.errors import AssistantError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

app = typer.Typer(
    help="Self-hosted assistant: chat, documents, tools, on its own engine.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    add_completion=False,
)
app.command()(serve.serve)
app.add_typer(db.app, name="db")
app.add_typer(users.app, name="users")
app.add_typer(safety.app, name="safety")
app.add_typer(bench.app, name="bench")
app.add_typer(tools.app, name="tools")
app.command()(ingest.ingest)
app.command()(ingest.search)
app.command()(generate.generate)


def main(argv: list[str] | None = None) -> int:
    """Entry point: usage errors and AssistantError become one line and exit code 2."""
    try:
        result = app(args=argv, standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        print("aborted", file=sys.stderr)
        return 130
    except typer.TyperException as exc:  # usage errors: unknown command, missing option, ...
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        print(f"error: {exc.format_message()}{hint}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except AssistantError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return result if isinstance(result, int) else 0


if __name__ == "__main__":
    sys.exit(main())
