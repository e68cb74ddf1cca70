"""Sections -> chunks: structure first (never across a heading), then the embedder's tokens."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from retrieval.types import ChunkSpan, ParsedDocument, Section

_SENTENCE_END = re.compile(r"(?<=[.!?;:])\s+|\n+")


@dataclass(slots=True)
class ChunkerConfig:
    max_tokens: int = 200
    overlap: float = 0.15

    def __post_init__(self) -> None:
        if self.max_tokens < 16:
            raise ValueError("max_tokens must be at least 16")
        if not 0 <= self.overlap < 0.5:
            raise ValueError("overlap must be in [0, 0.5)")


def load_tokenizer(model_path: str | Path):
    """The embedding model's own tokenizer (tokenizer.json), without truncation."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(model_path) / "tokenizer.json"))
    tokenizer.no_truncation()
    tokenizer.no_padding()
    return tokenizer


def breadcrumb(title: str, headings: list[str]) -> str:
    parts = [title, *headings]
    if len(parts) > 1 and parts[1] == parts[0]:
        parts.pop(1)
    return " > ".join(p for p in parts if p)


def chunk_document(doc: ParsedDocument, tokenizer, config: ChunkerConfig) -> list[ChunkSpan]:
    chunks: list[ChunkSpan] = []
    for section in doc.sections:
        crumb = breadcrumb(doc.title, section.headings)
        for start, end in _section_spans(section, tokenizer, config):
            text = doc.text[start:end]
            chunks.append(ChunkSpan(len(chunks), crumb, section.page, start, end, text))
    return chunks


def _units(section: Section) -> list[tuple[int, int]]:
    """Sentence-like spans (absolute offsets) with surrounding whitespace trimmed."""
    spans, pos = [], 0
    for m in _SENTENCE_END.finditer(section.text):
        spans.append((pos, m.start()))
        pos = m.end()
    spans.append((pos, len(section.text)))
    return [(section.start + a, section.start + b) for a, b in spans if b > a]


def _section_spans(section: Section, tokenizer, config: ChunkerConfig) -> list[tuple[int, int]]:
    units = _units(section)
    texts = [section.text[a - section.start : b - section.start] for a, b in units]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    pieces: list[tuple[int, int, int]] = []  # (start, end, tokens)
    for (a, _b), enc in zip(units, encodings, strict=True):
        pieces.extend(_split_long(a, enc, config))
    return _pack(pieces, config)


def _split_long(offset: int, encoding, config: ChunkerConfig) -> list[tuple[int, int, int]]:
    """A unit longer than the budget is cut at token boundaries, with overlap."""
    n = len(encoding.ids)
    if n <= config.max_tokens:
        end = encoding.offsets[-1][1] if n else 0
        return [(offset, offset + end, n)] if n else []
    step = max(1, config.max_tokens - int(config.max_tokens * config.overlap))
    out = []
    for first in range(0, n, step):
        last = min(first + config.max_tokens, n) - 1
        out.append(
            (
                offset + encoding.offsets[first][0],
                offset + encoding.offsets[last][1],
                last - first + 1,
            )
        )
        if last == n - 1:
            break
    return out


def _pack(pieces: list[tuple[int, int, int]], config: ChunkerConfig) -> list[tuple[int, int]]:
    """Greedy packing; each new chunk repeats the previous chunk's tail up to the overlap."""
    budget, overlap = config.max_tokens, int(config.max_tokens * config.overlap)
    spans: list[tuple[int, int]] = []
    current: list[tuple[int, int, int]] = []
    for piece in pieces:
        if current and sum(p[2] for p in current) + piece[2] > budget:
            spans.append((current[0][0], current[-1][1]))
            tail: list[tuple[int, int, int]] = []
            for prev in reversed(current):
                kept = sum(p[2] for p in tail) + prev[2]
                if kept > overlap or kept + piece[2] > budget:
                    break
                tail.insert(0, prev)
            current = tail
        current.append(piece)
    if current:
        spans.append((current[0][0], current[-1][1]))
    return spans
