"""Tables owned by assistant/: users, keys, conversations, messages, citations,
documents' metadata, tool calls with their audit trail, and safety events."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    JSON,
    Column,
    Enum,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column, relationship

from assistant.storage.base import Base, utcnow

ROLES = ("admin", "member")
VISIBILITIES = ("private", "group", "everyone")
DOCUMENT_STATUSES = ("queued", "indexing", "ready", "failed")
MESSAGE_ROLES = ("system", "user", "assistant", "tool")
TOOL_CALL_STATUSES = ("pending_approval", "approved", "rejected", "running", "done", "failed")
SAFETY_STAGES = ("input", "output", "document", "tool")


def _enum(values: tuple[str, ...], name: str) -> Enum:
    # A VARCHAR plus CHECK constraint: portable across SQLite and PostgreSQL.
    return Enum(*values, name=name, native_enum=False, create_constraint=True, length=24)


user_groups = Table(
    "user_groups",
    Base.metadata,
    Column("user_id", ForeignKey("users.id", ondelete="CASCADE"), primary_key=True),
    Column("group_id", ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True),
)


class Group(Base):
    __tablename__ = "groups"
    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(String(64), unique=True)


class User(Base):
    __tablename__ = "users"
    id: Mapped[int] = mapped_column(primary_key=True)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(255))
    role: Mapped[str] = mapped_column(_enum(ROLES, "user_role"), default="member")
    is_active: Mapped[bool] = mapped_column(default=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    groups: Mapped[list[Group]] = relationship(secondary=user_groups, lazy="selectin")

    @property
    def group_names(self) -> list[str]:
        return sorted(g.name for g in self.groups)


class ApiKey(Base):
    __tablename__ = "api_keys"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    name: Mapped[str] = mapped_column(String(100))
    prefix: Mapped[str] = mapped_column(String(16))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class Conversation(Base):
    __tablename__ = "conversations"
    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    title: Mapped[str] = mapped_column(String(200), default="New conversation")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    deleted_at: Mapped[datetime | None]


class Message(Base):
    __tablename__ = "messages"
    __table_args__ = (Index("ix_messages_conversation_id_id", "conversation_id", "id"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    conversation_id: Mapped[int] = mapped_column(ForeignKey("conversations.id", ondelete="CASCADE"))
    # A regenerated or edited message points at the message it branches from.
    parent_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    role: Mapped[str] = mapped_column(_enum(MESSAGE_ROLES, "message_role"))
    content: Mapped[str] = mapped_column(Text)
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    model: Mapped[str | None] = mapped_column(String(200))
    timings: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    citations: Mapped[list[Citation]] = relationship(
        cascade="all, delete-orphan", order_by="Citation.marker", lazy="selectin"
    )


class Citation(Base):
    __tablename__ = "message_citations"
    id: Mapped[int] = mapped_column(primary_key=True)
    message_id: Mapped[int] = mapped_column(
        ForeignKey("messages.id", ondelete="CASCADE"), index=True
    )
    marker: Mapped[int]  # the [n] in the answer text
    document_id: Mapped[int | None] = mapped_column(ForeignKey("documents.id", ondelete="SET NULL"))
    chunk_id: Mapped[str] = mapped_column(String(64))
    document_name: Mapped[str] = mapped_column(String(255))
    section: Mapped[str] = mapped_column(Text, default="")
    page: Mapped[int | None]
    start: Mapped[int]
    end: Mapped[int]
    quote: Mapped[str] = mapped_column(Text, default="")
    score: Mapped[float | None] = mapped_column(Float)


class Document(Base):
    __tablename__ = "documents"
    __table_args__ = (UniqueConstraint("owner_id", "collection", "filename", "version"),)
    id: Mapped[int] = mapped_column(primary_key=True)
    owner_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    filename: Mapped[str] = mapped_column(String(255))
    title: Mapped[str] = mapped_column(String(500), default="")
    collection: Mapped[str] = mapped_column(String(100), default="default")
    visibility: Mapped[str] = mapped_column(_enum(VISIBILITIES, "visibility"), default="private")
    group_name: Mapped[str | None] = mapped_column(String(64))
    status: Mapped[str] = mapped_column(
        _enum(DOCUMENT_STATUSES, "document_status"), default="queued"
    )
    error: Mapped[str | None] = mapped_column(Text)
    content_hash: Mapped[str] = mapped_column(String(64), index=True)
    version: Mapped[int] = mapped_column(Integer, default=1)
    size_bytes: Mapped[int] = mapped_column(Integer, default=0)
    chunk_count: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


class ToolCall(Base):
    __tablename__ = "tool_calls"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int | None] = mapped_column(
        ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    tool_name: Mapped[str] = mapped_column(String(100))
    arguments: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(_enum(TOOL_CALL_STATUSES, "tool_call_status"))
    result: Mapped[Any | None] = mapped_column(JSON)
    error: Mapped[str | None] = mapped_column(Text)
    approved_by_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    decided_at: Mapped[datetime | None]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]


class ToolCallEvent(Base):
    """Audit trail: one row per thing that happened to a tool call, never updated."""

    __tablename__ = "tool_call_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    tool_call_id: Mapped[int] = mapped_column(
        ForeignKey("tool_calls.id", ondelete="CASCADE"), index=True
    )
    actor_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    event: Mapped[str] = mapped_column(String(32))
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    at: Mapped[datetime] = mapped_column(default=utcnow)


class SafetyEvent(Base):
    __tablename__ = "safety_events"
    id: Mapped[int] = mapped_column(primary_key=True)
    user_id: Mapped[int | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    conversation_id: Mapped[int | None] = mapped_column(
        ForeignKey("conversations.id", ondelete="CASCADE"), index=True
    )
    message_id: Mapped[int | None] = mapped_column(ForeignKey("messages.id", ondelete="SET NULL"))
    stage: Mapped[str] = mapped_column(_enum(SAFETY_STAGES, "safety_stage"))
    decision: Mapped[str] = mapped_column(String(24))
    label: Mapped[str] = mapped_column(String(16))
    categories: Mapped[dict[str, float]] = mapped_column(JSON)
    reasons: Mapped[list[str]] = mapped_column(JSON)
    excerpt: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
