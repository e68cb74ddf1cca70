"""What the index stores per chunk and per document, and how it goes to and from disk."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np

from retrieval.types import ChunkSpan, DocumentInfo


@dataclass(slots=True, frozen=True)
class ChunkRecord:
    document_id: int
    ordinal: int
    section: str
    page: int | None
    start: int
    end: int
    text: str
    flag_reasons: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(
            [
                self.document_id,
                self.ordinal,
                self.section,
                self.page,
                self.start,
                self.end,
                self.text,
                list(self.flag_reasons),
            ]  # fmt: skip
        )

    @classmethod
    def from_json(cls, line: str) -> ChunkRecord:
        d, o, s, p, a, b, t, f = json.loads(line)
        return cls(d, o, s, p, a, b, t, tuple(f))


@dataclass(slots=True)
class PreparedDocument:
    """A parsed, chunked, scanned and embedded document, ready to commit to an index."""

    info: DocumentInfo
    text: str
    chunks: list[ChunkSpan]
    flags: list[list[str]]
    vectors: np.ndarray

    def records(self) -> list[ChunkRecord]:
        return [
            ChunkRecord(
                self.info.document_id,
                c.ordinal,
                c.section,
                c.page,
                c.start,
                c.end,
                c.text,
                tuple(flags),
            )  # fmt: skip
            for c, flags in zip(self.chunks, self.flags, strict=True)
        ]


def documents_to_json(docs: dict[int, DocumentInfo]) -> str:
    return json.dumps([asdict(d) for d in docs.values()])


def documents_from_json(text: str) -> dict[int, DocumentInfo]:
    return {d["document_id"]: DocumentInfo(**d) for d in json.loads(text)}
