"""The approval flow against real SQLite and PostgreSQL, and the `assistant tools` CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from datetime import date, timedelta
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import Engine, func, select

from assistant.cli.main import main
from assistant.errors import Conflict, Forbidden, NotFound
from assistant.storage.database import make_session_factory, transaction
from assistant.storage.models import ToolCall, User
from assistant.tool_calls import ToolCalls
from tools.builtin import builtin_registry
from tools.context import ToolContext
from tools.errors import ToolFailure
from tools.registry import Tool, ToolRegistry
from tools.sandbox import Sandbox, SandboxConfig, SandboxLimits
from tools.tables import ItTicket, LeaveRequest

TICKET = {"summary": "Laptop will not boot", "category": "hardware", "priority": "high"}


@pytest.fixture(scope="module")
def registry() -> ToolRegistry:
    limits = SandboxLimits(wall_seconds=5.0, cpu_seconds=3)
    return builtin_registry(Sandbox(SandboxConfig(limits=limits)))


@pytest.fixture
def people(db_engine: Engine) -> dict[str, User]:
    # "!" is no argon2 hash, so these accounts cannot sign in; hashing would only cost time.
    with transaction(make_session_factory(db_engine)) as session:
        users = {
            role: User(email=f"{role}@example.com", password_hash="!", role=kind, groups=[])
            for role, kind in (("admin", "admin"), ("owner", "member"), ("other", "member"))
        }
        session.add_all(users.values())
    return users


@pytest.fixture
def calls(db_engine: Engine, registry: ToolRegistry) -> ToolCalls:
    return ToolCalls(make_session_factory(db_engine), registry, timezone="Europe/Berlin")


def _count(calls: ToolCalls, table: type) -> int:
    with transaction(calls.sessions) as session:
        return session.scalar(select(func.count()).select_from(table))


def _events(calls: ToolCalls, call_id: int, user: User) -> list[tuple[str, int | None]]:
    return [(e.event, e.actor_id) for e in calls.audit(call_id, user)]


def test_a_call_without_side_effects_runs_at_once(calls: ToolCalls, people) -> None:
    owner = people["owner"]
    view = calls.propose(owner, "calculator", {"expression": "17.5% of 2340"})
    assert (view.status, view.result, view.error) == (
        "done",
        {"expression": "17.5% of 2340", "result": "409.5"},
        None,
    )
    assert _events(calls, view.id, owner) == [
        ("requested", owner.id),
        ("started", owner.id),
        ("done", owner.id),
    ]


def test_side_effects_wait_for_the_owner_or_an_admin_and_run_once(calls: ToolCalls, people) -> None:
    owner, other, admin = people["owner"], people["other"], people["admin"]
    first = calls.propose(owner, "create_it_ticket", TICKET)
    assert (first.status, first.result, first.arguments) == ("pending_approval", None, TICKET)
    for act in (calls.approve, calls.reject, calls.get, calls.audit):
        with pytest.raises(Forbidden):
            act(first.id, other)
    assert calls.get(first.id, owner).status == "pending_approval"
    assert _count(calls, ItTicket) == 0

    done = calls.approve(first.id, owner)
    assert done.status == "done" and done.result["ticket"] == "IT-000001"
    assert done.approved_by_id == owner.id
    with pytest.raises(Conflict, match="only once"):
        calls.approve(first.id, admin)
    events = calls.audit(first.id, owner)
    assert [(e.event, e.actor_id) for e in events] == [
        ("requested", owner.id),
        ("approved", owner.id),
        ("started", owner.id),
        ("done", owner.id),
    ]
    assert [e.at for e in events] == sorted(e.at for e in events)

    second = calls.propose(owner, "create_it_ticket", TICKET)
    by_admin = calls.approve(second.id, admin)
    assert by_admin.status == "done" and by_admin.approved_by_id == admin.id
    with transaction(calls.sessions) as session:
        tickets = session.scalars(select(ItTicket).order_by(ItTicket.id)).all()
    assert [(t.user_id, t.summary) for t in tickets] == [(owner.id, TICKET["summary"])] * 2
    with pytest.raises(NotFound):
        calls.approve(999, admin)


def test_concurrent_approvals_run_once(calls: ToolCalls, people) -> None:
    owner, admin = people["owner"], people["admin"]
    view = calls.propose(owner, "create_it_ticket", TICKET)
    start = threading.Barrier(4)
    outcomes: list[str] = []

    def approve(user: User) -> None:
        start.wait()
        try:
            outcomes.append(calls.approve(view.id, user).status)
        except Conflict:
            outcomes.append("conflict")

    threads = [threading.Thread(target=approve, args=(u,)) for u in (owner, admin) * 2]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(outcomes) == ["conflict", "conflict", "conflict", "done"]
    assert _count(calls, ItTicket) == 1
    events = [event for event, _ in _events(calls, view.id, owner)]
    assert events.count("approved") == 1 and events.count("done") == 1


def test_rejected_and_invalid_calls_never_run(calls: ToolCalls, people) -> None:
    owner, admin = people["owner"], people["admin"]
    view = calls.propose(owner, "create_it_ticket", TICKET)
    rejected = calls.reject(view.id, admin, "duplicate of IT-000041")
    assert rejected.status == "rejected"
    for user in (owner, admin):
        with pytest.raises(Conflict):
            calls.approve(view.id, user)
    assert calls.get(view.id, owner).result is None
    events = calls.audit(view.id, owner)
    assert [(e.event, e.actor_id) for e in events] == [
        ("requested", owner.id),
        ("rejected", admin.id),
    ]
    assert events[1].detail == {"reason": "duplicate of IT-000041"}

    invalid = calls.propose(owner, "create_it_ticket", {**TICKET, "category": "furniture"})
    assert invalid.status == "failed"
    assert invalid.error["error"]["code"] == "invalid_arguments"
    assert invalid.error["error"]["details"][0]["field"] == "category"
    assert _events(calls, invalid.id, owner) == [("requested", owner.id), ("failed", owner.id)]
    with pytest.raises(Conflict):
        calls.approve(invalid.id, owner)

    orphan = calls.propose(owner, "create_it_ticket", TICKET)
    with transaction(calls.sessions) as session:
        session.get(User, owner.id).is_active = False
    with pytest.raises(Conflict, match="deactivated"):
        calls.approve(orphan.id, admin)
    assert calls.get(orphan.id, admin).status == "pending_approval"
    assert _count(calls, ItTicket) == 0


def test_leave_request_and_code_run_for_the_owner(calls: ToolCalls, people) -> None:
    owner = people["owner"]
    start = date.today() + timedelta(days=20)
    arguments = {
        "start_date": start.isoformat(),
        "end_date": (start + timedelta(days=2)).isoformat(),
        "leave_type": "annual",
    }
    view = calls.propose(owner, "submit_leave_request", arguments)
    assert view.arguments == {**arguments, "note": ""}  # validated, defaults filled in
    assert calls.approve(view.id, people["admin"]).result["days"] == 3
    with transaction(calls.sessions) as session:
        assert session.scalars(select(LeaveRequest.user_id)).all() == [owner.id]

    code = calls.propose(owner, "run_python", {"code": "import os\nprint(os.getuid())"})
    assert code.status == "pending_approval"
    done = calls.approve(code.id, owner)
    assert done.result == {"stdout": "65534\n", "stderr": "", "exit_code": 0, "limit_hit": None}


class _TicketArgs(BaseModel):
    summary: str


def _file_then_fail(args: _TicketArgs, context: ToolContext) -> None:
    context.require_session().add(
        ItTicket(user_id=context.user_id, summary=args.summary, category="other", priority="low")
    )
    context.require_session().flush()
    raise ToolFailure("queue_closed", "The IT queue is closed for maintenance.")


def _crash(args: _TicketArgs, context: ToolContext) -> Any:
    raise RuntimeError("disk on fire")


def test_failures_roll_back_the_tools_writes_and_roles_are_enforced(
    db_engine: Engine, people
) -> None:
    registry = ToolRegistry(
        [
            Tool("file_then_fail", "", _TicketArgs, True, _file_then_fail),
            Tool("crash", "", _TicketArgs, True, _crash),
            Tool("purge", "", _TicketArgs, False, lambda a, c: "purged", requires_role="admin"),
        ]
    )
    calls = ToolCalls(make_session_factory(db_engine), registry)
    owner = people["owner"]
    for name, code in (("file_then_fail", "queue_closed"), ("crash", "tool_crashed")):
        view = calls.propose(owner, name, {"summary": "printer"})
        failed = calls.approve(view.id, owner)
        assert failed.status == "failed" and failed.error["error"]["code"] == code
        assert [e for e, _ in _events(calls, view.id, owner)][-1] == "failed"
    assert _count(calls, ItTicket) == 0
    refused = calls.propose(owner, "purge", {"summary": "x"})
    assert refused.status == "failed" and refused.error["error"]["code"] == "forbidden"
    assert calls.propose(people["admin"], "purge", {"summary": "x"}).result == "purged"
    with transaction(calls.sessions) as session:
        statuses = session.scalars(select(ToolCall.status).order_by(ToolCall.id)).all()
    assert statuses == ["failed", "failed", "failed", "done"]


@pytest.fixture(scope="module")
def cli_data_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated data dir with an admin and a member, shared by the CLI tests."""
    data_dir = tmp_path_factory.mktemp("cli")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ASSISTANT_DATA_DIR", str(data_dir))
        patch.delenv("ASSISTANT_DATABASE_URL", raising=False)
        assert main(["db", "upgrade"]) == 0
        for email, role in (("it@example.com", "admin"), ("ann@example.com", "member")):
            assert main(["users", "create", "--email", email, "--password", "long enough",
                         "--role", role]) == 0  # fmt: skip
    return data_dir


@pytest.fixture
def cli(cli_data_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture):
    """Runs `assistant ...` in this process: returns (exit code, stdout, stderr)."""
    monkeypatch.setenv("ASSISTANT_DATA_DIR", str(cli_data_dir))
    monkeypatch.delenv("ASSISTANT_DATABASE_URL", raising=False)
    capsys.readouterr()

    def run(*args: str) -> tuple[int, str, str]:
        code = main(list(args))
        out, err = capsys.readouterr()
        return code, out, err

    return run


ANN = ("--user", "ann@example.com", "--json")


def test_cli_run_approve_reject(cli, cli_data_dir: Path) -> None:
    # Once through the real entry point; the rest in this process to save start-up time.
    env = {**os.environ, "ASSISTANT_DATA_DIR": str(cli_data_dir)}
    env.pop("ASSISTANT_DATABASE_URL", None)
    calc = subprocess.run(
        [sys.executable, "-m", "assistant.cli.main", "tools", "run", "calculator",
         "--args", '{"expression": "2**10"}', *ANN],
        capture_output=True, text=True, env=env, timeout=120,
    )  # fmt: skip
    assert calc.returncode == 0, calc.stderr
    calc_id = json.loads(calc.stdout).pop("id")
    assert json.loads(calc.stdout) == {
        "id": calc_id,
        "status": "done",
        "result": {"expression": "2**10", "result": "1024"},
        "error": None,
    }
    code, out, _ = cli("tools", "run", "create_it_ticket", "--args", json.dumps(TICKET), *ANN)
    pending = json.loads(out)
    assert (code, pending["status"], pending["result"]) == (0, "pending_approval", None)
    code, out, _ = cli("tools", "approve", str(pending["id"]), "--user", "it@example.com", "--json")
    assert code == 0 and json.loads(out)["result"]["ticket"].startswith("IT-")
    code, _, err = cli("tools", "approve", str(pending["id"]), *ANN)
    assert code == 2 and err.startswith(f"error: Tool call {pending['id']} is done")

    code, out, _ = cli("tools", "run", "create_it_ticket", "--args", json.dumps(TICKET), *ANN)
    third = json.loads(out)["id"]
    code, out, _ = cli("tools", "reject", str(third), *ANN)
    assert json.loads(out) == {"id": third, "status": "rejected", "result": None, "error": None}

    args = json.dumps({"code": "print(sum(range(5)))"})
    code, out, _ = cli("tools", "run", "run_python", "--args", args, "--yes", *ANN)
    assert json.loads(out)["result"] == {
        "stdout": "10\n",
        "stderr": "",
        "exit_code": 0,
        "limit_hit": None,
    }
    code, out, _ = cli("tools", "show", str(third), *ANN)
    assert [e["event"] for e in json.loads(out)["audit"]] == ["requested", "rejected"]
    code, out, _ = cli("tools", "list", "--json")
    assert [t["name"] for t in json.loads(out) if t["side_effects"]] == [
        "submit_leave_request",
        "create_it_ticket",
        "run_python",
    ]


@pytest.mark.parametrize(
    "args",
    [
        ("tools", "run", "calculator", "--args", "{not json", "--user", "ann@example.com"),
        ("tools", "run", "calculator", "--args", "[1]", "--user", "ann@example.com"),
        ("tools", "run", "calculator", "--args", '{"expression": "1/0"}', *ANN),
        ("tools", "run", "calculator", "--args", '{"expr": "1"}', *ANN),
        ("tools", "run", "teleport", "--user", "ann@example.com"),
        ("tools", "run", "calculator", "--args", '{"expression": "1"}', "--user", "nobody@x.org"),
        ("tools", "approve", "424242", "--user", "ann@example.com"),
        ("tools", "approve", "abc", "--user", "ann@example.com"),
    ],
)  # fmt: skip
def test_cli_bad_input_is_one_line_and_exit_code_2(cli, args: tuple[str, ...]) -> None:
    code, _, err = cli(*args)
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err


def test_cli_without_user_acts_as_the_local_operator(cli) -> None:
    code, out, _ = cli("tools", "run", "calculator", "--args", '{"expression": "2 + 2"}', "--json")
    assert (code, json.loads(out)["result"]["result"]) == (0, "4")
    code, out, _ = cli("tools", "run", "create_it_ticket", "--args", json.dumps(TICKET), "--json")
    pending = json.loads(out)
    assert (code, pending["status"]) == (0, "pending_approval")
    code, out, _ = cli("tools", "approve", str(pending["id"]), "--json")
    assert code == 0 and json.loads(out)["status"] == "done"
    code, out, _ = cli("users", "list", "--json")
    operators = [u for u in json.loads(out) if u["email"] == "operator@assistant.local"]
    assert [u["role"] for u in operators] == ["admin"]
