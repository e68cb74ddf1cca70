"""Errors that carry a stable code and a message that says what to do."""

from __future__ import annotations


class AssistantError(Exception):
    """Bad input or a refused operation: shown to the user, never a stack trace."""

    status = 400

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class NotFound(AssistantError):
    status = 404


class Forbidden(AssistantError):
    status = 403


class Conflict(AssistantError):
    status = 409
