"""The built-in tools and the registry that holds them."""

from __future__ import annotations

from functools import partial
from typing import Any

from tools.arguments import (
    CalculatorArgs,
    GetCurrentDateArgs,
    ItTicketArgs,
    LeaveRequestArgs,
    RunPythonArgs,
    SearchDocumentsArgs,
)
from tools.calculator import CalculatorError, evaluate
from tools.context import ToolContext
from tools.errors import ToolFailure
from tools.records import create_it_ticket, submit_leave_request
from tools.registry import Tool, ToolRegistry
from tools.sandbox import Sandbox, SandboxUnavailable


def search_documents(args: SearchDocumentsArgs, context: ToolContext) -> dict[str, Any]:
    if context.search is None:
        raise ToolFailure(
            "search_unavailable",
            "Document search is not configured here; answer without documents, or ask an "
            "administrator to build the document index.",
        )
    return {"query": args.query, "results": context.search(args.query, args.k)}


def calculator(args: CalculatorArgs, context: ToolContext) -> dict[str, Any]:
    try:
        return {"expression": args.expression, "result": evaluate(args.expression)}
    except CalculatorError as exc:
        raise ToolFailure("calculation_error", f"Cannot calculate: {exc}.") from exc


def get_current_date(args: GetCurrentDateArgs, context: ToolContext) -> dict[str, Any]:
    now = context.now()
    return {
        "date": now.date().isoformat(),
        "weekday": now.strftime("%A"),
        "time": now.strftime("%H:%M"),
        "timezone": context.timezone,
    }


def run_python(sandbox: Sandbox, args: RunPythonArgs, context: ToolContext) -> dict[str, Any]:
    try:
        return sandbox.run_python(args.code).to_dict()
    except SandboxUnavailable as exc:
        raise ToolFailure("tool_disabled", f"run_python is disabled: {exc}") from exc


def builtin_registry(sandbox: Sandbox | None) -> ToolRegistry:
    """All built-in tools; run_python is disabled (never unsandboxed) without a sandbox."""
    if sandbox is None:
        disabled = "no sandbox is configured for running code"
    else:
        disabled = sandbox.unavailable_reason()
    return ToolRegistry(
        [
            Tool(
                "search_documents",
                "Search the company documents you may read; returns passages with sources.",
                SearchDocumentsArgs,
                side_effects=False,
                fn=search_documents,
            ),
            Tool(
                "calculator",
                "Exact arithmetic: + - * / // % ** ( ), 'x%' is x/100, '15% of 80', "
                "round/min/max/abs/sqrt.",
                CalculatorArgs,
                side_effects=False,
                fn=calculator,
            ),
            Tool(
                "get_current_date",
                "Today's date, weekday and time in the company's time zone.",
                GetCurrentDateArgs,
                side_effects=False,
                fn=get_current_date,
            ),
            Tool(
                "submit_leave_request",
                "Request days off (at most 30 days, starting today or later).",
                LeaveRequestArgs,
                side_effects=True,
                fn=submit_leave_request,
            ),
            Tool(
                "create_it_ticket",
                "Open an IT support ticket; returns its number.",
                ItTicketArgs,
                side_effects=True,
                fn=create_it_ticket,
            ),
            Tool(
                "run_python",
                "Run a short Python 3 program in an isolated sandbox without network or "
                "files; returns stdout, stderr, exit_code and limit_hit.",
                RunPythonArgs,
                side_effects=True,
                fn=partial(run_python, sandbox),
                disabled_reason=disabled,
            ),
        ]
    )
