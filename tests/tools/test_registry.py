from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
import xgrammar
from pydantic import BaseModel

from tools.builtin import builtin_registry
from tools.context import ToolContext
from tools.errors import ToolError
from tools.registry import Tool, ToolRegistry
from tools.sandbox import Sandbox, SandboxConfig

BUILTINS = [
    "search_documents",
    "calculator",
    "get_current_date",
    "submit_leave_request",
    "create_it_ticket",
    "run_python",
]


@pytest.fixture(scope="module")
def registry(sandbox: Sandbox) -> ToolRegistry:
    return builtin_registry(sandbox)


def test_builtin_names_and_side_effects(registry: ToolRegistry) -> None:
    assert [t.name for t in registry.enabled()] == BUILTINS
    assert {t.name for t in registry.enabled() if t.side_effects} == {
        "submit_leave_request",
        "create_it_ticket",
        "run_python",
    }


def test_call_schema_is_valid_json_schema_and_compiles_for_the_decoder(
    registry: ToolRegistry,
) -> None:
    schema = registry.call_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    xgrammar.Grammar.from_json_schema(json.dumps(schema))
    for name, call_schema in registry.json_schemas().items():
        jsonschema.Draft202012Validator.check_schema(call_schema)
        xgrammar.Grammar.from_json_schema(json.dumps(call_schema))
        assert call_schema["properties"]["name"] == {"enum": [name]}
        assert call_schema["additionalProperties"] is False
        assert "$ref" not in json.dumps(call_schema) and "$defs" not in json.dumps(call_schema)


GOOD_CALLS = [
    {"name": "search_documents", "arguments": {"query": "parental leave", "k": 3}},
    {"name": "calculator", "arguments": {"expression": "17.5% of 2340"}},
    {"name": "get_current_date", "arguments": {}},
    {
        "name": "submit_leave_request",
        "arguments": {"start_date": "2099-12-22", "end_date": "2099-12-24", "leave_type": "annual"},
    },
    {
        "name": "create_it_ticket",
        "arguments": {
            "summary": "Laptop will not boot",
            "category": "hardware",
            "priority": "high",
        },
    },
    {"name": "run_python", "arguments": {"code": "print(1)"}},
]
BAD_CALLS = [
    {"name": "calculator", "arguments": {}},
    {"name": "calculator", "arguments": {"expression": "1", "extra": 1}},
    {"name": "search_documents", "arguments": {"query": "x", "k": 0}},
    {"name": "submit_leave_request", "arguments": {"start_date": "22/12/2099"}},
    {
        "name": "create_it_ticket",
        "arguments": {"summary": "Broken", "category": "furniture", "priority": "high"},
    },
    {"name": "delete_everything", "arguments": {}},
]


def test_schema_accepts_well_formed_calls_and_refuses_malformed_ones(
    registry: ToolRegistry,
) -> None:
    validator = jsonschema.Draft202012Validator(
        registry.call_schema(), format_checker=jsonschema.FormatChecker()
    )
    for call in GOOD_CALLS:
        validator.validate(call)
        assert isinstance(registry.validate(call["name"], call["arguments"]), BaseModel)
    for call in BAD_CALLS:
        assert not validator.is_valid(call), call
        assert isinstance(registry.validate(call["name"], call["arguments"]), ToolError)


def test_prompt_lists_every_tool_with_its_arguments(registry: ToolRegistry) -> None:
    text = registry.render_for_prompt()
    for name in BUILTINS:
        assert f"- {name}(" in text
    assert "search_documents(query: string, k: integer = 5)" in text
    assert '"annual"|"sick"|"parental"|"unpaid"' in text
    assert "submit_leave_request" in text.split("approval")[0]


def _error(registry: ToolRegistry, name: str, arguments: Any, **context: Any) -> dict:
    outcome = registry.validate(name, arguments, ToolContext(user_id=1, **context))
    assert isinstance(outcome, ToolError), f"{name} accepted {arguments}"
    body = outcome.to_dict()["error"]
    assert set(body) == {"code", "message", "details"}
    return body


def _problems(body: dict) -> dict[str, str]:
    return {d["field"]: d["problem"] for d in body["details"]}


@pytest.mark.parametrize(
    ("name", "arguments", "field", "problem"),
    [
        ("search_documents", {}, "query", "required"),
        ("search_documents", {"query": ""}, "query", "at least 1 character"),
        ("search_documents", {"query": "x", "k": 50}, "k", "less than or equal to 20"),
        ("search_documents", {"query": "x", "k": "many"}, "k", "valid integer"),
        ("calculator", {"expression": "__import__('os')"}, "expression", "unknown name"),
        ("calculator", {"expression": 42}, "expression", "valid string"),
        ("calculator", {"expression": "9" * 400}, "expression", "at most 300"),
        ("get_current_date", {"tz": "UTC"}, "tz", "unknown argument"),
        (
            "submit_leave_request",
            {"start_date": "2099-12-24", "end_date": "2099-12-22", "leave_type": "annual"},
            "end_date",
            "before the start date",
        ),
        (
            "submit_leave_request",
            {"start_date": "2001-01-02", "end_date": "2001-01-03", "leave_type": "sick"},
            "start_date",
            "in the past",
        ),
        (
            "submit_leave_request",
            {"start_date": "2099-01-01", "end_date": "2099-03-01", "leave_type": "unpaid"},
            "end_date",
            "at most 30 days",
        ),
        (
            "submit_leave_request",
            {"start_date": "2099-01-01", "end_date": "2099-01-02", "leave_type": "holiday"},
            "leave_type",
            "'annual', 'sick', 'parental' or 'unpaid'",
        ),
        (
            "submit_leave_request",
            {"start_date": 1700000000, "end_date": "2099-01-02", "leave_type": "annual"},
            "start_date",
            "YYYY-MM-DD",
        ),
        (
            "submit_leave_request",
            {"start_date": "2099-02-30", "end_date": "2099-03-02", "leave_type": "annual"},
            "start_date",
            "YYYY-MM-DD",
        ),
        (
            "create_it_ticket",
            {"summary": "no", "category": "hardware", "priority": "low"},
            "summary",
            "at least 3 characters",
        ),
        (
            "create_it_ticket",
            {"summary": "Printer jam", "category": "printer", "priority": "low"},
            "category",
            "'hardware', 'software', 'access', 'security' or 'other'",
        ),
        (
            "create_it_ticket",
            {"summary": "Printer jam", "category": "hardware", "priority": "asap"},
            "priority",
            "'low', 'medium', 'high' or 'urgent'",
        ),
        ("run_python", {"code": ""}, "code", "at least 1 character"),
        ("run_python", {"code": "x" * 20_001}, "code", "at most 20000"),
        ("run_python", {"source": "print(1)"}, "source", "unknown argument"),
    ],
)
def test_validation_errors_name_the_field_and_the_problem(
    registry: ToolRegistry, name: str, arguments: dict, field: str, problem: str
) -> None:
    body = _error(registry, name, arguments)
    assert body["code"] == "invalid_arguments"
    assert problem in _problems(body)[field]
    assert name in body["message"] and field in body["message"]


def test_leave_dates_are_judged_in_the_configured_time_zone(registry: ToolRegistry) -> None:
    today_far_east = ToolContext(user_id=1, timezone="Pacific/Kiritimati").today()
    today_far_west = ToolContext(user_id=1, timezone="Pacific/Pago_Pago").today()
    assert today_far_east > today_far_west  # UTC+14 vs UTC-11: always a day or two apart
    args = {
        "start_date": today_far_west.isoformat(),
        "end_date": today_far_east.isoformat(),
        "leave_type": "annual",
    }
    west = ToolContext(user_id=1, timezone="Pacific/Pago_Pago")
    assert isinstance(registry.validate("submit_leave_request", args, west), BaseModel)
    body = _error(registry, "submit_leave_request", args, timezone="Pacific/Kiritimati")
    assert "in the past" in _problems(body)["start_date"]


def test_unknown_tool_and_non_object_arguments(registry: ToolRegistry) -> None:
    body = _error(registry, "rm_rf", {})
    assert body["code"] == "unknown_tool" and "calculator" in body["message"]
    body = _error(registry, "calculator", ["1+1"])
    assert body["code"] == "invalid_arguments" and "JSON object" in body["message"]


class _Args(BaseModel):
    pass


def test_requires_role_is_enforced() -> None:
    registry = ToolRegistry(
        [Tool("audit_log", "Admins only.", _Args, False, lambda a, c: "ok", requires_role="admin")]
    )
    member = ToolContext(user_id=2, role="member")
    admin = ToolContext(user_id=1, role="admin")
    error = registry.check_access("audit_log", member)
    assert error is not None and error.code == "forbidden" and "admin" in error.message
    assert registry.check_access("audit_log", admin) is None


def test_duplicate_names_are_refused() -> None:
    tool = Tool("twice", "", _Args, False, lambda a, c: None)
    with pytest.raises(ValueError, match="twice"):
        ToolRegistry([tool, tool])


def test_without_a_working_sandbox_run_python_is_disabled_not_unsandboxed() -> None:
    for sandbox in (None, Sandbox(SandboxConfig(bwrap="/nonexistent/bwrap"))):
        registry = builtin_registry(sandbox)
        assert "run_python" not in registry.json_schemas()
        assert "run_python" not in registry.render_for_prompt()
        body = _error(registry, "run_python", {"code": "print(1)"})
        assert body["code"] == "tool_disabled"
        assert [t.name for t in registry.enabled()] == BUILTINS[:-1]
