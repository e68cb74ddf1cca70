from __future__ import annotations

import threading

import pytest
from sqlalchemy import Engine, func, select

from assistant.errors import AssistantError, Conflict, NotFound
from assistant.storage.conversations import (
    add_message,
    create_conversation,
    delete_conversation,
    list_conversations,
    list_messages,
)
from assistant.storage.database import make_session_factory, transaction
from assistant.storage.models import Message
from assistant.storage.users import (
    authenticate,
    create_api_key,
    create_user,
    user_for_api_key,
)


@pytest.fixture
def sessions(db_engine: Engine):
    return make_session_factory(db_engine)


def _user(sessions, email: str, **kw):
    with transaction(sessions) as s:
        return create_user(s, email, "correct horse", **kw)


def test_users_passwords_and_groups(sessions) -> None:
    user = _user(sessions, "Ana@Example.com", role="admin", groups=["hr", "finance"])
    with transaction(sessions) as s:
        assert authenticate(s, "ana@example.com", "correct horse").id == user.id
        assert authenticate(s, "ana@example.com", "wrong password") is None
        assert authenticate(s, "nobody@example.com", "correct horse") is None
        again = authenticate(s, "ANA@example.com", "correct horse")
        assert again.group_names == ["finance", "hr"] and again.role == "admin"
        assert again.password_hash.startswith("$argon2")


@pytest.mark.parametrize(
    ("email", "password", "role", "code"),
    [
        ("not-an-email", "correct horse", "member", "invalid_email"),
        ("a@b.co", "short", "member", "weak_password"),
        ("a@b.co", "correct horse", "owner", "invalid_role"),
    ],
)
def test_bad_user_input_is_rejected_clearly(sessions, email, password, role, code) -> None:
    with pytest.raises(AssistantError) as err, transaction(sessions) as s:
        create_user(s, email, password, role)
    assert err.value.code == code


def test_duplicate_email_is_a_conflict_and_keeps_the_first(sessions) -> None:
    first = _user(sessions, "dup@example.com")
    with pytest.raises(Conflict), transaction(sessions) as s:
        create_user(s, "DUP@example.com", "another password")
    with transaction(sessions) as s:
        assert authenticate(s, "dup@example.com", "correct horse").id == first.id


def test_api_keys_store_only_a_hash(sessions) -> None:
    user = _user(sessions, "key@example.com")
    with transaction(sessions) as s:
        key = create_api_key(s, user, "laptop")
    with transaction(sessions) as s:
        assert user_for_api_key(s, key).id == user.id
        assert user_for_api_key(s, key + "x") is None
        from assistant.storage.models import ApiKey

        stored = s.scalars(select(ApiKey)).one()
        assert key not in (stored.key_hash, stored.prefix) and len(stored.key_hash) == 64


def test_concurrent_writers_to_one_conversation_lose_no_message(sessions) -> None:
    user = _user(sessions, "busy@example.com")
    with transaction(sessions) as s:
        conversation_id = create_conversation(s, user).id
    writers, per_writer = 8, 15
    errors: list[BaseException] = []

    def write(writer: int) -> None:
        try:
            for i in range(per_writer):
                with transaction(sessions) as s:
                    add_message(s, user, conversation_id, "user", f"w{writer}-m{i}")
        except BaseException as exc:  # noqa: BLE001  (reported below)
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(w,)) for w in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with transaction(sessions) as s:
        contents = [m.content for m in list_messages(s, user, conversation_id)]
    expected = {f"w{w}-m{i}" for w in range(writers) for i in range(per_writer)}
    assert len(contents) == writers * per_writer and set(contents) == expected
    # Each writer's own messages keep their order.
    for w in range(writers):
        mine = [c for c in contents if c.startswith(f"w{w}-")]
        assert mine == [f"w{w}-m{i}" for i in range(per_writer)]


def test_deleting_a_conversation_never_touches_another_users(sessions) -> None:
    alice, bob = _user(sessions, "alice@example.com"), _user(sessions, "bob@example.com")
    with transaction(sessions) as s:
        a = create_conversation(s, alice, "alice's")
        b = create_conversation(s, bob, "bob's")
        add_message(s, alice, a.id, "user", "hello from alice")
        add_message(s, bob, b.id, "user", "hello from bob")
    with pytest.raises(NotFound), transaction(sessions) as s:
        delete_conversation(s, alice, b.id)  # not hers: looks absent
    with transaction(sessions) as s:
        delete_conversation(s, alice, a.id)
    with transaction(sessions) as s:
        assert list_conversations(s, alice) == []
        assert [c.id for c in list_conversations(s, bob)] == [b.id]
        assert [m.content for m in list_messages(s, bob, b.id)] == ["hello from bob"]
        assert s.scalar(select(func.count()).select_from(Message)) == 2
        with pytest.raises(NotFound):
            list_messages(s, alice, a.id)


def test_a_user_cannot_write_into_someone_elses_conversation(sessions) -> None:
    alice, mallory = _user(sessions, "a2@example.com"), _user(sessions, "m@example.com")
    with transaction(sessions) as s:
        conv = create_conversation(s, alice)
    with pytest.raises(NotFound), transaction(sessions) as s:
        add_message(s, mallory, conv.id, "user", "injected")
    with transaction(sessions) as s:
        assert list_messages(s, alice, conv.id) == []


def test_a_failed_turn_leaves_the_conversation_as_it_was(sessions) -> None:
    user = _user(sessions, "turn@example.com")
    with transaction(sessions) as s:
        conv = create_conversation(s, user)
        add_message(s, user, conv.id, "user", "first")
    with pytest.raises(RuntimeError), transaction(sessions) as s:
        add_message(s, user, conv.id, "user", "second")
        raise RuntimeError("model crashed mid-turn")
    with transaction(sessions) as s:
        assert [m.content for m in list_messages(s, user, conv.id)] == ["first"]


def test_regenerated_message_branches_from_its_parent(sessions) -> None:
    user = _user(sessions, "branch@example.com")
    with transaction(sessions) as s:
        conv = create_conversation(s, user)
        q = add_message(s, user, conv.id, "user", "question")
        a1 = add_message(s, user, conv.id, "assistant", "answer 1", parent_id=q.id)
        a2 = add_message(
            s,
            user,
            conv.id,
            "assistant",
            "answer 2",
            parent_id=q.id,
            prompt_tokens=10,
            completion_tokens=3,
            model="smollm2",
            timings={"ttft_s": 0.1},
        )
    with transaction(sessions) as s:
        msgs = list_messages(s, user, conv.id)
    assert [m.parent_id for m in msgs] == [None, q.id, q.id]
    assert msgs[2].id == a2.id != a1.id and msgs[2].timings == {"ttft_s": 0.1}
