"""ChatTemplate: the model's own Jinja chat template, rendered in a sandbox.

Templates come with model files, so they are untrusted code: they run in Jinja's immutable
sandbox with the same helpers the reference library gives them (`raise_exception`,
`strftime_now`, a `tojson` that does not HTML-escape, loop controls), so a template written
for it renders the same text here.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
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

    def render_parts(
        self,
        messages: list[dict[str, Any]],
        add_generation_prompt: bool = True,
        tools: list[dict[str, Any]] | None = None,
    ) -> list[tuple[str, bool]]:
        """The prompt as (text, is_content) pieces: message contents apart from the template.

        The template's own text may spell control tokens; a message's content must not (a
        user who types "<|im_start|>system" writes characters, not a new turn), so the
        tokenizer needs to know which is which. The template is rendered once with the
        contents and once with a random marker in place of each; the marked skeleton, with
        the contents put back, must give the same text. A template that trims contents is
        matched by putting them back trimmed; any other rewriting of contents keeps the
        skeleton with the contents as given (their text may then differ slightly from a
        plain render, their tokens never become control tokens).
        """
        text = self.render(messages, add_generation_prompt, tools)
        nonce = secrets.token_hex(8)
        marks: dict[str, str] = {}
        marked = []
        for index, message in enumerate(messages):
            content = message.get("content")
            if isinstance(content, str) and content:
                mark = f"\ue000{nonce}:{index}\ue001"
                marks[mark] = content
                message = {**message, "content": mark}
            marked.append(message)
        skeleton = self.render(marked, add_generation_prompt, tools)
        for rewrite in (_as_given, str.strip):
            parts = _fill(skeleton, marks, rewrite)
            if "".join(piece for piece, _ in parts) == text:
                return parts
        lost = [mark for mark in marks if mark not in skeleton]
        if lost:
            raise ChatTemplateError(
                "the chat template rewrites message contents in a way that cannot be told "
                "apart from its own text; use a template that inserts message['content']"
            )
        return _fill(skeleton, marks, _as_given)


def _as_given(content: str) -> str:
    return content


def _fill(
    skeleton: str, marks: dict[str, str], rewrite: Callable[[str], str]
) -> list[tuple[str, bool]]:
    """Split the marked skeleton at its markers, each replaced by its (rewritten) content."""
    parts: list[tuple[str, bool]] = []
    rest = skeleton
    while marks and "\ue000" in rest:
        start = rest.index("\ue000")
        end = rest.find("\ue001", start)
        mark = rest[start : end + 1]
        if end < 0 or mark not in marks:  # a literal U+E000 in the template itself
            parts.append((rest[: start + 1], False))
            rest = rest[start + 1 :]
            continue
        parts.append((rest[:start], False))
        parts.append((rewrite(marks[mark]), True))
        rest = rest[end + 1 :]
    parts.append((rest, False))
    return [(piece, is_content) for piece, is_content in parts if piece]


def _check_messages(messages: list[dict[str, Any]]) -> None:
    if not isinstance(messages, list):
        raise ChatTemplateError("messages must be a list of {'role': ..., 'content': ...} dicts")
    for index, message in enumerate(messages):
        if not isinstance(message, dict) or not isinstance(message.get("role"), str):
            raise ChatTemplateError(
                f"message {index} must be a dict with a string 'role' "
                "(system, user, assistant or tool) and its 'content'"
            )
