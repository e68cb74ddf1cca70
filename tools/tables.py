"""Tables owned by tools/: what the side-effecting built-in tools write.

`user_id` refers to assistant's users table; tools/ never imports assistant/, so the
link is a plain indexed column rather than a foreign key.
"""

from __future__ import annotations

from datetime import UTC, date, datetime

from sqlalchemy import Date, Enum, MetaData, String, Text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

LEAVE_TYPES = ("annual", "sick", "parental", "unpaid")
TICKET_CATEGORIES = ("hardware", "software", "access", "security", "other")
TICKET_PRIORITIES = ("low", "medium", "high", "urgent")


def _utcnow() -> datetime:
    return datetime.now(UTC).replace(tzinfo=None)


class ToolsBase(DeclarativeBase):
    metadata = MetaData(
        naming_convention={
            "ix": "ix_%(column_0_label)s",
            "uq": "uq_%(table_name)s_%(column_0_name)s",
            "ck": "ck_%(table_name)s_%(constraint_name)s",
            "pk": "pk_%(table_name)s",
        }
    )


def _enum(values: tuple[str, ...], name: str) -> Enum:
    return Enum(*values, name=name, native_enum=False, create_constraint=True, length=16)


class LeaveRequest(ToolsBase):
    __tablename__ = "leave_requests"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(index=True)
    start_date: Mapped[date] = mapped_column(Date)
    end_date: Mapped[date] = mapped_column(Date)
    leave_type: Mapped[str] = mapped_column(_enum(LEAVE_TYPES, "leave_type"))
    note: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(16), default="submitted")
    created_at: Mapped[datetime] = mapped_column(default=_utcnow)


class ItTicket(ToolsBase):
    __tablename__ = "it_tickets"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(index=True)
    summary: Mapped[str] = mapped_column(String(500))
    category: Mapped[str] = mapped_column(_enum(TICKET_CATEGORIES, "ticket_category"))
    priority: Mapped[str] = mapped_column(_enum(TICKET_PRIORITIES, "ticket_priority"))
    status: Mapped[str] = mapped_column(String(16), default="open")
    created_at: Mapped[datetime] = mapped_column(default=_utcnow)

    @property
    def number(self) -> str:
        return f"IT-{self.id:06d}"
