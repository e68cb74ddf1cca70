"""Plain data passed between the parsers, the chunker, the index and its callers."""

from __future__ import annotations

from dataclasses import dataclass, field

VISIBILITIES = ("private", "group", "everyone")


class RetrievalError(Exception):
    """A refused operation with a message that says what to do."""


class ParseError(RetrievalError):
    """A file that cannot be ingested: corrupt, empty, encrypted, too large, unsupported."""


class ReindexRequired(RetrievalError):
    """The index on disk was built with another embedding model."""


@dataclass(slots=True)
class Principal:
    """Who is searching. `None` in place of a principal means a trusted caller."""

    user_id: int | None
    groups: list[str]
    is_admin: bool = False


@dataclass(slots=True)
class Section:
    """A run of text under one heading path; `start`/`end` index the extracted text."""

    headings: list[str]
    text: str
    start: int
    end: int
    page: int | None = None


@dataclass(slots=True)
class ParsedDocument:
    title: str
    text: str  # the whole extracted text; every offset points into it
    sections: list[Section]


@dataclass(slots=True)
class ChunkSpan:
    """A piece of one section, ready to embed."""

    ordinal: int
    section: str  # breadcrumb: "Title > Heading > Subheading"
    page: int | None
    start: int
    end: int
    text: str


@dataclass(slots=True)
class DocumentInfo:
    """What the index knows about a document: identity, source and who may see it."""

    document_id: int
    name: str
    title: str
    collection: str = "default"
    owner_id: int | None = None
    visibility: str = "everyone"
    group_name: str | None = None
    content_hash: str = ""
    version: int = 1

    def visible_to(self, principal: Principal | None) -> bool:
        if principal is None or principal.is_admin or self.visibility == "everyone":
            return True
        if principal.user_id is not None and self.owner_id == principal.user_id:
            return True
        return self.visibility == "group" and self.group_name in principal.groups


@dataclass(slots=True)
class Hit:
    chunk_id: str
    document: str
    document_id: int
    title: str
    section: str
    page: int | None
    start: int
    end: int
    text: str
    score: float
    flagged: bool = False
    flag_reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, object]:
        return {
            "chunk_id": self.chunk_id,
            "document": self.document,
            "document_id": self.document_id,
            "title": self.title,
            "section": self.section,
            "page": self.page,
            "start": self.start,
            "end": self.end,
            "text": self.text,
            "score": round(self.score, 6),
            "flagged": self.flagged,
            "flag_reasons": list(self.flag_reasons),
        }
