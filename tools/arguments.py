"""The built-in tools' arguments. Field names and types are a contract with the prompt,
the constrained decoder and the web UI; change them only together."""

from __future__ import annotations

from datetime import date
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationInfo, field_validator

from tools.calculator import MAX_LENGTH, CalculatorError, parse
from tools.context import ToolContext

MAX_LEAVE_DAYS = 30
MAX_CODE_CHARS = 20_000


def _iso_date(value: object) -> object:
    # JSON has no date type: accept exactly YYYY-MM-DD, not timestamps or other formats.
    if isinstance(value, str):
        try:
            return date.fromisoformat(value) if len(value) == 10 else _bad_date(value)
        except ValueError:
            return _bad_date(value)
    if isinstance(value, date):
        return value
    raise ValueError(f"expected a date written as YYYY-MM-DD, got {type(value).__name__}")


def _bad_date(value: str) -> date:
    raise ValueError(f"{value!r} is not a date; write it as YYYY-MM-DD, e.g. 2026-12-22")


IsoDate = Annotated[date, BeforeValidator(_iso_date)]


class _Arguments(BaseModel):
    model_config = ConfigDict(extra="forbid")


class SearchDocumentsArgs(_Arguments):
    query: str = Field(min_length=1, max_length=1000, description="What to look for.")
    k: int = Field(5, ge=1, le=20, description="How many passages to return.")


class CalculatorArgs(_Arguments):
    expression: str = Field(
        min_length=1, max_length=MAX_LENGTH, description="Arithmetic, e.g. '17.5% of 2340'."
    )

    @field_validator("expression")
    @classmethod
    def _parses(cls, value: str) -> str:
        try:
            parse(value)
        except CalculatorError as exc:
            raise ValueError(str(exc)) from exc
        return value


class GetCurrentDateArgs(_Arguments):
    pass


class LeaveRequestArgs(_Arguments):
    start_date: IsoDate = Field(description="First day off.")
    end_date: IsoDate = Field(description="Last day off (inclusive).")
    leave_type: Literal["annual", "sick", "parental", "unpaid"]
    note: str = Field("", max_length=1000, description="Optional note for the approver.")

    @field_validator("start_date")
    @classmethod
    def _not_in_the_past(cls, value: date, info: ValidationInfo) -> date:
        context = (info.context or {}).get("tool_context") or ToolContext(user_id=None)
        today = context.today()
        if value < today:
            raise ValueError(f"{value} is in the past (today is {today}); pick a future date")
        return value

    @field_validator("end_date")
    @classmethod
    def _after_start_and_short_enough(cls, value: date, info: ValidationInfo) -> date:
        start = info.data.get("start_date")
        if start is None:
            return value
        if value < start:
            raise ValueError(f"{value} is before the start date {start}")
        days = (value - start).days + 1
        if days > MAX_LEAVE_DAYS:
            raise ValueError(
                f"the request covers {days} days; at most {MAX_LEAVE_DAYS} days per request"
            )
        return value


class ItTicketArgs(_Arguments):
    summary: str = Field(min_length=3, max_length=500, description="What is wrong.")
    category: Literal["hardware", "software", "access", "security", "other"]
    priority: Literal["low", "medium", "high", "urgent"]


class RunPythonArgs(_Arguments):
    code: str = Field(
        min_length=1, max_length=MAX_CODE_CHARS, description="A Python 3 program; print results."
    )
