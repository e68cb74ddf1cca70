"""What a tool may use while it runs, handed in by the caller (never read from settings)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy.orm import Session

from tools.errors import ToolFailure

SearchFn = Callable[[str, int], list[dict[str, Any]]]


@dataclass(slots=True)
class ToolContext:
    """The caller and the resources bound to the caller's permissions.

    `session` is the open database session tools with tables write through; the caller
    commits it together with the call's result, so a side effect and its record agree.
    `search` is the retrieval index already filtered to what this user may read.
    """

    user_id: int | None
    role: str = "member"
    groups: tuple[str, ...] = ()
    timezone: str = "UTC"
    session: Session | None = None
    search: SearchFn | None = None

    def zone(self) -> ZoneInfo:
        try:
            return ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError) as exc:
            raise ToolFailure(
                "bad_timezone",
                f"The configured time zone '{self.timezone}' is unknown; "
                "set it to an IANA name such as 'Europe/Berlin'.",
            ) from exc

    def now(self) -> datetime:
        return datetime.now(self.zone())

    def today(self) -> date:
        return self.now().date()

    def require_session(self) -> Session:
        if self.session is None:
            raise ToolFailure("no_database", "This tool needs a database session; none was given.")
        return self.session

    def require_user(self) -> int:
        if self.user_id is None:
            raise ToolFailure("no_user", "This tool acts for a user; run it as a signed-in user.")
        return self.user_id
