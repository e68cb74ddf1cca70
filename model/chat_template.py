"""ChatTemplate: the model's own Jinja chat template, rendered in a sandbox.

Templates come with model files, so they are untrusted code: they run in Jinja's immutable
sandbox with the same helpers the reference library gives them (`raise_exception`,
`strftime_now`, a `tojson` that does not HTML-escape, loop controls), so a template written
for it renders the same text here.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import jinja2
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """The template refused the conversation or could not be rendered."""


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    def __init__(self, source: str, special_tokens: dict[str, str] | None = None) -> None:
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        try:
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise ChatTemplateError(
                f"the model's chat template does not parse (line {exc.lineno}): {exc.message}"
            ) from exc
        self.source = source
        self.special_tokens = dict(special_tokens or {})

    def render(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
        **variables: Any,
    ) -> str:
        """The prompt text for `messages` (dicts with `role` and usually `content`)."""
        _check_messages(messages)
        try:
            return self._template.render(
                messages=messages,
                tools=tools,
                add_generation_prompt=add_generation_prompt,
                **self.special_tokens,
                **variables,
            )
        except jinja2.TemplateError as exc:
            raise ChatTemplateError(f"the chat template rejected the conversation: {exc}") from exc


def _check_messages(messages: list[dict[str, Any]]) -> None:
    if not isinstance(messages, list):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ChatTemplateError(
                f"message {index} must be a dict with a string 'role' "
                "(system, user, assistant or tool) and its 'content'"
            )
