"""Users, groups and API keys. Passwords are argon2 hashes; keys are stored as SHA-256."""

from __future__ import annotations

import hashlib
import re
import secrets

from argon2 import PasswordHasher
from argon2.exceptions import VerificationError
from sqlalchemy import select
from sqlalchemy.orm import Session

from assistant.errors import AssistantError, Conflict
from assistant.storage.base import utcnow
from assistant.storage.models import ROLES, ApiKey, Group, User

_hasher = PasswordHasher()
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_GROUP = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
KEY_PREFIX = "ak_"
# The account CLI commands act as when no --user is given. Its password is random and
# never shown, so it cannot sign in to the web app.
LOCAL_OPERATOR_EMAIL = "operator@assistant.local"


def create_user(
    session: Session, email: str, password: str, role: str = "member", groups: list[str] = ()
) -> User:
    email = email.strip().lower()
    if not _EMAIL.match(email):
        raise AssistantError("invalid_email", f"'{email}' is not an email address.")
    if len(password) < 8:
        raise AssistantError("weak_password", "The password needs at least 8 characters.")
    if role not in ROLES:
        raise AssistantError("invalid_role", f"Role must be one of {', '.join(ROLES)}.")
    if session.scalar(select(User).where(User.email == email)):
        raise Conflict("user_exists", f"A user with email {email} already exists.")
    user = User(email=email, password_hash=_hasher.hash(password), role=role)
    user.groups = [_group(session, name) for name in groups]
    session.add(user)
    session.flush()
    return user


def _group(session: Session, name: str) -> Group:
    name = name.strip()
    if not _GROUP.match(name):
        raise AssistantError(
            "invalid_group", f"Group '{name}' may only use letters, digits, '_', '.', '-'."
        )
    group = session.scalar(select(Group).where(Group.name == name))
    if group is None:
        group = Group(name=name)
        session.add(group)
    return group


def local_operator(session: Session) -> User:
    """The local command-line operator (an admin), created on first use."""
    user = session.scalar(select(User).where(User.email == LOCAL_OPERATOR_EMAIL))
    if user is None:
        password = secrets.token_urlsafe(32)
        user = User(
            email=LOCAL_OPERATOR_EMAIL,
            password_hash=_hasher.hash(password),
            role="admin",
            groups=[],
        )
        session.add(user)
        session.flush()
    return user


def list_users(session: Session) -> list[User]:
    return list(session.scalars(select(User).order_by(User.id)))


def authenticate(session: Session, email: str, password: str) -> User | None:
    user = session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None or not user.is_active:
        _hasher.hash(password)  # same cost whether or not the user exists
        return None
    try:
        _hasher.verify(user.password_hash, password)
    except VerificationError:
        return None
    return user


def create_api_key(session: Session, user: User, name: str) -> str:
    """Returns the key once; only its hash is kept."""
    key = KEY_PREFIX + secrets.token_urlsafe(32)
    session.add(ApiKey(user_id=user.id, name=name, prefix=key[:10], key_hash=_sha256(key)))
    session.flush()
    return key


def user_for_api_key(session: Session, key: str) -> User | None:
    row = session.scalar(select(ApiKey).where(ApiKey.key_hash == _sha256(key)))
    if row is None or row.revoked_at is not None:
        return None
    row.last_used_at = utcnow()
    user = session.get(User, row.user_id)
    return user if user is not None and user.is_active else None


def _sha256(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()
