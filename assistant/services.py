"""The long-lived objects one process needs, built once from Settings."""

from __future__ import annotations

from functools import cached_property

from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from assistant.settings import Settings
from assistant.storage.database import make_engine, make_session_factory


class Services:
    def __init__(self, settings: Settings | None = None) -> None:
        self.settings = settings or Settings()

    @cached_property
    def engine(self) -> Engine:
        self.settings.ensure_data_dir()
        return make_engine(self.settings.database_url)

    @cached_property
    def sessions(self) -> sessionmaker[Session]:
        return make_session_factory(self.engine)

    def close(self) -> None:
        if "engine" in self.__dict__:
            self.engine.dispose()
