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


@dataclass(slots=True)
class _Piece:
    """A sentence (or a cut of one) with the token counts from each word start to its end."""

    start: int
    end: int
    tokens: int
    word_starts: list[tuple[int, int]]  # (char offset, tokens from there to the end)

    def tail(self, max_tokens: int) -> _Piece | None:
        """The longest run of whole words at the end that fits in max_tokens."""
        for n, (start, tokens) in enumerate(self.word_starts):
            if 0 < tokens <= max_tokens:
                return _Piece(start, self.end, tokens, self.word_starts[n:])
        return None


def _section_spans(section: Section, tokenizer, config: ChunkerConfig) -> list[tuple[int, int]]:
    units = _units(section)
    texts = [section.text[a - section.start : b - section.start] for a, b in units]
    encodings = tokenizer.encode_batch(texts, add_special_tokens=False)
    pieces: list[_Piece] = []
    for (a, _b), enc in zip(units, encodings, strict=True):
        pieces.extend(_split_long(a, enc, config))
    return _pack(pieces, config)


def _split_long(offset: int, encoding, config: ChunkerConfig) -> list[_Piece]:
    """A unit longer than the budget is cut at token boundaries, with overlap."""
    n = len(encoding.ids)
    if n == 0:
        return []
    step = max(1, config.max_tokens - int(config.max_tokens * config.overlap))
    out = []
    for first in range(0, n, step):
        last = min(first + config.max_tokens, n) - 1
        out.append(_piece(offset, encoding, first, last))
        if last == n - 1:
            break
    return out


def _piece(offset: int, encoding, first: int, last: int) -> _Piece:
    words = encoding.word_ids
    starts = [
        (offset + encoding.offsets[t][0], last - t + 1)
        for t in range(first, last + 1)
        if t == first or words[t] != words[t - 1]
    ]
    return _Piece(
        offset + encoding.offsets[first][0], offset + encoding.offsets[last][1],
        last - first + 1, starts,
    )  # fmt: skip


def _pack(pieces: list[_Piece], config: ChunkerConfig) -> list[tuple[int, int]]:
    """Greedy packing; each new chunk repeats the previous chunk's tail up to the overlap."""
    budget, overlap = config.max_tokens, int(config.max_tokens * config.overlap)
    spans: list[tuple[int, int]] = []
    current: list[_Piece] = []
    for piece in pieces:
        if current and sum(p.tokens for p in current) + piece.tokens > budget:
            spans.append((current[0].start, current[-1].end))
            current = _overlap_tail(current, min(overlap, budget - piece.tokens))
        current.append(piece)
    if current:
        spans.append((current[0].start, current[-1].end))
    return spans


def _overlap_tail(pieces: list[_Piece], room: int) -> list[_Piece]:
    """Whole sentences from the end while they fit, then whole words of one more."""
    tail: list[_Piece] = []
    for piece in reversed(pieces):
        used = sum(p.tokens for p in tail)
        if used + piece.tokens <= room:
            tail.insert(0, piece)
            continue
        part = piece.tail(room - used)
        if part is not None:
            tail.insert(0, part)
        break
    return tail
