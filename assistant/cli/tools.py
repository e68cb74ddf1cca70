"""`assistant tools list|run|approve|reject|show`."""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from assistant.cli.errors import EXIT_BAD_INPUT, fail
from assistant.services import Services
from assistant.storage.database import transaction

app = typer.Typer(
    help="List tools, run them, approve or reject pending calls.", no_args_is_help=True
)

# The one failure that is not the caller's to fix: a broken tool exits 1, not 2.
_CRASHED = "tool_crashed"

USER = typer.Option(
    None,
    "--user",
    help="Email of the user the call belongs to / who decides (default: the local operator).",
)
AS_JSON = typer.Option(False, "--json", help="Print JSON.")


@app.command("list")
def list_(as_json: bool = AS_JSON) -> None:
    """List the tools, their arguments and whether they need approval."""
    rows = [
        {
            "name": tool.name,
            "description": tool.description,
            "side_effects": tool.side_effects,
            "requires_role": tool.requires_role,
            "enabled": tool.disabled_reason is None,
            "disabled_reason": tool.disabled_reason,
            "arguments": tool.arguments_schema(),
        }
        for tool in _registry().all()
    ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        flag = "needs approval" if row["side_effects"] else "runs at once"
        if not row["enabled"]:
            flag = f"disabled: {row['disabled_reason']}"
        args = ", ".join(row["arguments"]["properties"])
        typer.echo(f"{row['name']:<22} ({args})  [{flag}]\n    {row['description']}")


@app.command()
def run(
    name: str = typer.Argument(..., help="Tool name (see 'assistant tools list')."),
    args: str = typer.Option("{}", "--args", help="Arguments as a JSON object, e.g. '{\"k\": 3}'."),
    yes: bool = typer.Option(False, "--yes", help="Approve a side-effecting call right away."),
    user: str | None = USER,
    as_json: bool = AS_JSON,
) -> None:
    """Propose a tool call; without --yes a call with side effects waits for approval."""
    arguments = _parse_arguments(args)
    with _services() as services:
        calls = _tool_calls(services)
        owner = _user(services, user)
        with _progress(name):
            view = calls.propose(owner, name, arguments)
            if view.status == "pending_approval" and yes:
                view = calls.approve(view.id, owner)
    _report(view, as_json, user)


@app.command()
def approve(
    call_id: int = typer.Argument(..., help="The id 'tools run' printed."),
    user: str | None = USER,
    as_json: bool = AS_JSON,
) -> None:
    """Approve a pending call (its owner or an admin) and run it."""
    with _services() as services:
        calls = _tool_calls(services)
        decider = _user(services, user)
        with _progress(calls.get(call_id, decider).tool_name):
            view = calls.approve(call_id, decider)
    _report(view, as_json, user)


@app.command()
def reject(
    call_id: int = typer.Argument(..., help="The id 'tools run' printed."),
    user: str | None = USER,
    reason: str = typer.Option("", "--reason", help="Why, for the audit trail."),
    as_json: bool = AS_JSON,
) -> None:
    """Reject a pending call (its owner or an admin); it will never run."""
    with _services() as services:
        view = _tool_calls(services).reject(call_id, _user(services, user), reason)
    _report(view, as_json, user)


@app.command()
def show(
    call_id: int = typer.Argument(..., help="Tool call id."),
    user: str | None = USER,
    as_json: bool = AS_JSON,
) -> None:
    """Show a call and its audit trail."""
    with _services() as services:
        calls = _tool_calls(services)
        viewer = _user(services, user)
        data = calls.get(call_id, viewer).to_dict()
        data["audit"] = [
            {"event": e.event, "actor_id": e.actor_id, "at": e.at.isoformat(), "detail": e.detail}
            for e in calls.audit(call_id, viewer)
        ]
    typer.echo(json.dumps(data, indent=None if as_json else 2))


@contextmanager
def _services() -> Iterator[Services]:
    services = Services()
    try:
        yield services
    finally:
        services.close()


def _registry() -> Any:
    from tools.builtin import builtin_registry
    from tools.sandbox import Sandbox

    return builtin_registry(Sandbox())


def _tool_calls(services: Services) -> Any:
    from assistant.documents import DocumentLibrary
    from assistant.tool_calls import ToolCalls

    return ToolCalls(
        services.sessions,
        _registry(),
        timezone=services.settings.timezone,
        search_for=DocumentLibrary(services).search_for,
    )


def _user(services: Services, email: str | None) -> Any:
    from sqlalchemy import select

    from assistant.storage.models import User
    from assistant.storage.users import local_operator

    with transaction(services.sessions) as session:
        if email is None:
            user = local_operator(session)
            session.expunge(user)
            return user
        user = session.scalar(select(User).where(User.email == email.strip().lower()))
        if user is None or not user.is_active:
            raise fail(
                f"no active user with email {email}; create one with 'assistant users create'"
            )
        session.expunge(user)
        return user


def _parse_arguments(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"--args is not valid JSON ({exc.msg}); example: --args '{{\"k\": 3}}'") from exc
    if not isinstance(value, dict):
        raise fail('--args must be a JSON object, e.g. --args \'{"expression": "2 + 2"}\'')
    return value


def _report(view: Any, as_json: bool, email: str | None) -> None:
    if as_json:
        typer.echo(json.dumps({k: view.to_dict()[k] for k in ("id", "status", "result", "error")}))
    elif view.status == "done":
        typer.echo(json.dumps(view.result, indent=2))
    elif view.status == "pending_approval":
        typer.echo(
            f"call {view.id} ({view.tool_name}) is waiting for approval: "
            f"assistant tools approve {view.id}" + (f" --user {email}" if email else "")
        )
    elif view.status == "rejected":
        typer.echo(f"call {view.id} ({view.tool_name}) was rejected and will not run")
    if view.status == "failed":
        error = view.error["error"]
        print(f"error: {error['message']}", file=sys.stderr)
        raise typer.Exit(1 if error["code"] == _CRASHED else EXIT_BAD_INPUT)


@contextmanager
def _progress(tool_name: str) -> Iterator[None]:
    """An elapsed-time line on stderr while a sandboxed call runs (only on a terminal)."""
    if tool_name != "run_python":
        yield
        return
    from tqdm import tqdm

    bar = tqdm(
        desc="running in the sandbox",
        bar_format="{desc}: {elapsed}",
        file=sys.stderr,
        disable=not sys.stderr.isatty(),
    )
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(0.5):
            bar.refresh()

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        bar.close()
