from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, select
from sqlalchemy.orm import Session

from tools.builtin import builtin_registry
from tools.context import ToolContext
from tools.registry import Outcome, ToolRegistry
from tools.sandbox import Sandbox
from tools.tables import ItTicket, LeaveRequest

HANDBOOK = [
    {"text": "Parental leave is 16 weeks.", "source": "handbook.md", "groups": ["everyone"]},
    {"text": "Annual leave is 25 days.", "source": "handbook.md", "groups": ["everyone"]},
    {"text": "Board pay is confidential.", "source": "board.md", "groups": ["board"]},
]


@pytest.fixture(scope="module")
def registry(sandbox: Sandbox) -> ToolRegistry:
    return builtin_registry(sandbox)


def _run(registry: ToolRegistry, name: str, arguments: dict, context: ToolContext) -> Outcome:
    args = registry.validate(name, arguments, context)
    assert isinstance(args, BaseModel), args
    return registry.execute(name, args, context)


def _search_for(groups: tuple[str, ...]):
    """A word-match search over an in-memory handbook, filtered to the caller's groups."""

    def search(query: str, k: int) -> list[dict[str, Any]]:
        words = set(query.lower().split())
        hits = [
            {"text": d["text"], "source": d["source"]}
            for d in HANDBOOK
            if set(d["groups"]) & {"everyone", *groups} and words & set(d["text"].lower().split())
        ]
        return hits[:k]

    return search


def test_search_documents_uses_the_callers_search(registry: ToolRegistry) -> None:
    member = ToolContext(user_id=1, groups=("staff",), search=_search_for(("staff",)))
    outcome = _run(registry, "search_documents", {"query": "leave pay", "k": 5}, member)
    assert [hit["text"] for hit in outcome.result["results"]] == [
        "Parental leave is 16 weeks.",
        "Annual leave is 25 days.",
    ]
    board = ToolContext(user_id=2, groups=("board",), search=_search_for(("board",)))
    outcome = _run(registry, "search_documents", {"query": "pay", "k": 1}, board)
    assert outcome.result["results"] == [
        {"text": "Board pay is confidential.", "source": "board.md"}
    ]


def test_search_documents_without_an_index_says_so(registry: ToolRegistry) -> None:
    outcome = _run(registry, "search_documents", {"query": "leave"}, ToolContext(user_id=1))
    assert outcome.error is not None and outcome.error.code == "search_unavailable"


def test_calculator_result_and_runtime_error(registry: ToolRegistry) -> None:
    context = ToolContext(user_id=1)
    outcome = _run(registry, "calculator", {"expression": "17.5% of 2340"}, context)
    assert outcome.result == {"expression": "17.5% of 2340", "result": "409.5"}
    outcome = _run(registry, "calculator", {"expression": "1 / (2 - 2)"}, context)
    assert outcome.error is not None and outcome.error.code == "calculation_error"
    assert "division by zero" in outcome.error.message


@pytest.mark.parametrize("zone", ["UTC", "Asia/Tokyo", "America/Los_Angeles"])
def test_current_date_in_the_configured_zone(registry: ToolRegistry, zone: str) -> None:
    before = datetime.now(ZoneInfo(zone)).date()
    outcome = _run(registry, "get_current_date", {}, ToolContext(user_id=1, timezone=zone))
    after = datetime.now(ZoneInfo(zone)).date()
    day = date.fromisoformat(outcome.result["date"])
    assert day in (before, after)
    assert outcome.result["weekday"] == day.strftime("%A")
    assert outcome.result["timezone"] == zone


def test_an_unknown_time_zone_is_a_clear_error(registry: ToolRegistry) -> None:
    outcome = _run(registry, "get_current_date", {}, ToolContext(user_id=1, timezone="Mars/Base"))
    assert outcome.error is not None and "Mars/Base" in outcome.error.message


def test_leave_request_is_stored_for_the_caller(registry: ToolRegistry, db_engine: Engine) -> None:
    start = date.today() + timedelta(days=10)
    arguments = {
        "start_date": start.isoformat(),
        "end_date": (start + timedelta(days=2)).isoformat(),
        "leave_type": "annual",
        "note": "family visit",
    }
    with Session(db_engine) as session, session.begin():
        outcome = _run(
            registry, "submit_leave_request", arguments, ToolContext(user_id=7, session=session)
        )
    assert outcome.result["days"] == 3 and outcome.result["status"] == "submitted"
    with Session(db_engine) as session:
        row = session.scalars(select(LeaveRequest)).one()
    assert (row.id, row.user_id, row.start_date, row.leave_type, row.note) == (
        outcome.result["request_id"],
        7,
        start,
        "annual",
        "family visit",
    )


def test_it_ticket_is_stored_and_numbered(registry: ToolRegistry, db_engine: Engine) -> None:
    numbers = []
    for summary in ("Laptop will not boot", "VPN drops every hour"):
        with Session(db_engine) as session, session.begin():
            context = ToolContext(user_id=3, session=session)
            arguments = {"summary": summary, "category": "hardware", "priority": "high"}
            numbers.append(_run(registry, "create_it_ticket", arguments, context).result["ticket"])
    assert numbers == ["IT-000001", "IT-000002"]
    with Session(db_engine) as session:
        rows = session.scalars(select(ItTicket).order_by(ItTicket.id)).all()
    assert [(r.user_id, r.summary, r.status) for r in rows] == [
        (3, "Laptop will not boot", "open"),
        (3, "VPN drops every hour", "open"),
    ]


def test_side_effect_tools_need_a_user_and_a_session(registry: ToolRegistry) -> None:
    arguments = {"summary": "Broken screen", "category": "hardware", "priority": "low"}
    outcome = _run(registry, "create_it_ticket", arguments, ToolContext(user_id=3))
    assert outcome.error is not None and outcome.error.code == "no_database"


def test_run_python_returns_the_documented_result(registry: ToolRegistry) -> None:
    outcome = _run(
        registry, "run_python", {"code": "print(17.5 / 100 * 2340)"}, ToolContext(user_id=1)
    )
    assert outcome.result == {"stdout": "409.5\n", "stderr": "", "exit_code": 0, "limit_hit": None}
