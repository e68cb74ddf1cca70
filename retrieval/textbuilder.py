"""Builds a document's extracted text while recording where each section lies in it."""

from __future__ import annotations

from dataclasses import dataclass, field

from retrieval.types import ParsedDocument, Section


@dataclass(slots=True)
class _Open:
    headings: tuple[str, ...]
    page: int | None
    start: int
    end: int
    is_row: bool


@dataclass(slots=True)
class TextBuilder:
    """Parsers feed headings, paragraphs and table rows in reading order.

    Consecutive paragraphs under the same headings (and page) form one section; a table
    row is always a section of its own so it can be retrieved alone.
    """

    title: str = ""
    page: int | None = None
    _parts: list[str] = field(default_factory=list)
    _length: int = 0
    _stack: list[tuple[int, str]] = field(default_factory=list)
    _sections: list[_Open] = field(default_factory=list)

    @property
    def has_headings(self) -> bool:
        return bool(self._stack)

    def heading(self, level: int, text: str) -> None:
        text = " ".join(text.split())
        if not text:
            return
        while self._stack and self._stack[-1][0] >= level:
            self._stack.pop()
        self._stack.append((level, text))
        self._append(text, "\n\n")

    def block(self, text: str, keep_lines: bool = False) -> None:
        text = _clean(text, keep_lines)
        if text:
            self._add(text, "\n\n", is_row=False)

    def row(self, text: str) -> None:
        text = " ".join(text.split())
        if text:
            self._add(text, "\n", is_row=True)

    def build(self, fallback_title: str) -> ParsedDocument:
        text = "".join(self._parts)
        sections = [
            Section(list(s.headings), text[s.start : s.end], s.start, s.end, s.page)
            for s in self._sections
        ]
        first_heading = next((s.headings[0] for s in sections if s.headings), "")
        title = self.title or first_heading or fallback_title
        return ParsedDocument(title=title, text=text, sections=sections)

    def _add(self, text: str, separator: str, is_row: bool) -> None:
        start = self._append(text, separator)
        headings = tuple(h for _, h in self._stack)
        last = self._sections[-1] if self._sections else None
        if (
            last is not None
            and not is_row
            and not last.is_row
            and last.headings == headings
            and last.page == self.page
            and last.end == start - len(separator)
        ):
            last.end = self._length
            return
        self._sections.append(_Open(headings, self.page, start, self._length, is_row))

    def _append(self, text: str, separator: str) -> int:
        if self._length:
            self._parts.append(separator)
            self._length += len(separator)
        start = self._length
        self._parts.append(text)
        self._length += len(text)
        return start


def _clean(text: str, keep_lines: bool) -> str:
    if not keep_lines:
        return " ".join(text.split())
    lines = [line.rstrip() for line in text.strip("\n").splitlines()]
    return "\n".join(lines).strip()
