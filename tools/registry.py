"""Typed tools: what each one takes, how it is shown to the model, how a call is checked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from tools.context import ToolContext
from tools.errors import Problem, ToolError, ToolFailure
from tools.schema import DATE_PATTERN, arguments_schema

ToolFn = Callable[[Any, ToolContext], Any]


@dataclass(slots=True)
class Tool:
    name: str
    description: str
    args_model: type[BaseModel]
    side_effects: bool
    fn: ToolFn
    requires_role: str | None = None
    # Set when the tool cannot run here (no sandbox); it is then hidden from the model.
    disabled_reason: str | None = None

    def arguments_schema(self) -> dict[str, Any]:
        return arguments_schema(self.args_model)

    def call_schema(self) -> dict[str, Any]:
        """The JSON the model must produce to call this tool."""
        return {
            "type": "object",
            "properties": {"name": {"enum": [self.name]}, "arguments": self.arguments_schema()},
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }


@dataclass(slots=True)
class Outcome:
    """What running a validated call produced: a JSON-able result or an error."""

    result: Any = None
    error: ToolError | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


class ToolRegistry:
    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for tool in tools:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def all(self) -> list[Tool]:
        return list(self._tools.values())

    def enabled(self) -> list[Tool]:
        return [t for t in self._tools.values() if t.disabled_reason is None]

    def json_schemas(self) -> dict[str, dict[str, Any]]:
        """One call schema per enabled tool: `{"name": <tool>, "arguments": {...}}`."""
        return {tool.name: tool.call_schema() for tool in self.enabled()}

    def call_schema(self) -> dict[str, Any]:
        """All enabled tools' call schemas as one schema for the constrained decoder."""
        return {"anyOf": list(self.json_schemas().values())}

    def render_for_prompt(self) -> str:
        lines = [
            "You can call these tools. To call one, answer with only "
            '{"name": "<tool>", "arguments": {...}}.'
        ]
        for tool in self.enabled():
            marker = " Needs the user's approval." if tool.side_effects else ""
            lines.append(f"- {_signature(tool)}: {tool.description}{marker}")
        return "\n".join(lines)

    def validate(
        self, name: str, arguments: Any, context: ToolContext | None = None
    ) -> BaseModel | ToolError:
        """The validated arguments, or an error that says which argument is wrong and why."""
        tool = self._tools.get(name)
        if tool is None:
            return self._unknown(name)
        if tool.disabled_reason is not None:
            return ToolError("tool_disabled", f"{name} is disabled: {tool.disabled_reason}")
        if not isinstance(arguments, dict):
            return ToolError(
                "invalid_arguments",
                f"Arguments for {name} must be a JSON object, got {type(arguments).__name__}.",
                [Problem("(arguments)", "expected an object")],
            )
        try:
            return tool.args_model.model_validate(arguments, context={"tool_context": context})
        except ValidationError as exc:
            return _validation_error(tool, exc)

    def check_access(self, name: str, context: ToolContext) -> ToolError | None:
        tool = self._tools.get(name)
        if tool is None:
            return self._unknown(name)
        if tool.requires_role is not None and context.role not in (tool.requires_role, "admin"):
            return ToolError(
                "forbidden", f"{name} needs the {tool.requires_role} role; ask an administrator."
            )
        return None

    def execute(self, name: str, args: BaseModel, context: ToolContext) -> Outcome:
        """Run a call whose arguments `validate` accepted and whose access was checked."""
        tool = self._tools[name]
        try:
            return Outcome(result=tool.fn(args, context))
        except ToolFailure as exc:
            return Outcome(error=exc.error)

    def _unknown(self, name: str) -> ToolError:
        names = ", ".join(t.name for t in self.enabled())
        return ToolError(
            "unknown_tool",
            f"There is no tool named {name!r}. Available tools: {names}.",
            [Problem("name", f"must be one of: {names}")],
        )


def _validation_error(tool: Tool, exc: ValidationError) -> ToolError:
    allowed = ", ".join(tool.args_model.model_fields) or "none"
    details = []
    for err in exc.errors(include_url=False):
        where = ".".join(str(part) for part in err["loc"]) or "(arguments)"
        if err["type"] == "extra_forbidden":
            problem = f"unknown argument; allowed arguments: {allowed}"
        elif err["type"] == "missing":
            problem = "required"
        else:
            problem = err["msg"].removeprefix("Value error, ")
        details.append(Problem(where, problem))
    summary = "; ".join(f"{d.field}: {d.problem}" for d in details)
    return ToolError("invalid_arguments", f"Invalid arguments for {tool.name}: {summary}", details)


def _signature(tool: Tool) -> str:
    schema = tool.arguments_schema()
    required = set(schema["required"])
    parts = []
    for arg, spec in schema["properties"].items():
        text = f"{arg}: {_type_name(spec)}"
        if arg not in required and "default" in spec:
            text += f" = {json.dumps(spec['default'])}"
        parts.append(text)
    return f"{tool.name}({', '.join(parts)})"


def _type_name(spec: dict[str, Any]) -> str:
    if "enum" in spec:
        return "|".join(json.dumps(v) for v in spec["enum"])
    if spec.get("pattern") == DATE_PATTERN:
        return "date YYYY-MM-DD"
    return str(spec.get("type", "any"))
