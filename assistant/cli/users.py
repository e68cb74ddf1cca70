"""`assistant users create|list`."""

from __future__ import annotations

import json

import typer

from assistant.services import Services
from assistant.storage.database import transaction
from assistant.storage.users import create_user, list_users

app = typer.Typer(help="Manage user accounts.", no_args_is_help=True)


@app.command()
def create(
    email: str = typer.Option(..., "--email", help="Login email."),
    password: str = typer.Option(..., "--password", help="At least 8 characters."),
    role: str = typer.Option("member", "--role", help="admin or member."),
    groups: str = typer.Option("", "--groups", help="Comma-separated group names."),
) -> None:
    """Create a user."""
    names = [g for g in (s.strip() for s in groups.split(",")) if g]
    services = Services()
    with transaction(services.sessions) as session:
        user = create_user(session, email, password, role, names)
        typer.echo(f"created user {user.id} {user.email} ({user.role})")


@app.command("list")
def list_(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """List users."""
    services = Services()
    with transaction(services.sessions) as session:
        rows = [
            {"id": u.id, "email": u.email, "role": u.role, "groups": u.group_names}
            for u in list_users(session)
        ]
    if as_json:
        typer.echo(json.dumps(rows))
        return
    for row in rows:
        typer.echo(f"{row['id']:>4}  {row['email']:<40} {row['role']:<7} {','.join(row['groups'])}")
