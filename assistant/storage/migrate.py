"""Runs Alembic from code, against any URL (and optionally a PostgreSQL schema)."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection

import migrations

MIGRATIONS_DIR = Path(migrations.__file__).parent


def alembic_config(url: str, connection: Connection | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    config.attributes["connection"] = connection
    return config


def upgrade(url: str, revision: str = "head", **kwargs) -> None:
    command.upgrade(alembic_config(url, **kwargs), revision)


def downgrade(url: str, revision: str = "-1", **kwargs) -> None:
    command.downgrade(alembic_config(url, **kwargs), revision)


def current(url: str, **kwargs) -> str | None:
    from alembic.runtime.migration import MigrationContext

    from assistant.storage.database import make_engine

    connection = kwargs.get("connection")
    if connection is not None:
        return MigrationContext.configure(connection).get_current_revision()
    engine = make_engine(url)
    with engine.connect() as conn:
        rev = MigrationContext.configure(conn).get_current_revision()
    engine.dispose()
    return rev
