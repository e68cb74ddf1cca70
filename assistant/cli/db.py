"""`assistant db upgrade|downgrade|current`."""

from __future__ import annotations

import typer

from assistant.settings import Settings
from assistant.storage import migrate

app = typer.Typer(help="Create, upgrade or downgrade the database schema.", no_args_is_help=True)


@app.command()
def upgrade(revision: str = typer.Argument("head", help="Target revision.")) -> None:
    """Upgrade the database to REVISION (default: the latest)."""
    settings = Settings()
    settings.ensure_data_dir()
    migrate.upgrade(settings.database_url, revision)
    typer.echo(f"database at {migrate.current(settings.database_url)}")


@app.command()
def downgrade(revision: str = typer.Argument("-1", help="Target revision, or 'base'.")) -> None:
    """Downgrade the database by one revision, or to REVISION."""
    settings = Settings()
    migrate.downgrade(settings.database_url, revision)
    typer.echo(f"database at {migrate.current(settings.database_url) or 'base'}")


@app.command()
def current() -> None:
    """Print the database's current revision."""
    typer.echo(migrate.current(Settings().database_url) or "base")
