"""Every package's tables, collected for Alembic. The one place that sees them all."""

from __future__ import annotations

from sqlalchemy import MetaData

import assistant.storage.models  # noqa: F401  (registers the tables)
import tools.tables  # noqa: F401
from assistant.storage.base import Base
from tools.tables import ToolsBase

ALL_METADATA: list[MetaData] = [Base.metadata, ToolsBase.metadata]
