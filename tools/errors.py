"""Errors a tool call can end in, shaped so the model can read them and try again."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Problem:
    """One thing wrong with one argument."""

    field: str
    problem: str


@dataclass(slots=True)
class ToolError:
    """A structured error: `{"error": {"code", "message", "details": [{"field", "problem"}]}}`."""

    code: str
    message: str
    details: list[Problem] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.message,
                "details": [{"field": d.field, "problem": d.problem} for d in self.details],
            }
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ToolError:
        body = data["error"]
        details = [Problem(d["field"], d["problem"]) for d in body.get("details", [])]
        return cls(body["code"], body["message"], details)


class ToolFailure(Exception):
    """Raised by a tool function for an expected failure (bad dates, nothing configured...)."""

    def __init__(self, code: str, message: str, details: list[Problem] | None = None) -> None:
        super().__init__(message)
        self.error = ToolError(code, message, details or [])
