"""Conversations and their messages, always scoped to the owner."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from assistant.errors import AssistantError, NotFound
from assistant.storage.base import utcnow
from assistant.storage.models import MESSAGE_ROLES, Conversation, Message, User


def create_conversation(
    session: Session, owner: User, title: str = "New conversation"
) -> Conversation:
    conversation = Conversation(owner_id=owner.id, title=title[:200])
    session.add(conversation)
    session.flush()
    return conversation


def get_conversation(session: Session, owner: User, conversation_id: int) -> Conversation:
    """The owner's live conversation, or NotFound (also for someone else's: no probing)."""
    conversation = session.scalar(
        select(Conversation).where(
            Conversation.id == conversation_id,
            Conversation.owner_id == owner.id,
            Conversation.deleted_at.is_(None),
        )
    )
    if conversation is None:
        raise NotFound("conversation_not_found", f"Conversation {conversation_id} does not exist.")
    return conversation


def list_conversations(session: Session, owner: User) -> list[Conversation]:
    return list(
        session.scalars(
            select(Conversation)
            .where(Conversation.owner_id == owner.id, Conversation.deleted_at.is_(None))
            .order_by(Conversation.updated_at.desc(), Conversation.id.desc())
        )
    )


def add_message(
    session: Session,
    owner: User,
    conversation_id: int,
    role: str,
    content: str,
    parent_id: int | None = None,
    **fields: Any,
) -> Message:
    if role not in MESSAGE_ROLES:
        raise AssistantError("invalid_role", f"Message role must be one of {MESSAGE_ROLES}.")
    get_conversation(session, owner, conversation_id)
    message = Message(
        conversation_id=conversation_id, role=role, content=content, parent_id=parent_id, **fields
    )
    session.add(message)
    # An UPDATE rather than read-modify-write, so concurrent writers don't clobber each other.
    session.execute(
        update(Conversation).where(Conversation.id == conversation_id).values(updated_at=utcnow())
    )
    session.flush()
    return message


def list_messages(session: Session, owner: User, conversation_id: int) -> list[Message]:
    get_conversation(session, owner, conversation_id)
    return list(
        session.scalars(
            select(Message).where(Message.conversation_id == conversation_id).order_by(Message.id)
        )
    )


def delete_conversation(session: Session, owner: User, conversation_id: int) -> None:
    """Soft delete: hidden from the owner at once, kept for audit."""
    conversation = get_conversation(session, owner, conversation_id)
    conversation.deleted_at = utcnow()
