"""Tool calls as data: proposed, approved or rejected, run exactly once, audited.

A call with side effects is stored as `pending_approval` with its validated arguments and
runs only when its owner or an administrator approves it. The approval is one conditional
UPDATE (`... WHERE status = 'pending_approval'`), so of two concurrent approvals exactly
one wins and the call runs once. The tool's own writes and the stored result commit in one
transaction; a failure rolls the writes back and records the error. Every step leaves an
audit event with its actor and time.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pydantic import BaseModel
from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from assistant.errors import Conflict, Forbidden, NotFound
from assistant.storage.base import utcnow
from assistant.storage.database import transaction
from assistant.storage.models import ToolCall, ToolCallEvent, User
from tools.context import SearchFn, ToolContext
from tools.errors import ToolError
from tools.registry import Outcome, ToolRegistry

log = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class Caller:
    """Who a call runs for, read once so that running it needs no open transaction."""

    id: int
    role: str
    groups: tuple[str, ...]

    @classmethod
    def of(cls, user: User) -> Caller:
        return cls(user.id, user.role, tuple(user.group_names))


@dataclass(slots=True)
class ToolCallView:
    id: int
    tool_name: str
    arguments: dict[str, Any]
    status: str
    result: Any
    error: dict[str, Any] | None
    user_id: int | None
    approved_by_id: int | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "tool": self.tool_name,
            "arguments": self.arguments,
            "status": self.status,
            "result": self.result,
            "error": self.error,
        }


@dataclass(slots=True)
class AuditEvent:
    event: str
    actor_id: int | None
    at: datetime
    detail: dict[str, Any] | None


class ToolCalls:
    def __init__(
        self,
        sessions: sessionmaker[Session],
        registry: ToolRegistry,
        timezone: str = "UTC",
        search_for: Callable[[Caller], SearchFn] | None = None,
    ) -> None:
        """`search_for(caller) -> search function` binds the index to a caller's permissions."""
        self.sessions = sessions
        self.registry = registry
        self.timezone = timezone
        self.search_for = search_for

    def context_for(self, caller: Caller, session: Session | None) -> ToolContext:
        search: SearchFn | None = self.search_for(caller) if self.search_for else None
        return ToolContext(
            user_id=caller.id,
            role=caller.role,
            groups=caller.groups,
            timezone=self.timezone,
            session=session,
            search=search,
        )

    def propose(
        self,
        user: User,
        name: str,
        arguments: Any,
        conversation_id: int | None = None,
        message_id: int | None = None,
    ) -> ToolCallView:
        """Store the call; run it now if it has no side effects, else wait for approval."""
        caller = Caller.of(user)
        checked = self._check(caller, name, arguments)
        tool = self.registry.get(name)
        with transaction(self.sessions) as session:
            call = ToolCall(
                user_id=caller.id,
                conversation_id=conversation_id,
                message_id=message_id,
                tool_name=name,
                arguments=_stored_arguments(checked, arguments),
                status="pending_approval",
            )
            session.add(call)
            session.flush()
            _event(session, call.id, caller.id, "requested", {"tool": name})
            if isinstance(checked, ToolError):
                _finish(call, "failed", error=checked)
                _event(session, call.id, caller.id, "failed", checked.to_dict())
                return _view(call)
            if tool is not None and tool.side_effects:
                return _view(call)
            call.status, call.started_at = "running", utcnow()
            _event(session, call.id, caller.id, "started", {"approval": "not needed"})
            call_id, stored = call.id, call.arguments
        return self._run(call_id, name, stored, caller, caller.id)

    def approve(self, call_id: int, user: User) -> ToolCallView:
        with transaction(self.sessions) as session:
            call = self._decidable(session, call_id, user)
            owner = session.get(User, call.user_id) if call.user_id is not None else None
            if owner is None or not owner.is_active:
                raise Conflict(
                    "tool_call_owner_gone",
                    f"Tool call {call_id} belongs to an account that no longer exists or is "
                    "deactivated; it cannot run.",
                )
            self._claim(session, call_id, "running", approved_by_id=user.id, started_at=utcnow())
            _event(session, call_id, user.id, "approved", None)
            _event(session, call_id, user.id, "started", None)
            name, arguments, caller = call.tool_name, call.arguments, Caller.of(owner)
        return self._run(call_id, name, arguments, caller, user.id)

    def reject(self, call_id: int, user: User, reason: str = "") -> ToolCallView:
        with transaction(self.sessions) as session:
            self._decidable(session, call_id, user)
            # approved_by_id records whoever decided, for a rejection too.
            self._claim(session, call_id, "rejected", approved_by_id=user.id, finished_at=utcnow())
            _event(session, call_id, user.id, "rejected", {"reason": reason} if reason else None)
            return _view(session.get(ToolCall, call_id, populate_existing=True))

    def get(self, call_id: int, user: User) -> ToolCallView:
        with transaction(self.sessions) as session:
            return _view(self._visible(session, call_id, user))

    def audit(self, call_id: int, user: User) -> list[AuditEvent]:
        with transaction(self.sessions) as session:
            self._visible(session, call_id, user)
            rows = session.scalars(
                select(ToolCallEvent)
                .where(ToolCallEvent.tool_call_id == call_id)
                .order_by(ToolCallEvent.id)
            )
            return [AuditEvent(r.event, r.actor_id, r.at, r.detail) for r in rows]

    def _check(self, caller: Caller, name: str, arguments: Any) -> BaseModel | ToolError:
        context = self.context_for(caller, None)
        denied = self.registry.check_access(name, context)
        return denied or self.registry.validate(name, arguments, context)

    def _visible(self, session: Session, call_id: int, user: User) -> ToolCall:
        call = session.get(ToolCall, call_id)
        if call is None:
            raise NotFound("tool_call_not_found", f"Tool call {call_id} does not exist.")
        if call.user_id != user.id and user.role != "admin":
            raise Forbidden(
                "not_your_tool_call",
                f"Tool call {call_id} belongs to another user; only its owner or an "
                "administrator can see, approve or reject it.",
            )
        return call

    def _decidable(self, session: Session, call_id: int, user: User) -> ToolCall:
        call = self._visible(session, call_id, user)
        if call.status != "pending_approval":
            raise _already_decided(call_id, call.status)
        return call

    def _claim(self, session: Session, call_id: int, status: str, **values: Any) -> None:
        """Move the call out of pending_approval, or fail if someone else already did."""
        claimed = session.execute(
            update(ToolCall)
            .where(ToolCall.id == call_id, ToolCall.status == "pending_approval")
            .values(status=status, decided_at=utcnow(), **values)
            .execution_options(synchronize_session=False)
        )
        if claimed.rowcount != 1:
            now = session.scalar(select(ToolCall.status).where(ToolCall.id == call_id))
            raise _already_decided(call_id, now or "gone")

    def _run(
        self, call_id: int, name: str, arguments: dict[str, Any], owner: Caller, actor_id: int
    ) -> ToolCallView:
        """Run a claimed call, then store its result with the tool's own writes.

        The session opens its transaction on first use, so a tool that does not write
        (run_python, for seconds) holds no database lock while it runs.
        """
        try:
            with transaction(self.sessions) as session:
                outcome = self._execute(name, arguments, owner, session)
                if outcome.ok:
                    json.dumps(outcome.result)  # a result the JSON column cannot hold fails here
                    call = session.get(ToolCall, call_id)
                    _finish(call, "done", result=outcome.result)
                    _event(session, call_id, actor_id, "done", None)
                    return _view(call)
                raise _ToolFailed(outcome.error)
        except _ToolFailed as failed:
            error = failed.error
        except Exception as exc:  # a broken tool must still leave a failed, audited call
            log.exception("tool call %s crashed", call_id)
            error = ToolError("tool_crashed", f"The tool failed unexpectedly: {exc!r}")
        with transaction(self.sessions) as session:
            call = session.get(ToolCall, call_id)
            _finish(call, "failed", error=error)
            _event(session, call_id, actor_id, "failed", error.to_dict())
            return _view(call)

    def _execute(self, name: str, arguments: Any, owner: Caller, session: Session) -> Outcome:
        # Checked again at run time: the owner's role or today's date may have changed.
        context = self.context_for(owner, session)
        checked = self._check(owner, name, arguments)
        if isinstance(checked, ToolError):
            return Outcome(error=checked)
        return self.registry.execute(name, checked, context)


class _ToolFailed(Exception):
    def __init__(self, error: ToolError | None) -> None:
        super().__init__(error.message if error else "")
        self.error = error or ToolError("tool_failed", "The tool failed.")


def _already_decided(call_id: int, status: str) -> Conflict:
    return Conflict(
        "tool_call_already_decided",
        f"Tool call {call_id} is {status}, not pending approval; it can be approved or "
        "rejected only once.",
    )


def _stored_arguments(checked: BaseModel | ToolError, raw: Any) -> dict[str, Any]:
    if isinstance(checked, BaseModel):
        return checked.model_dump(mode="json")
    try:
        json.dumps(raw)
    except (TypeError, ValueError):
        raw = repr(raw)
    return raw if isinstance(raw, dict) else {"invalid": raw}


def _finish(
    call: ToolCall, status: str, result: Any = None, error: ToolError | None = None
) -> None:
    call.status = status
    call.result = result
    call.error = json.dumps(error.to_dict()) if error else None
    call.finished_at = utcnow()


def _event(
    session: Session, call_id: int, actor_id: int | None, event: str, detail: dict | None
) -> None:
    session.add(ToolCallEvent(tool_call_id=call_id, actor_id=actor_id, event=event, detail=detail))


def _view(call: ToolCall) -> ToolCallView:
    return ToolCallView(
        id=call.id,
        tool_name=call.tool_name,
        arguments=call.arguments,
        status=call.status,
        result=call.result,
        error=json.loads(call.error) if call.error else None,
        user_id=call.user_id,
        approved_by_id=call.approved_by_id,
    )
