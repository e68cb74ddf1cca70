from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import Engine, inspect

from assistant.storage import migrate
from migrations.metadata import ALL_METADATA

EXPECTED_TABLES = {
    "users",
    "groups",
    "user_groups",
    "api_keys",
    "conversations",
    "messages",
    "message_citations",
    "documents",
    "tool_calls",
    "tool_call_events",
    "safety_events",
    "leave_requests",
    "it_tickets",
}


def _tables(engine: Engine) -> set[str]:
    return set(inspect(engine).get_table_names()) - {"alembic_version"}


def test_upgrade_from_empty_to_head_and_back_down(empty_engine: Engine) -> None:
    url = str(empty_engine.url)
    assert _tables(empty_engine) == set()
    with empty_engine.begin() as conn:
        migrate.upgrade(url, connection=conn)
    assert EXPECTED_TABLES <= _tables(empty_engine)
    with empty_engine.begin() as conn:
        migrate.downgrade(url, "base", connection=conn)
    assert _tables(empty_engine) == set()
    with empty_engine.begin() as conn:
        migrate.upgrade(url, connection=conn)
    assert EXPECTED_TABLES <= _tables(empty_engine)


def test_migrations_match_the_models(db_engine: Engine) -> None:
    """A table or column added to a model without a migration fails here."""
    with db_engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn), ALL_METADATA)
    assert diff == []
