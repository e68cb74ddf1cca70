"""Session-wide fixtures: databases (SQLite and a scratch PostgreSQL schema)."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from assistant.storage import migrate
from assistant.storage.database import make_engine

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

POSTGRES_URL = os.environ.get(
    "ASSISTANT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)


def _postgres_scratch_engine() -> tuple[Engine, Engine, str]:
    """An engine whose search_path is a fresh schema, plus the admin engine to drop it."""
    admin = make_engine(POSTGRES_URL)
    schema = f"t_{uuid.uuid4().hex[:12]}"
    with admin.begin() as conn:
        conn.execute(text(f'CREATE SCHEMA "{schema}"'))
    engine = make_engine(POSTGRES_URL, connect_args={"options": f"-csearch_path={schema}"})
    return engine, admin, schema


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_engine(request: pytest.FixtureRequest, tmp_path) -> Iterator[Engine]:
    """An engine on an empty database: a new SQLite file, or a new PostgreSQL schema."""
    if request.param == "sqlite":
        engine = make_engine(f"sqlite:///{tmp_path / 'test.db'}")
        yield engine
        engine.dispose()
        return
    engine, admin, schema = _postgres_scratch_engine()
    yield engine
    engine.dispose()
    with admin.begin() as conn:
        conn.execute(text(f'DROP SCHEMA "{schema}" CASCADE'))
    admin.dispose()


@pytest.fixture
def db_engine(empty_engine: Engine) -> Engine:
    """An engine on a database migrated to head."""
    with empty_engine.begin() as conn:
        migrate.upgrade(str(empty_engine.url), connection=conn)
    return empty_engine
