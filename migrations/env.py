"""Alembic environment: runs against the URL the caller put in the config."""

from __future__ import annotations

from alembic import context
from sqlalchemy import Connection

from assistant.storage.database import make_engine
from migrations.metadata import ALL_METADATA

config = context.config


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=ALL_METADATA,
        render_as_batch=connection.dialect.name == "sqlite",  # SQLite can't ALTER much
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(config.get_main_option("sqlalchemy.url"))
    with engine.connect() as conn:
        _run(conn)
    engine.dispose()


if context.is_offline_mode():
    raise SystemExit("Offline (SQL script) migrations are not supported; run against a database.")
run_migrations_online()
